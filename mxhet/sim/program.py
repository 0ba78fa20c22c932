"""The simulator's interpreter of worker programs (:mod:`mxhet.protocol`).

:func:`run_program` is one device's SimPy process: it runs the mode's
program, carrying each effect out in virtual time with the simulation's
servers, link model and clock -- the same program the cluster runs
(:class:`mxhet.modes.program.ProgramMode`). Registration with the State
Server before and the goodbye after are the runtime's, as on the cluster.
"""
import dataclasses
import types

from ..errors import ConfigError
from ..control import messages as m
from ..dataplane import copy_all, nbytes
from ..protocol import Clock, Compute, Exchange, Now, Payload, PushAsync, Session, WantsStop
from ..protocol import ShareSpeed
from ..protocol.effects import JOB_OVER
from ..protocol.effects import (Grouped, Handover, JoinReduce, ListeningCompute, Merged, ModelArrived, Notify,
                                Poll, Ready, Reduce, TakeIn, TransferAsked)
from .slots import rendezvous
from ..modes import get_mode
from .engine import SyncRound


def _compute(sim, dev, effect):
    yield from sim.iterate(dev)
    dev.compute(local_step=effect.local_step)


def _payload(sim, dev, payload):
    """The keys and values a push of ``payload`` carries."""
    if payload is Payload.DELTAS:
        return list(range(len(dev.params))), sim.deltas(dev)
    # The gradients themselves, not copies: the device waits in the Exchange or PushAsync until its push
    # has arrived, where the servers sum or apply it at once and keep nothing of it, and nothing else
    # writes a device's gradients meanwhile. (Copying cost an AlexNet Async run a tenth of its time.)
    keys = sim.grad_keys
    return keys, [dev.params[k].grad() for k in keys]


def _exchange(sim, dev, effect):
    members = getattr(sim, "members", None)   # --score-members (a stand-in simulation may have none)
    scored = members is not None and effect.payload is Payload.DELTAS
    if scored:
        members.member(dev, effect.round, sim.env.now)
    keys, values = _payload(sim, dev, effect.payload)
    result, votes = yield from sim.exchange(dev, (sim.job.mode, effect.round), values, keys, vote=effect.vote)
    if scored:
        members.global_model(effect.round, sim.env.now, result)
    sim.take_global(dev, result, keys)
    return votes


def _push_async(sim, dev, effect):
    keys, values = _payload(sim, dev, effect.payload)
    yield from sim.push_async(dev, values, keys)   # (which takes the pulled model into the replica)


def _clock(sim, dev, effect):
    t0 = sim.env.now
    yield from sim.request(dev, dev.message(m.Clock, clock=effect.iterations))
    sim.blocked(dev, t0, query=True)
    dev.stats.waited_iterations += 1


_HANDLERS = {
    Compute: _compute,
    Exchange: _exchange,
    PushAsync: _push_async,
    Clock: _clock,
    WantsStop: lambda sim, dev, effect: sim.wants_stop(dev),
    Now: lambda sim, dev, effect: sim.env.now,
}



def _share_speed(sim, dev, effect):
    """DyLU's speeds: this device's value is in the table once its push crossed the link; the pull
    of every device's value crosses it back (one 4-byte key per device, as on the cluster)."""
    table = getattr(sim, "speed_table", None)
    if table is None:
        table = sim.speed_table = [0.0] * len(sim.devices)
    n = len(table)
    t0 = sim.env.now
    yield sim.env.timeout(sim.job.network.transfer(dev.slot, 4, 1))
    table[dev.slot] = float(effect.iteration_s)
    seen = tuple(table)
    yield sim.env.timeout(sim.job.network.transfer(dev.slot, 4 * n, n))
    dev.stats.bytes_pushed += 4
    dev.stats.bytes_pulled += 4 * n
    sim.blocked(dev, t0, sync=True)
    return seen


_HANDLERS[ShareSpeed] = _share_speed


# -- rounds whose members the State Server names (mxhet.modes.rounds, mxhet.control.membership) --
class _MemberRound(SyncRound):
    """A round of the m members the State Server named: it completes after m
    pushes; the servers' updater divides by the job's N, so each push is scaled
    by N/m (not at all while nobody left: the arithmetic of a full round)."""

    def __init__(self, env, servers, keys, members, num_devices):
        super().__init__(env, servers, keys, members)
        self.scale = num_devices / members

    def arrive(self, values, vote=0.0):
        if self.scale != 1:
            values = [v * self.scale for v in values]
        super().arrive(values, vote)


