"""The stop protocol's rule, shared by the cluster's modes and the simulator."""
import pytest

from mxhet.modes.base import WorkerStats
from mxhet.policy.stop import StopRule


def test_a_worker_wants_to_stop_when_asked_or_when_its_condition_holds():
    rule = StopRule(condition=lambda stats: stats.rounds >= 3)
    stats = WorkerStats()
    assert not rule.wants(stats)
    stats.rounds = 3
    assert rule.wants(stats)
    stats.rounds = 0
    rule.request()
    assert rule.wants(stats) and rule.requested


def test_the_job_stops_after_the_exchange_in_which_any_worker_voted():
    ballots = [StopRule.ballot(w) for w in (False, False, True)]
    assert ballots == [0.0, 0.0, 1.0]
    assert StopRule.agreed(sum(ballots))
    assert not StopRule.agreed(sum(StopRule.ballot(False) for _ in range(3)))


def test_a_condition_that_is_not_callable_is_refused():
    with pytest.raises(ValueError, match="callable"):
        StopRule(condition=5)
