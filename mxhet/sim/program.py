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
from ..modes import get_mode
from ..protocol import Clock, Compute, Exchange, Now, Payload, PushAsync, Session, WantsStop
from .engine import SyncRound


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
    """True once this device's ``--events`` leave time has come (checked at iteration boundaries)."""
    at = sim.job.leaves.get(dev.slot) if getattr(sim.job, "leaves", None) else None
    return at is not None and sim.env.now >= at


def run_program(sim, dev, program, trace=None):
    """SimPy process: device ``dev`` of simulation ``sim`` runs ``program``
    (``program(opts, stats)``); ``trace`` as :class:`mxhet.protocol.Session`'s.

    Raises:
        ConfigError: the program yields an effect the simulator cannot carry out.
    """
    yield from sim.register(dev)
    session = Session(program(sim.spec.resolve(sim.job.mode_options), dev.stats), trace)
    handlers = _HANDLERS
    if getattr(get_mode(sim.job.mode), "member_rounds", False):
        handlers = {**_HANDLERS, Exchange: _member_exchange}
    effect = session.advance()
    while effect is not None:
        if isinstance(effect, Compute) and _leaves_now(sim, dev):
            dev.departed_at = sim.env.now   # the script left its loop: the rounds go on without it
            break
        handler = handlers.get(type(effect))
        if handler is None:
            raise ConfigError("the simulator cannot carry out %r" % (effect,))
        outcome = handler(sim, dev, effect)
        result = (yield from outcome) if isinstance(outcome, types.GeneratorType) else outcome
        effect = session.advance(result)
    yield from sim.leave(dev)