def _member_exchange(sim, dev, effect):
    """An Exchange of a mode whose rounds the State Server names, as on the
    cluster: enter the round (its m members and their stop ballots), exchange
    with the m members only, then say done (the cluster's pull barrier)."""
    t0 = sim.env.now
    reply = yield from sim.request(dev, dev.message(m.RoundEnter, round=effect.round, want_stop=effect.vote > 0))
    sim.blocked(dev, t0, query=True)
    if reply.over:   # after the job's agreed stop (it rejoined while the last round was open): push nothing
        return JOB_OVER
    index = (sim.job.mode, effect.round)
    if index not in sim._rounds:
        keys = list(range(len(dev.params))) if effect.payload is Payload.DELTAS else sim.grad_keys
        sim._rounds[index] = _MemberRound(sim.env, sim.servers, keys, reply.target, len(sim.devices))
    votes = yield from _exchange(sim, dev, effect)
    t1 = sim.env.now
    yield from sim.request(dev, dev.message(m.RoundDone, round=effect.round))
    sim.blocked(dev, t1, query=True)
    return votes


def _leaves_now(sim, dev):
    """True once this device's ``--events`` leave time has come (checked at iteration boundaries;
    once only: a device that joined again stays)."""
    at = sim.job.leaves.get(dev.slot) if getattr(sim.job, "leaves", None) else None
    return at is not None and sim.env.now >= at and getattr(dev, "joined_at", None) is None


def run_program(sim, dev, program, trace=None):
    """SimPy process: device ``dev`` of simulation ``sim`` runs ``program``
    (``program(opts, stats)``); ``trace`` as :class:`mxhet.protocol.Session`'s.
    A device with an ``--events`` join runs it again from its join time
    (:func:`_rejoin`).

    Raises:
        ConfigError: the program yields an effect the simulator cannot carry out.
    """
    standalone = not getattr(sim.spec, "distributed", True)   # local: no servers, the device's model is the job's
    if not standalone:
        yield from sim.register(dev)
    handlers = _HANDLERS
    mode = getattr(sim.job, "mode", None)   # (a stand-in job may name none)
    elastic = bool(getattr(sim.job, "leaves", None))   # (--events: sync's elastic executor)
    if mode is not None and getattr(get_mode(mode, elastic), "member_rounds", False):
        handlers = {**_HANDLERS, Exchange: _member_exchange}
    while True:
        session = Session(program(sim.spec.resolve(sim.job.mode_options), dev.stats), trace)
        effect = session.advance()
        left = False
        while effect is not None:
            if isinstance(effect, Compute) and _leaves_now(sim, dev):
                dev.departed_at = sim.env.now   # the script left its loop: the rounds go on without it
                left = True
                break
            handler = handlers.get(type(effect))
            if handler is None:
                raise ConfigError("the simulator cannot carry out %r" % (effect,))
            outcome = handler(sim, dev, effect)
            result = (yield from outcome) if isinstance(outcome, types.GeneratorType) else outcome
            effect = session.advance(result)
        if standalone:
            for key, w in enumerate(dev.weights()):
                w.copyto(sim.servers.weights[key])
            return
        if left:
            yield from _drain(sim, dev)
        dev.left_loop = left   # (sim.leave records it where the State Server cannot tell it from the end)
        yield from sim.leave(dev)
        if not (left and (yield from _rejoin(sim, dev))):
            return


def _drain(sim, dev):
    """A nodelay device that leaves its loop hands over the transfers asked of it or announced by it and
    finishes those in flight first (each push applied whole and reported, as :meth:`mxhet.modes.nodelay.NoDelay._leave_elastic`
    does); other modes have none."""
    box = sim.__dict__.get("_mailboxes", {}).get(dev.slot)
    while box is not None and (box.couriers or box.requests or box.announced > box.handed):
        if box.requests:   # a transfer asked of it (a member of that round): w.x handed over
            _handover(sim, dev, Handover(box.requests.pop(0).round))
            continue
        box.rearm_idle()
        box.rearm()
        yield box.idle | box.wake   # a transfer done, or one asked (the answer to its announcement)


