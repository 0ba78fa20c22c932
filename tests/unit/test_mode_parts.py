"""The parts SyncMode composes (mxhet/modes/: timing, abort, guard, resume,
stopping), each driven alone with a fake clock and plain arrays."""
import mxnet as mx
import numpy as np
import pytest

from mxhet.errors import NonFiniteError
from mxhet.modes.abort import abandon_iteration
from mxhet.modes.guard import NonfiniteGuard
from mxhet.modes.resume import counters_state, restore_counters
from mxhet.modes.stats import WorkerStats
from mxhet.modes.stopping import StopProtocol
from mxhet.modes.timing import StepTimer
from mxhet.policy.pacing import Pacing


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_step_splits_its_seconds_into_compute_and_wait_and_counts_overruns():
    clock, stats = Clock(), WorkerStats()
    timer = StepTimer(stats, Pacing(lambda t: 2.0, base_s=0.5), clock)
    assert timer.start() == 100.0
    clock.now += 0.25                       # forward and backward: f x T = 1 s, so 0.75 s to emulate
    assert timer.padding() == pytest.approx(0.75)
    clock.now += 0.75
    assert timer.computed(32) == (pytest.approx(1.0), 101.0)
    clock.now += 0.5                        # the exchange
    timer.waited(101.0)
    assert (stats.compute_s, stats.wait_s, stats.iterations, stats.samples) == (1.0, 0.5, 1, 32)
    timer.pause(2.0)                        # a snapshot between steps is no compute
    clock.now += 3.5                        # an iteration slower than f x T: no padding, an overrun
    assert timer.padding() < 0 and stats.overruns == 1
    assert timer.computed(32)[0] == pytest.approx(1.5)
    assert timer.since_start() == pytest.approx(5.0)


def test_an_abandoned_iteration_is_compute_time_but_no_iteration_and_its_sequel_is_wait():
    clock, stats = Clock(), WorkerStats()
    timer = StepTimer(stats, Pacing(lambda t: 1.0), clock)
    timer.start()
    clock.now += 0.4
    seen = []

    def on_abort():
        seen.append("on_abort")
        clock.now += 0.1

    abandon_iteration(timer, stats, lambda: seen.append("drop"), on_abort)
    assert seen == ["drop", "on_abort"]     # the gradients are dropped before the mode goes on
    assert (stats.aborted, stats.iterations, stats.samples) == (1, 0, 0)
    assert stats.compute_s == pytest.approx(0.4) and stats.wait_s == pytest.approx(0.1)
    assert timer.t_last == pytest.approx(100.5)


class _Param:
    def __init__(self, name):
        self.name = name


def test_the_guard_zeroes_a_nonfinite_push_under_skip_and_stops_under_stop():
    stats = WorkerStats(rank=2)
    params = [_Param("w"), _Param("b")]
    guard = NonfiniteGuard("skip", 3, stats)
    good = [mx.nd.ones((2,)), mx.nd.full((2,), 3e38)]     # large but finite (a float32 sum would overflow)
    assert guard.check(good, "gradient", 0, params) and stats.skipped_pushes == 0
    bad = [mx.nd.ones((2,)), mx.nd.array([1.0, np.inf])]
    assert not guard.check(bad, "gradient", 1, params)
    assert stats.skipped_pushes == 1 and all(float(a.abs().sum().asscalar()) == 0 for a in bad)
    with pytest.raises(NonFiniteError, match=r"slot 3 \(rank 2\) in round 4: b"):
        NonfiniteGuard("stop", 3, stats).check([mx.nd.ones((1,)), mx.nd.array([np.nan])], "gradient", 4, params)


def test_a_checkpoint_restores_the_counters_the_stop_conditions_read():
    saved = counters_state(WorkerStats(rounds=7, iterations=40, samples=1280, compute_s=9.0))
    assert saved == {"rounds": 7, "iterations": 40, "samples": 1280}
    stats = WorkerStats()
    restore_counters(stats, saved)
    assert (stats.rounds, stats.iterations, stats.samples, stats.compute_s) == (7, 40, 1280, 0.0)


class _Channel:
    def __init__(self, log, value):
        self.log, self.value = log, value

    def pull(self, keys, outs):
        self.log.append(("pull", list(keys)))
        for out in outs:
            out[:] = self.value


def test_the_final_model_is_pulled_after_the_barrier_into_the_replica():
    log = []
    weights = [mx.nd.zeros((2,)), mx.nd.zeros((1,)), mx.nd.zeros((3,))]
    wbufs = [mx.nd.zeros(w.shape) for w in weights]
    out = StopProtocol.final_model(_Channel(log, 5.0), lambda: log.append("barrier"), [0, 2], wbufs,
                                   lambda: weights)
    assert log == ["barrier", ("pull", [0, 2])]
    assert out == [wbufs[0], wbufs[2]]
    assert [float(w.sum().asscalar()) for w in weights] == [10.0, 0.0, 15.0]   # key 1 stays local
    standalone = StopProtocol.final_model(None, lambda: log.append("barrier"), [1], wbufs, lambda: weights)
    assert standalone == [weights[1]] and log.count("barrier") == 1


def test_the_stop_request_and_condition_decide_the_wish():
    stop = StopProtocol()
    assert not stop.wants(WorkerStats(rounds=3))
    stop.condition = lambda stats: stats.rounds >= 3
    assert stop.wants(WorkerStats(rounds=3)) and not stop.wants(WorkerStats(rounds=2))
    stop.request()
    assert stop.requested and stop.wants(WorkerStats(rounds=0))
