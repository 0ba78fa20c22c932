"""Asynchronous local SGD's worker program (mode ``dylu``; see :mod:`mxhet.protocol`).

Liu, Douillard et al. 2024 (arXiv 2401.09135): a device runs H_i local steps,
pushes its delta without waiting for anyone (the servers apply it on arrival
with Delayed Nesterov, :class:`kvstore_ext.updaters.DelayedNesterov`) and
continues from the global model it pulls. With Dynamic Local Updates, H_i is
H scaled by the device's measured speed relative to the fastest device's
(:func:`mxhet.policy.dylu.local_steps_for`), so every device pushes after
about the same time.
"""
from ..policy.dylu import check_options, fastest, local_steps_for
from ..policy.speed import MovingAverage
from .effects import Compute, Payload, PushAsync, ShareSpeed, WantsStop


def dylu(opts, stats):
    """Asynchronous local SGD with DyLU: per round, H_i local steps, then this
    device's seconds per iteration (its ``stats.compute_s`` over its
    ``stats.iterations`` during the round, smoothed) are shared, the delta
    pushed asynchronously and H_i set for the next round from the fastest
    known device. The first round's H_i comes from the device's first
    iteration, shared as soon as it ends: a device v times slower would
    otherwise run H of its iterations (H·v of the fastest's) before its first
    push, and a run would end that long after its budget, since each worker
    stops alone, right after a push, as the asynchronous modes do.

    Raises:
        ConfigError: for invalid options (:func:`mxhet.policy.dylu.check_options`).
    """
    check_options(opts)
    base = opts["local_steps"]
    speed = MovingAverage()
    steps = base
    first = opts["dynamic"]
    while True:
        compute0, iterations0 = stats.compute_s, stats.iterations
        step = 0
        while step < steps:
            yield Compute(local_step=True)
            step += 1
            if first:   # the first round's H_i, from this device's first iteration and the others' so far
                first = False
                once = stats.compute_s - compute0
                times = yield ShareSpeed(once)
                steps = local_steps_for(base, once, fastest(times))
        done = stats.iterations - iterations0
        if done > 0:
            speed.update((stats.compute_s - compute0) / done)
        times = (yield ShareSpeed(speed.get())) if opts["dynamic"] else ()
        index = stats.rounds
        stats.rounds += 1
        stats.local_iters.append(steps)
        yield PushAsync(Payload.DELTAS, index)
        if (yield WantsStop()):
            return
        if opts["dynamic"]:
            steps = local_steps_for(base, speed.value, fastest(times))
