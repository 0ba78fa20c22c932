"""A worker's clock inside ``step()``: compute and wait accounting, and the
emulated slowdown's padding (:class:`StepTimer`).

Kept apart from the mode so that every mode splits its seconds the same way
(``WorkerStats.compute_s`` / ``wait_s``, :mod:`mxhet.modes.stats`) and only the
modes' hooks decide what happens in the padded time.
"""
import time

import numpy as np

from ..policy.pacing import Pacing


def pacing_for(config):
    """The profile's iteration time for this worker: f(t) x T, times Exp(1)
    draws seeded per slot under ``slowdown_dist="exp"``."""
    return Pacing(config.slowdown_at, config.base_iter_s, config.slowdown_dist,
                  rng=np.random.RandomState([config.slot, 14]))


class StepTimer:
    """Where a worker's seconds go, between and inside its steps.

    ``t_start``: the clock when training started (None before ``setup``);
    ``t_last``: the end of the previous step, where the next iteration's
    compute time begins. Every reading comes from ``clock`` (seconds), which a
    test may replace on the timer (``SyncMode.clock`` is this timer's).

    Args:
        stats: the worker's :class:`~mxhet.modes.stats.WorkerStats`, whose
            ``compute_s``, ``wait_s``, ``iterations``, ``samples`` and
            ``overruns`` this timer counts.
        pacing: the profile's iteration time (:class:`mxhet.policy.pacing.Pacing`).
        clock: ``() -> seconds``, monotonic.
    """

    def __init__(self, stats, pacing, clock=time.monotonic):
        self.stats = stats
        self.pacing = pacing
        self.clock = clock
        self.t_start = self.t_last = None

    def start(self):
        """Training starts now; returns the clock reading."""
        self.t_last = self.t_start = self.clock()
        return self.t_start

    def since_start(self):
        """Seconds since training started."""
        return self.clock() - self.t_start

    def padding(self):
        """Seconds this iteration must still last to take the profile's f x T
        (0 if none). An iteration already slower under a base iteration time
        counts as an overrun: the machine, not the profile, set the pace."""
        now = self.clock()
        pad = self.pacing.padding(now - self.t_start, now - self.t_last)
        if pad <= 0 and self.pacing.base_s > 0:
            self.stats.overruns += 1
        return pad

    def computed(self, batch_size):
        """The iteration's local work is done: count it and its samples.
        Returns ``(capability, now)``: its seconds since the previous step, and the clock."""
        now = self.clock()
        capability = now - self.t_last
        self.stats.compute_s += capability
        self.stats.iterations += 1
        self.stats.samples += batch_size
        return capability, now

    def abandoned(self):
        """An abandoned iteration's seconds so far are compute time, but no iteration."""
        self.stats.compute_s += self.clock() - self.t_last

    def waited(self, since):
        """The step's communication since ``since`` is over: wait time; the next
        iteration's compute time starts now."""
        end = self.clock()
        self.stats.wait_s += end - since
        self.t_last = end

    def pause(self, seconds):
        """Exclude ``seconds`` spent outside training (a snapshot, an exchange
        outside ``step()``) from the next iteration's compute time."""
        if self.t_last is not None:
            self.t_last += seconds