def _rejoin(sim, dev):
    """Device ``dev`` left; at its ``--events`` join time it registers again, as a restarted
    cluster worker does: the State Server names the first round it takes part in (the next
    round boundary, :meth:`mxhet.control.membership.RoundRendezvous.join`), it takes the
    global model and a fresh local optimizer. Returns False (nothing done) when it has no
    join, or every other device stopped before its time, or the job agreed to stop (the
    State Server's ``Registered.over``)."""
    at = getattr(sim.job, "joins", {}).get(dev.slot)
    if at is None:
        return False
    if at > sim.env.now:
        yield sim.env.timeout(at - sim.env.now)
    if all(other.stopped for other in sim.devices if other is not dev):
        return False
    dev.stopped = False
    reply = yield from sim.register(dev)
    if reply.over:
        # the others agreed to stop while it came back: no round is left for it (a cluster worker started
        # again that late leaves with exit 0, mxhet.modes.rounds.leave_too_late)
        yield from sim.leave(dev)
        return False
    dev.stats.rounds = reply.round     # the program counts the job's rounds from there
    dev.stats.rejoined_at_round = reply.round
    sim.__dict__.get("_mailboxes", {}).pop(dev.slot, None)   # nodelay: nothing from before it left
    dev.joined_at = sim.env.now
    clear_optimizer_state(dev.trainer)
    sim.take_global(dev, sim.servers.snapshot())
    return True


# -- nodelay and Partial Reduce ----------------------------------------------------------------
# (own effects: the State Server told without waiting, a model moved in the background, events
# polled between iterations, rendezvous slots)

class _Mailbox:
    """What reaches a nodelay device while it computes or waits (transfer
    requests, merged models), its ``x_init`` and the iteration in progress."""

    def __init__(self, env):
        self.env = env
        self.requests = []   # TransferAsked
        self.arrivals = []   # (round, merged arrays)
        self.wake = env.event()
        self.x_init = None
        self.iteration = None   # (virtual end, duration) of a ListeningCompute not yet done
        self.members = {}       # --events: round -> the members its transfer was requested from
        self.couriers = 0       # transfers in flight
        self.announced = -1     # the last round announced (Notify)
        self.handed = -1        # the last round handed over
        self.idle = env.event()

    def rearm_idle(self):
        if self.idle.triggered:
            self.idle = self.env.event()

    def courier_done(self):
        self.couriers -= 1
        if not self.couriers and not self.idle.triggered:
            self.idle.succeed()

    def post(self, box, item):
        box.append(item)
        if not self.wake.triggered:
            self.wake.succeed()

    def rearm(self):
        if self.wake.triggered:
            self.wake = self.env.event()

    def events(self):
        arrived = tuple(ModelArrived(r) for r, _ in self.arrivals)
        asked, self.requests = tuple(self.requests), []
        return arrived + asked


def _mailbox(sim, dev):
    boxes = sim.__dict__.setdefault("_mailboxes", {})
    if dev.slot not in boxes:
        boxes[dev.slot] = _Mailbox(sim.env)
    return boxes[dev.slot]


def _post(sim, dev, request, on_reply):
    """A request without waiting; ``on_reply(reply)`` runs when its (possibly
    deferred) answer arrives. Requests reach the State Server in the order sent."""
    latency = sim.job.network.message(dev.slot)
    there = sim.env.timeout(latency)

    def go():
        yield there
        reply = sim._answer(dev, request)
        if reply is None:  # deferred: the State Server answers when the rule releases it
            event = sim.env.event()
            sim._deferred[(dev.rank, request.seq)] = event
            reply = yield event
        else:
            yield sim.env.timeout(latency)
        if not reply.ok:
            raise ConfigError("State Server refused %s of slot %d: %s" % (request.TYPE, dev.slot, reply.error))
        dev.stats.state_replies += 1
        on_reply(reply)
    dev.stats.state_queries += 1
    sim.env.process(go())


