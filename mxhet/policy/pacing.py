"""How long one iteration of a device takes: the heterogeneity profile as a rule.

A device's iteration lasts ``f(t) x T x noise`` seconds: ``f(t)`` its slowdown
``t`` seconds after training started (constant, or a speed schedule), ``T``
the base iteration time of a slowdown-1 device, and ``noise`` 1, or a draw
(a log-normal jitter, and/or Exp(1) under ``dist="exp"``, the G-CADA paper's
exponential computing times). Both engines ask this rule: the cluster's
executor sleeps the difference between the duration and the real compute time
(:meth:`Pacing.padding`), the simulator advances its virtual clock by the
duration (:meth:`Pacing.duration`). Draws come from the ``rng`` the engine
owns (seeded per device), in a fixed order, so runs repeat exactly.
"""
import math

DISTRIBUTIONS = ("fixed", "exp")


class Pacing:
    """The iteration time of one device.

    Args:
        slowdown_at: ``callable(seconds since start) -> factor`` (e.g.
            :meth:`mxhet.config.WorkerConfig.slowdown_at`).
        base_s: seconds of one iteration at slowdown 1 (0: unknown -- the
            cluster then stretches each measured iteration by ``f - 1``).
        dist: ``"fixed"`` or ``"exp"`` (times Exp(1) per iteration).
        jitter: sigma of a log-normal factor per iteration (0: none).
        rng: a ``numpy.random.RandomState``-like source of draws; needed
            when ``dist="exp"`` or ``jitter > 0``.

    Raises:
        ValueError: for an unknown ``dist``, a negative ``base_s`` or
            ``jitter``, or draws needed without an ``rng``.
    """

    def __init__(self, slowdown_at, base_s=0.0, dist="fixed", jitter=0.0, rng=None):
        if dist not in DISTRIBUTIONS:
            raise ValueError("iteration time distribution must be one of %s, got %r" % (DISTRIBUTIONS, dist))
        if base_s < 0 or jitter < 0:
            raise ValueError("base iteration time and jitter must be >= 0, got %r and %r" % (base_s, jitter))
        if rng is None and (dist != "fixed" or jitter > 0):
            raise ValueError("random iteration times (dist=%r, jitter=%r) need an rng" % (dist, jitter))
        self.slowdown_at = slowdown_at
        self.base_s = float(base_s)
        self.dist = dist
        self.jitter = float(jitter)
        self.rng = rng

    def noise(self):
        """This iteration's random factor (1 for fixed times); draws in a fixed order."""
        value = math.exp(self.rng.normal(0.0, self.jitter)) if self.jitter > 0 else 1.0
        if self.dist == "exp":
            value *= self.rng.exponential()
        return value

    def duration(self, since_start):
        """Seconds the iteration that starts ``since_start`` s into training takes."""
        return self.slowdown_at(since_start) * self.base_s * self.noise()

    def padding(self, since_start, elapsed):
        """Seconds to wait after ``elapsed`` s of real compute so that the
        iteration lasts what the profile says; negative when the real compute
        already took longer (an overrun). Without a base time the measured
        iteration is stretched by its factor: ``(f - 1) x elapsed``."""
        if self.base_s > 0:
            return self.duration(since_start) - elapsed
        return (self.slowdown_at(since_start) - 1.0) * elapsed
