"""The worker programs of the ported modes (see :mod:`mxhet.protocol`).

A program is called with the mode's resolved options and the worker's
statistics record (``rounds``, ``local_iters``: the per-round accounting both
engines report) and yields :mod:`.effects`. Ported: ``localsgd``, ``sync``,
``async`` and ``dcasgd`` (:func:`asynchronous`), ``ssp``.
"""
from ..policy.stop import StopRule
from ..policy.worker import Action, LocalSGDPolicy
from .effects import Clock, Compute, Exchange, Payload, PushAsync, WantsStop


def _aggregate(stats, payload, local_steps):
    """One synchronous round: count it, vote on stopping with it; returns True
    when the job agreed to stop after it.

    The round is counted before the vote, so a stop condition on
    ``stats.rounds`` (``--max-rounds R``) stops after exactly R rounds.
    """
    index = stats.rounds
    stats.rounds += 1
    stats.local_iters.append(local_steps)
    wants = yield WantsStop()
    votes = yield Exchange(payload, index, StopRule.ballot(wants))
    return StopRule.agreed(votes)


def localsgd(opts, stats):
    """Local SGD / fixed ADACOMM: τ = ``opts["local_steps"]`` local steps,
    then the model deltas are averaged synchronously; every worker stops after
    the same round (the stop vote rides on the average)."""
    policy = LocalSGDPolicy(opts["local_steps"])
    while True:
        yield Compute(local_step=True)
        if policy.completed() is not Action.AGGREGATE:
            continue
        if (yield from _aggregate(stats, Payload.DELTAS, policy.aggregated())):
            return


def sync(opts, stats):
    """Synchronous SGD: every iteration's gradient goes to the servers, which
    apply their mean once every worker's has arrived; the stop vote rides on
    each step's exchange, so every worker runs the same number of steps."""
    while True:
        yield Compute(local_step=False)
        if (yield from _aggregate(stats, Payload.GRADIENTS, 1)):
            return


def _push_gradient(stats):
    """One asynchronous step: count it as a round of one iteration, push its gradient."""
    index = stats.rounds
    stats.rounds += 1
    stats.local_iters.append(1)
    yield PushAsync(Payload.GRADIENTS, index)


def asynchronous(opts, stats):
    """Asynchronous SGD (``async``; ``dcasgd`` is the same worker with the
    delay-compensating updater on the servers): every iteration's gradient is
    pushed and applied on arrival, the model pulled; each worker stops on its
    own, after a push, once it wants to (there is no vote: nobody waits)."""
    while True:
        yield Compute(local_step=False)
        yield from _push_gradient(stats)
        if (yield WantsStop()):
            return


def ssp(opts, stats):
    """Stale synchronous parallel: asynchronous SGD, but after each push the
    worker reports its clock and waits until it is no more than the staleness
    ahead of the slowest worker still training. A worker that stops leaves the
    gate (the runtime's goodbye) so the others do not wait for it; the wish to
    stop is asked again after the wait, which may have outlasted the job."""
    while True:
        yield Compute(local_step=False)
        yield from _push_gradient(stats)
        if (yield WantsStop()):
            return
        yield Clock(stats.iterations)
        if (yield WantsStop()):
            return