def _nonfinite(sim, dev, arrays, what, round_index):
    """The job's NaN/Inf policy on ``arrays`` about to be pushed, as
    :meth:`mxhet.modes.base.SyncMode.check_finite`: True if finite, False if
    zeroed (``skip``); raises NonFiniteError under ``stop``."""
    import mxnet as mx
    import numpy as np
    from ..modes.base import nonfinite_indices
    from ..policy.nonfinite import NonfiniteRule
    if arrays and isinstance(arrays[0], mx.nd.NDArray):
        bad = nonfinite_indices(arrays)
    else:   # NumPy replicas (mxhet-bench scale)
        bad = [i for i, a in enumerate(arrays) if not np.isfinite(a).all()]
    if not bad:
        return True
    names = [getattr(dev.params[i], "name", "#%d" % i) for i in bad]
    policy = getattr(sim.job, "on_nonfinite", "stop")   # (a stand-in job may have none)
    NonfiniteRule(policy).decide(what, dev.slot, dev.rank, round_index, names)
    dev.stats.skipped_pushes += 1
    for a in arrays:
        a[:] = 0
    return False


def _listening_compute(sim, dev, effect):
    box = _mailbox(sim, dev)
    if box.iteration is None:
        duration = dev.iteration_time(sim.env.now, sim.job.base_iter_s, sim.job.jitter)
        box.iteration = (sim.env.now + duration, duration)
    end, duration = box.iteration
    while sim.env.now < end:
        box.rearm()
        yield sim.env.timeout(end - sim.env.now) | box.wake
        if box.requests:   # thread 2 answers them now; the iteration goes on after
            asked, box.requests = tuple(box.requests), []
            return asked
    box.iteration = None
    dev.stats.compute_s += duration
    dev.compute(local_step=effect.local_step)
    return None


def _poll(sim, dev, effect):
    box = _mailbox(sim, dev)
    if effect.block and not (box.requests or box.arrivals):
        t0 = sim.env.now
        box.rearm()
        yield box.wake
        sim.blocked(dev, t0)
    return box.events()


def _notify(sim, dev, effect):
    box = _mailbox(sim, dev)
    box.announced = effect.round

    def asked(reply):
        box.members[reply.round] = reply.members
        box.post(box.requests, TransferAsked(reply.round, reply.stop))
    _post(sim, dev, dev.message(m.Notify, round=effect.round, pending=effect.pending, want_stop=effect.want_stop),
          asked)


def _merged(sim, dev, effect):
    _post(sim, dev, dev.message(m.Merged, round=effect.round), lambda reply: None)


def _courier(sim, dev, round_, wx, box):
    keys = list(range(len(dev.params)))
    size = nbytes(wx)
    transfer = sim.job.network.transfer(dev.slot, size, len(keys))
    yield sim.env.timeout(transfer)
    if getattr(sim.job, "leaves", None):
        result = yield from _member_transfer(sim, dev, round_, wx, box, keys)
    else:
        rnd = sim.sync_round(("nodelay", round_), keys)
        rnd.arrive(wx)
        yield rnd.done
        result = rnd.result
    yield sim.env.timeout(transfer)
    dev.stats.bytes_pushed += size
    dev.stats.bytes_pulled += size
    box.post(box.arrivals, (round_, result))
    box.courier_done()


def _member_transfer(sim, dev, round_, wx, box, keys):
    """``--events``: the cluster's ``--elastic`` transfer (:mod:`mxhet.modes.nodelay`): the push is added on
    arrival (the servers' updater divides by the job's N, so w.x is scaled by N/m, m the round's members),
    reported to the State Server, and the merged model taken once every member's is in or the member is gone."""
    scale = len(sim.devices) / box.members.pop(round_)
    for key, value in zip(keys, wx):
        sim.servers.apply(key, value * scale if scale != 1 else value)
    released = sim.env.event()
    _post(sim, dev, dev.message(m.TransferPushed, round=round_), released.succeed)
    yield released
    return sim.servers.snapshot(keys)


def _handover(sim, dev, effect):
    box = _mailbox(sim, dev)
    weights = dev.weights()
    wx = [x - xi for x, xi in zip(weights, box.x_init)]
    if _nonfinite(sim, dev, wx, "model update w.x", effect.round):
        for x, xi in zip(weights, box.x_init):
            x.copyto(xi)
    else:   # zeros pushed: the local work since the last transfer is dropped
        for x, xi in zip(weights, box.x_init):
            xi.copyto(x)
    box.couriers += 1
    box.handed = effect.round
    sim.env.process(_courier(sim, dev, effect.round, wx, box))


