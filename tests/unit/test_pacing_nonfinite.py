"""The pure rules the executors of both engines share: an iteration's time
(Pacing) and the NaN/Inf policy (NonfiniteRule). No MXNet here."""
import math

import numpy as np
import pytest

from mxhet.config import WorkerConfig
from mxhet.errors import ConfigError, NonFiniteError
from mxhet.policy.nonfinite import NonfiniteRule
from mxhet.policy.pacing import Pacing


def schedule(seconds):
    return 4.0 if 10 <= seconds < 20 else 2.0


def test_fixed_iterations_last_factor_times_base_and_follow_the_schedule():
    pacing = Pacing(schedule, base_s=0.05)
    assert pacing.duration(0.0) == pytest.approx(0.1)
    assert pacing.duration(15.0) == pytest.approx(0.2)
    assert pacing.duration(25.0) == pytest.approx(0.1)
    # the cluster sleeps what the compute left of f x T; a slower compute is an overrun
    assert pacing.padding(15.0, 0.05) == pytest.approx(0.15)
    assert pacing.padding(0.0, 0.3) == pytest.approx(-0.2)


def test_without_a_base_time_the_measured_iteration_is_stretched_by_its_factor():
    pacing = Pacing(schedule)
    assert pacing.padding(0.0, 0.03) == pytest.approx(0.03)   # f = 2: as long again
    assert pacing.padding(12.0, 0.03) == pytest.approx(0.09)  # f = 4
    assert Pacing(lambda t: 1.0).padding(0.0, 0.03) == 0.0     # a full-speed device never waits


def test_random_times_draw_in_a_fixed_order_from_the_engines_rng():
    def draws(seed, dist, jitter):
        pacing = Pacing(lambda t: 3.0, base_s=0.01, dist=dist, jitter=jitter, rng=np.random.RandomState(seed))
        return np.array([pacing.duration(0.0) for _ in range(3000)])

    exp = draws(1, "exp", 0.0) / 0.03
    assert abs(exp.mean() - 1.0) < 0.06 and abs(np.median(exp) - np.log(2)) < 0.05   # Exp(1)
    jittered = np.log(draws(1, "fixed", 0.2) / 0.03)
    assert abs(jittered.mean()) < 0.02 and abs(jittered.std() - 0.2) < 0.02        # log-normal, sigma 0.2
    assert np.array_equal(draws(5, "exp", 0.2), draws(5, "exp", 0.2))
    assert not np.array_equal(draws(5, "exp", 0.2), draws(6, "exp", 0.2))
    # the order of the draws is part of the contract (runs repeat bit for bit): normal, then exponential
    rng = np.random.RandomState(9)
    noise = math.exp(rng.normal(0.0, 0.2))
    noise *= rng.exponential()
    expected = 3.0 * 0.01 * noise
    assert draws(9, "exp", 0.2)[0] == expected


def test_bad_pacing_arguments_are_refused():
    with pytest.raises(ValueError, match="lognormal"):
        Pacing(schedule, 0.1, dist="lognormal", rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="need an rng"):
        Pacing(schedule, 0.1, dist="exp")
    with pytest.raises(ValueError, match="-0.1"):
        Pacing(schedule, -0.1)


def test_both_engines_take_the_iteration_time_from_the_same_rule():
    from mxhet.modes.base import SyncMode
    from mxhet.sim.engine import Device

    config = WorkerConfig(slot=1, num_slots=2, slowdown=2.0, slowdown_schedule=((5.0, None, 8.0),), base_iter_s=0.01)
    dev = Device(1, config, None, [], None, None, 1, np.random.RandomState(0))
    cluster = SyncMode.pacing_for(config)
    for t in (0.0, 4.9, 5.0, 60.0):
        assert dev.iteration_time(t, 0.01, 0.0) == cluster.duration(t)


def test_nonfinite_rule_pushes_clean_arrays_stops_or_zeroes_the_bad_ones():
    assert NonfiniteRule("stop").decide("model delta", 0, 1, 3, []) == "push"
    assert NonfiniteRule("skip").decide("model delta", 0, 1, 3, ["w"]) == "zero"
    with pytest.raises(NonFiniteError, match=r"model delta of worker slot 2 \(rank 5\) in round 7: a, b, c and 2 more"):
        NonfiniteRule("stop").decide("model delta", 2, 5, 7, ["a", "b", "c", "d", "e"])
    with pytest.raises(ConfigError, match="'ignore'"):
        NonfiniteRule("ignore")
