"""The simulator's interpreter of worker programs (:mod:`mxhet.protocol`).

:func:`run_program` is one device's SimPy process: it runs the mode's
program, carrying each effect out in virtual time with the simulation's
servers, link model and clock -- the same program the cluster runs
(:class:`mxhet.modes.program.ProgramMode`). Registration with the State
Server before and the goodbye after are the runtime's, as on the cluster.
"""
import types

from ..errors import ConfigError
from ..control import messages as m
from ..protocol import Clock, Compute, Exchange, Now, Payload, PushAsync, Session, WantsStop


def _compute(sim, dev, effect):
    yield from sim.iterate(dev)
    dev.compute(local_step=effect.local_step)


def _payload(sim, dev, payload):
    """The keys and values a push of ``payload`` carries."""
    if payload is Payload.DELTAS:
        return list(range(len(dev.params))), sim.deltas(dev)
    keys = sim.grad_keys
    return keys, [dev.params[k].grad().copy() for k in keys]


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
    result = yield from sim.push_async(dev, values, keys)
    sim.take_global(dev, result, keys)


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


def run_program(sim, dev, program, trace=None):
    """SimPy process: device ``dev`` of simulation ``sim`` runs ``program``
    (``program(opts, stats)``); ``trace`` as :class:`mxhet.protocol.Session`'s.

    Raises:
        ConfigError: the program yields an effect the simulator cannot carry out.
    """
    standalone = not getattr(sim.spec, "distributed", True)   # local: no servers, the device's model is the job's
    if not standalone:
        yield from sim.register(dev)
    session = Session(program(sim.spec.resolve(sim.job.mode_options), dev.stats), trace)
    effect = session.advance()
    while effect is not None:
        handler = _HANDLERS.get(type(effect))
        if handler is None:
            raise ConfigError("the simulator cannot carry out %r" % (effect,))
        outcome = handler(sim, dev, effect)
        result = (yield from outcome) if isinstance(outcome, types.GeneratorType) else outcome
        effect = session.advance(result)
    if standalone:
        for key, w in enumerate(dev.weights()):
            w.copyto(sim.servers.weights[key])
        return
    yield from sim.leave(dev)


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
    else:
        dev.compute(local_step=effect.local_step)
    return Iterated(duration)


def _state_query(sim, dev, effect):
    request = dev.message(m.Query, round=effect.round, k=effect.k, c=float(effect.c),
                          since_finish=float(effect.ahead))
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
    weighting.scale(own, result[0].asnumpy(), len(sim.devices), dev.params, dev.weights(), dev.global_copy)


def _aggregate_deltas(sim, dev, effect):
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