def _take_in(sim, dev, effect):
    box = _mailbox(sim, dev)
    weights = dev.weights()
    if effect.round < 0:   # the initial global model, in x already
        box.x_init = [w.copy() for w in weights]
        return
    round_, merged = box.arrivals.pop(0)
    if round_ != effect.round:
        raise ConfigError("model of round %d taken in while round %d's arrived first" % (effect.round, round_))
    for x, xi, g in zip(weights, box.x_init, merged):
        wx = x - xi
        g.copyto(xi)
        (xi + wx).copyto(x)
    for k, g in enumerate(merged):
        dev.global_copy[k] = g.copy()


def _join_reduce(sim, dev, effect):
    rv = rendezvous(sim)
    reply = yield from sim.request(dev, dev.message(m.ReduceJoin, **dataclasses.asdict(effect)))
    if reply.model_slot < 0:
        return None
    # a device back (--events SLOT:join@T) starts from the latest complete group's model, held for it
    keys = rv.keys[reply.model_slot]
    result = rv.store.snapshot(keys)
    yield sim.env.timeout(sim.job.network.message(dev.slot) + sim.job.network.transfer(dev.slot, nbytes(result),
                                                                                         len(keys)))
    copy_all(result, dev.weights())
    dev.stats.bytes_pulled += nbytes(result)
    dev.stats.rejoined_at_round = reply.k
    return reply.k


def _ready(sim, dev, effect):
    t0 = sim.env.now
    dev.stats.state_queries += 1
    reply = yield from sim.request(dev, dev.message(m.ReduceReady, k=effect.k, want_stop=effect.want_stop))
    sim.blocked(dev, t0, query=True)
    if reply.stop:
        return Grouped(stop=True)
    return Grouped(stop=False, group=reply.round, slot=reply.group_slot, weight=reply.weight, k=reply.k,
                   fill=reply.target)


def _reduce(sim, dev, effect):
    rv = rendezvous(sim)
    net = sim.job.network
    keys = rv.keys[effect.slot]
    weights = dev.weights()
    values = [w * effect.weight for w in weights]
    _nonfinite(sim, dev, values, "weighted model", dev.stats.rounds)
    size = nbytes(values)
    transfer = net.transfer(dev.slot, size, len(keys))
    t1 = sim.env.now
    yield sim.env.timeout(transfer)
    for key, value in zip(keys, values):
        rv.store.apply(key, value)
    if effect.fill:   # a group smaller than P (after departures): the slot counts P pushes
        yield sim.env.timeout(transfer * effect.fill)
        for _ in range(effect.fill):
            for key, value in zip(keys, values):
                rv.store.apply(key, value * 0)
    yield sim.env.timeout(net.message(dev.slot))   # the push's acknowledgement
    sim.blocked(dev, t1, sync=True)
    t2 = sim.env.now
    dev.stats.state_queries += 1
    yield from sim.request(dev, dev.message(m.ReducePushed, group=effect.group))
    sim.blocked(dev, t2, query=True)
    t3 = sim.env.now
    yield sim.env.timeout(net.message(dev.slot))   # the pull request
    result = rv.store.snapshot(keys)
    yield sim.env.timeout(transfer)
    copy_all(result, weights)
    sim.blocked(dev, t3, sync=True)
    dev.stats.bytes_pushed += size
    dev.stats.bytes_pulled += size
    return False   # not released: no device of the simulator dies in preduce (--events refuses it)


_HANDLERS.update({
    ListeningCompute: _listening_compute,
    Poll: _poll,
    Notify: _notify,
    Merged: _merged,
    Handover: _handover,
    TakeIn: _take_in,
    JoinReduce: _join_reduce,
    Ready: _ready,
    Reduce: _reduce,
})


# -- esync: the State Server's answers, abortable iterations, the delta aggregation -----------------
import mxnet as mx   # noqa: E402

from kvstore_ext.keys import ESYNC_COUNT_KEY   # noqa: E402
from ..dataplane.weighting import DeltaWeighting   # noqa: E402
from ..gluon_private import clear_optimizer_state   # noqa: E402
from ..protocol.effects import (AggregateDeltas, AwaitAnswer, Iterate, Iterated, Listen, ResetOptimizer,  # noqa: E402
                                RoundTrip, SendReset, StateQuery)


