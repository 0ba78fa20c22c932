"""The worker-side policies as plain state machines: no MXNet, no sockets, no clock."""
import subprocess
import sys

import pytest

from mxhet.errors import ConfigError
from mxhet.policy.speed import MovingAverage
from mxhet.policy.worker import Action, ADSPPolicy, ESyncPolicy, GradientPolicy, LocalSGDPolicy


def test_policies_import_neither_mxnet_nor_zmq():
    code = ("import sys, mxhet.policy, mxhet.policy.worker, mxhet.control.state_rule; "
            "print(sorted(m for m in ('mxnet', 'zmq', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_esync_blocking_round():
    p = ESyncPolicy()
    for k in (1, 2):
        assert p.completed() is Action.QUERY and p.k == k
        p.answer(0, ready=False)
        assert p.after_query() is Action.CONTINUE
    assert p.completed() is Action.QUERY
    p.answer(0, ready=True, slowest=2)
    assert p.after_query() is Action.AGGREGATE
    assert p.aggregated() == (0, 3, 2)
    assert (p.round, p.k, p.ready, p.slowest) == (1, 0, False, -1)


def test_esync_test_batch_is_reported_with_k_zero_once():
    p = ESyncPolicy(round_=2)
    assert not p.tested
    assert p.test_batch_done() is Action.QUERY and (p.round, p.k) == (2, 0)   # QUERY-STATE(r, 0, c, t_e)
    p.answer(2, ready=False)
    assert p.after_query() is Action.CONTINUE and p.tested
    assert p.completed() is Action.QUERY and p.k == 1   # the first local iteration
    with pytest.raises(ConfigError, match="test batch"):
        p.test_batch_done()


def test_esync_delayed_ready_aborts_the_iteration_in_progress():
    p = ESyncPolicy()
    p.completed()
    assert p.after_query() is Action.CONTINUE        # no answer yet: implicit NOT-READY
    assert p.before_update() is Action.CONTINUE
    p.answer(0, ready=True, slowest=5)                # arrives during the next iteration
    assert p.before_update() is Action.ABORT
    assert p.aggregated() == (0, 1, 5)                # the aborted iteration is not counted


def test_esync_ignores_answers_of_other_rounds_and_a_second_ready():
    p = ESyncPolicy(round_=4)
    p.completed()
    p.answer(3, ready=True, slowest=1)                # late, from the previous round
    assert p.after_query() is Action.CONTINUE and p.late_replies == 1
    p.answer(4, ready=True, slowest=2)
    p.answer(4, ready=True, slowest=9)                # a duplicate changes nothing
    assert p.slowest == 2
    with pytest.raises(ConfigError):
        ESyncPolicy(round_=-1)


def test_esync_local_step_cap_aggregates_without_a_ready():
    p = ESyncPolicy(max_local_steps=2)
    p.completed()
    p.answer(0, ready=False)
    assert p.after_query() is Action.CONTINUE
    p.completed()
    p.answer(0, ready=False)
    assert p.after_query() is Action.AGGREGATE       # K reached: aggregate, NOT-READY or not
    assert p.aggregated() == (0, 2, -1)               # no READY named the slowest
    p.completed()
    assert p.after_query() is Action.CONTINUE         # delayed ACKs: no answer yet, under the cap
    p.answer(1, ready=True, slowest=3)                # a READY before the cap ends the round as usual
    assert p.before_update() is Action.ABORT and p.aggregated() == (1, 1, 3)
    assert ESyncPolicy(round_=5, max_local_steps=1).completed() is Action.QUERY   # it still asks every time
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="max_local_steps"):
            ESyncPolicy(max_local_steps=bad)


def test_local_sgd_aggregates_every_tau_steps():
    p = LocalSGDPolicy(3)
    actions = [p.completed() for _ in range(3)]
    assert actions == [Action.CONTINUE, Action.CONTINUE, Action.AGGREGATE]
    assert p.aggregated() == 3 and p.k == 0
    for bad in (0, 1.5, True):
        with pytest.raises(ConfigError):
            LocalSGDPolicy(bad)


def test_gradient_modes_push_every_iteration():
    assert GradientPolicy().completed() is Action.PUSH


def test_adsp_spreads_commits_over_the_period_and_waits_for_the_next_when_met():
    p = ADSPPolicy(report_margin=0.05)
    p.schedule(now=0.0, target=4, left=8.0)           # 4 commits due in 8 s: aim at the middle of 2 s slots
    assert p.next_commit == pytest.approx(1.0)
    assert p.completed(now=0.6, capability=0.2) is Action.CONTINUE
    assert p.completed(now=0.95, capability=0.2) is Action.COMMIT    # nearer to this boundary than the next
    assert p.committed(0.1) == 2 and p.commits == 1 and p.commit_cost == pytest.approx(0.1)
    p.committed(0.3)
    assert p.commit_cost == pytest.approx(0.8 * 0.1 + 0.2 * 0.3)
    p.schedule(now=3.0, target=2, left=5.0)           # target met: no commit until the next period
    assert p.next_commit is None and p.next_report == pytest.approx(8.05)
    assert p.completed(now=5.0, capability=0.2) is Action.CONTINUE
    assert p.completed(now=8.1, capability=0.2) is Action.REPORT
    assert p.holds_local_work
    assert p.completed(now=8.2, capability=0.2, stopping=True) is Action.COMMIT


def test_moving_average():
    avg = MovingAverage(0.5)
    assert avg.get(7.0) == 7.0 and avg.value is None
    assert avg.update(2.0) == 2.0
    assert avg.update(4.0) == 3.0 and avg.samples == 2
    with pytest.raises(ValueError):
        MovingAverage(0.0)
