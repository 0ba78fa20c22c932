"""The worker programs of ``nodelay`` and ``preduce`` (see :mod:`mxhet.protocol`).

Both talk to a rule in the State Server beyond the stop protocol: nodelay's
master (:class:`mxhet.control.nodelay.TransferRule`) asks for transfers while
the worker computes; Partial Reduce's controller
(:class:`mxhet.control.preduce.PartialReduceController`) puts workers in
groups that reduce through a rendezvous slot.
"""
from ..policy.nodelay import NoDelayPolicy
from ..policy.worker import Action
from .effects import (Compute, Handover, JoinReduce, ListeningCompute, Merged, ModelArrived, Notify, Now, Poll,
                      Ready, Reduce, TakeIn, WantsStop)


def nodelay(opts, stats):
    """Asynchronous SGD without gradient delay (Algorithm 1): the worker keeps
    computing while its last transfer is merged and waits only when τ =
    ``opts["staleness"]`` of its gradients are missing from the last global
    model it received (:class:`~mxhet.policy.nodelay.NoDelayPolicy`).

    Thread 2 is the :class:`~.effects.ListeningCompute`: a transfer asked for
    during an iteration is carried out at once, except the job's last, kept
    for the end of the iteration (after which the worker computes nothing
    more). A worker's wish to stop rides on its announcement of a round; the
    State Server makes it the last round for all, and every worker waits for
    that round's model, so every worker stops with the same global model.
    """
    # stats.rounds > 0: a worker started again counts the job's rounds from the one it joins at
    policy = NoDelayPolicy(opts["staleness"], first_round=stats.rounds)
    yield TakeIn(-1)          # lines 6-11: the initial global model is in x and x_init
    policy.arrived(-1)
    held = []                 # transfers asked for and not yet carried out

    def transfers(stop_ok):
        while held and (stop_ok or not held[0].stop):
            asked = held.pop(0)
            policy.requested(asked.round, asked.stop)
            yield Handover(asked.round)            # lines 22-23
            _, k, _ = policy.transferred()
            stats.rounds += 1
            stats.local_iters.append(k)

    def take(events):
        for event in events:
            if isinstance(event, ModelArrived):    # lines 8-11
                yield TakeIn(event.round)
                policy.arrived(event.round)
                stats.round_end_s.append((yield Now()))
                yield Merged(event.round)
            else:
                held.append(event)
        yield from transfers(stop_ok=True)

    while True:
        yield from take((yield Poll(block=False)))
        if policy.blocked:
            stats.waited_iterations += 1   # this step ended with the worker waiting at s = tau
        while policy.blocked or (policy.stopping and not policy.done):   # line 5
            yield from take((yield Poll(block=True)))
        if policy.done:
            return
        while True:
            asked = yield ListeningCompute(local_step=True)
            if asked is None:
                break
            held.extend(asked)
            yield from transfers(stop_ok=False)
        if policy.completed() is Action.QUERY:   # line 16
            # Stop after the announced round if the condition holds once it is done
            # (so --max-rounds R means R transfers, as localsgd's R averages).
            stats.rounds += 1
            wants = yield WantsStop()
            stats.rounds -= 1
            yield Notify(policy.round, policy.pending, bool(wants))


def join_fields(opts):
    """The controller's settings (``ReduceJoin``'s fields) from ``preduce``'s options."""
    return dict(group_size=opts["group_size"], dynamic=opts["weights"] == "dynamic", alpha=float(opts["alpha"]),
                avoid_frozen=opts["frozen_filter"], window=opts["frozen_window"])


def preduce(opts, stats):
    """Partial Reduce (Algorithm 2): one local SGD step, then READY with the
    iteration number k; the controller puts the worker in a group of P, whose
    members replace their models by Σ β_j·x_j through a rendezvous slot and go
    on with k = max k_j. A wish to stop travels with READY; the controller then
    answers stop once every live worker has been in a group. A worker that
    left is never grouped again; once fewer than P are live, the groups are
    of all the workers left. A group released by a member's death (``--elastic``)
    is not counted: the worker keeps its model and k. The job's output,
    the average of all N models, is the runtime's goodbye."""
    # a worker back after its death (--elastic) goes on from the iteration number of the model it takes
    k = (yield JoinReduce(**join_fields(opts))) or 0
    while True:
        yield Compute(local_step=True)
        k += 1
        wants = yield WantsStop()
        answer = yield Ready(k, bool(wants))
        if answer.stop:
            return
        if (yield Reduce(answer.group, answer.slot, answer.weight, answer.fill)):
            continue   # released by a member's death: the worker keeps its model and its k
        k = answer.k
        stats.rounds += 1
        stats.local_iters.append(1)