def _listen(sim, dev, effect):
    dev.answers = effect.answers
    dev.wake = sim.env.event()   # triggered when the answers say: abandon the iteration (or stop)


def _wake(dev):
    if dev.answers.wake and not dev.wake.triggered:
        dev.wake.succeed()


def _answered(dev, reply):
    """A non-blocking query's answer arrived (virtual time of its arrival)."""
    dev.answers.answer(reply)
    if dev.answered is not None and not dev.answered.triggered:
        dev.answered.succeed()
    _wake(dev)


def _iterate(sim, dev, effect):
    if effect.warmup:   # virtual iteration times have no warm-up
        return Iterated(0.0)
    t0 = sim.env.now
    duration = dev.iteration_time(t0, sim.job.base_iter_s, sim.job.jitter)
    if effect.abortable:
        # A READY (or the job's stop) ends the iteration the moment it arrives.
        yield sim.env.timeout(duration) | dev.wake
    else:
        yield sim.env.timeout(duration)
    if dev.answers is not None and dev.answers.stop_decided:   # dropped, not counted
        return Iterated(duration)
    if effect.abortable and dev.answers.abort:
        spent = sim.env.now - t0
        dev.stats.compute_s += spent
        dev.stats.aborted += 1
        dev.skip_batch()
        return Iterated(spent, aborted=True)
    dev.stats.compute_s += duration
    if effect.test:   # its batch is taken from the stream, as the cluster's first step() takes one
        dev.stats.test_batch_s = duration
        dev.skip_batch()
    elif effect.read_loss:
        dev.compute(local_step=effect.local_step, read_loss=True)
        return Iterated(duration, loss=dev.last_loss)
    else:
        dev.compute(local_step=effect.local_step)
    return Iterated(duration)


def _state_query(sim, dev, effect):
    request = dev.message(m.Query, round=effect.round, k=effect.k, c=float(effect.c),
                          since_finish=float(effect.ahead),
                          loss=m.NO_LOSS if effect.loss is None else float(effect.loss))
    dev.stats.state_queries += 1
    t0 = sim.env.now
    reply = None
    if effect.blocking:
        reply = yield from sim.request(dev, request)
    else:
        dev.answered = sim.env.event()
        sim.send(dev, request, lambda answer: _answered(dev, answer))
    sim.blocked(dev, t0, query=True)
    return reply


def _await_answer(sim, dev, effect):
    t0 = sim.env.now
    if not dev.answered.triggered:
        yield sim.env.timeout(effect.timeout) | dev.answered
    sim.blocked(dev, t0, query=True)


class _ControlKeys:
    """The servers' control keys: each holds the plain sum of the round's pushes."""

    def __init__(self):
        self.values = {}

    def apply(self, key, value):
        self.values[key] = value.copy()

    def snapshot(self, keys):
        return [self.values[k].copy() for k in keys]


def _weigh(sim, dev, effect):
    """The count exchange over the link model, then the delta's scaling."""
    weighting = DeltaWeighting(effect.aggregation)
    if not weighting.active:
        return
    from .engine import SyncRound
    index = ("esync-counts", effect.round)
    if index not in sim._rounds:
        sim._rounds[index] = SyncRound(sim.env, _ControlKeys(), [ESYNC_COUNT_KEY], len(sim.devices))
    own = weighting.counts(effect.steps, dev.batch_size, dev.trainer)
    result, _ = yield from sim.exchange(dev, index, [mx.nd.array(own, ctx=dev.weights()[0].context)],
                                        [ESYNC_COUNT_KEY])
    if not getattr(sim, "replaying", False):   # (replaying to a checkpoint: it restores the weights)
        weighting.scale(own, result[0].asnumpy(), len(sim.devices), dev.params, dev.weights(), dev.global_copy)


def _member_aggregate(sim, dev, effect):
    """ESync's round among the members the State Server names, as on the cluster
    (:meth:`mxhet.modes.esync.ESync._member_round`): enter the round with the count
    vector, push to a round of the m members (each push scaled by N/m: the servers'
    ESync rule divides by the job's N), say done. The weighting normalises over the m."""
    weighting = DeltaWeighting(effect.aggregation)
    own = weighting.counts(effect.steps, dev.batch_size, dev.trainer) if weighting.active else ()
    t0 = sim.env.now
    reply = yield from sim.request(dev, dev.message(m.RoundEnter, round=effect.round, want_stop=False,
                                                    counts=tuple(own)))
    sim.blocked(dev, t0, query=True)
    if reply.over:   # after the job's agreed stop (it rejoined while the last round was open): push nothing
        return JOB_OVER
    if weighting.active:
        weighting.scale(own, list(reply.counts), reply.target, dev.params, dev.weights(), dev.global_copy)
    keys = list(range(len(dev.params)))
    index = (sim.job.mode, effect.round)
    if index not in sim._rounds:
        sim._rounds[index] = _MemberRound(sim.env, sim.servers, keys, reply.target, len(sim.devices))
    result, _ = yield from sim.exchange(dev, index, sim.deltas(dev), keys)
    sim.take_global(dev, result)
    t1 = sim.env.now
    yield from sim.request(dev, dev.message(m.RoundDone, round=effect.round))
    sim.blocked(dev, t1, query=True)
    return result


def _deadline_aggregate(sim, dev, effect):
    """``--round-deadline``: a round of the ``effect.members`` devices the State
    Server named, late ones included; each push is the delta times its share
    times m, so the servers' ESync rule (sum / N, each push scaled by N/m)
    applies w += ε·Σ share·Δ."""
    keys = list(range(len(dev.params)))
    index = (sim.job.mode, effect.round)
    if index not in sim._rounds:
        sim._rounds[index] = _MemberRound(sim.env, sim.servers, keys, effect.members, len(sim.devices))
    scale = effect.weight * effect.members
    members = getattr(sim, "members", None)
    if members is not None:   # the replica before its share scales its delta
        members.member(dev, effect.round, sim.env.now, share=effect.weight)
    deltas = sim.deltas(dev)
    sim.in_flight += 1   # the deltas live here until the exchange (a checkpoint waits)
    if effect.remember:   # --late-memory: this late delta becomes the device's memory
        yield from _remember(sim, dev, effect.round, deltas)
    if not sim.replaying:   # (replaying to a checkpoint: only the sizes count)
        deltas = [d * scale for d in deltas]
    if effect.memory:   # --late-memory, the round's keeper: the absent devices' memories, at 1/N each
        stored = yield from _recall(sim, dev, effect.round, effect.memory)
        if not sim.replaying:
            factor = effect.memory_share * effect.members   # the push is scaled by 1/m like the shares
            for arrays in stored:
                for d, a in zip(deltas, arrays):
                    d += a * factor
    sim.in_flight -= 1
    result, _ = yield from sim.exchange(dev, index, deltas, keys)
    if members is not None:
        members.global_model(effect.round, sim.env.now, result)
    sim.take_global(dev, result)
    sim.deadline_log.append((dev.slot, effect.round, effect.weight))


def _remember(sim, dev, round_, deltas):
    """``--late-memory``: push the late delta to the device's memory keys on the servers
    (:func:`kvstore_ext.keys.memory_keys`: a push of the whole model over its link, the
    servers keeping the last one); it is the memory of round ``round_``."""
    size = nbytes(deltas)
    net = sim.job.network
    t0 = sim.env.now
    yield sim.env.timeout(net.transfer(dev.slot, size, len(deltas)))
    sim.late_memory[dev.rank] = (round_, None if sim.replaying else [d.copy() for d in deltas])
    landed = sim.memory_landed.pop(dev.rank, None)
    if landed is not None:
        landed.succeed()
    yield sim.env.timeout(net.message(dev.slot))   # the servers' answer: applied
    sim.blocked(dev, t0, sync=True)
    dev.stats.bytes_pushed += size
    _memory_count(dev, "pushes")
    sim.memory_log.append((dev.slot, round_, "push", dev.rank, round_))


def _memory_count(dev, what):
    """The worker's record of its memory pushes and (as keeper) pulls, as the cluster's
    (:class:`mxhet.modes.stats.WorkerStats`'s ``late_memory``)."""
    if dev.stats.late_memory is None:
        dev.stats.late_memory = {"pushes": 0, "pulls": 0}
    dev.stats.late_memory[what] += 1


def _recall(sim, dev, round_, memory):
    """``--late-memory``, the keeper of round ``round_``: the remembered deltas ``memory``
    names (rank, version, ...), each pulled from the servers once per version (its
    copies kept in ``dev.memory_cache``). Returns their arrays, by rank.

    A memory named before its push landed (the keeper was no member of the round the delta
    entered) is waited for, as the cluster's keeper waits for that round to be over
    (:meth:`mxhet.modes.esync.ESync._add_memories`)."""
    net = sim.job.network
    out = []
    for rank, version in zip(memory[0::2], memory[1::2]):
        have = dev.memory_cache.get(rank)
        if have is None or have[0] != version:
            t0 = sim.env.now
            while sim.late_memory.get(rank, (-1,))[0] < version:
                landed = sim.memory_landed.setdefault(rank, sim.env.event())
                yield landed
            yield sim.env.timeout(net.message(dev.slot))   # the pull's request reaches the servers
            stored = sim.late_memory[rank]
            size = nbytes(dev.weights())
            yield sim.env.timeout(net.transfer(dev.slot, size, len(dev.weights())))
            have = dev.memory_cache[rank] = (stored[0], None if stored[1] is None else
                                             [a.copy() for a in stored[1]])
            sim.blocked(dev, t0, sync=True)
            dev.stats.bytes_pulled += size
            _memory_count(dev, "pulls")
            sim.memory_log.append((dev.slot, round_, "pull", rank, stored[0]))
        out.append(have[1])
    return out


def _aggregate_deltas(sim, dev, effect):
    if effect.members:
        yield from _deadline_aggregate(sim, dev, effect)
        return
    if getattr(sim.job, "leaves", None) and getattr(get_mode(sim.job.mode), "member_rounds", False):
        # Devices leave this job: the rounds of the members named by the State Server. Without
        # --events the round is today's, of all N devices: the same members, and the same virtual
        # time and arithmetic as before the rendezvous existed (no two control messages a round).
        result = yield from _member_aggregate(sim, dev, effect)
        return JOB_OVER if result is JOB_OVER else None
    members = getattr(sim, "members", None)
    if members is not None:
        members.member(dev, effect.round, sim.env.now)
    yield from _weigh(sim, dev, effect)
    keys = list(range(len(dev.params)))
    result, _ = yield from sim.exchange(dev, (sim.job.mode, effect.round), sim.deltas(dev), keys)
    if members is not None:
        members.global_model(effect.round, sim.env.now, result)
    sim.take_global(dev, result)


def _send_reset(sim, dev, effect):
    def on_reset(reply):
        if reply.stop:
            dev.answers.stop()
            _wake(dev)
    sim.send(dev, dev.message(m.Reset, round=effect.round, want_stop=effect.want_stop,
                              since_finish=float(effect.since_finish)), on_reset)
    if not dev.answers.stop_decided:   # a new round: nothing to abandon yet
        dev.wake = sim.env.event()


_HANDLERS.update({
    Listen: _listen,
    Iterate: _iterate,
    RoundTrip: lambda sim, dev, effect: dev.stats.rtt_s,
    StateQuery: _state_query,
    AwaitAnswer: _await_answer,
    AggregateDeltas: _aggregate_deltas,
    ResetOptimizer: lambda sim, dev, effect: clear_optimizer_state(dev.trainer),
    SendReset: _send_reset,
})


# -- ADSP (commit reports to the State Server's scheduler) ----------------------------------------

from ..protocol.effects import Measured, MeasuredCompute, ReportCommits  # noqa: E402


def _measured_compute(sim, dev, effect):
    duration = yield from sim.iterate(dev)
    dev.compute(local_step=effect.local_step, read_loss=True)
    return Measured(duration, dev.last_loss)


def _report_commits(sim, dev, effect):
    t0 = sim.env.now
    reply = yield from sim.request(dev, dev.message(m.Commit, commits=effect.commits, loss=effect.loss,
                                                    commit_cost=effect.commit_cost))
    sim.blocked(dev, t0, query=True)
    return reply.target, reply.period_left


_HANDLERS.update({MeasuredCompute: _measured_compute, ReportCommits: _report_commits})


# -- G-CADA and CADA (their handlers in program_gcada.py) -------------------------------------------

from .program_gcada import HANDLERS as _GCADA_HANDLERS  # noqa: E402

_HANDLERS.update(_GCADA_HANDLERS)
