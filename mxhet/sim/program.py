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
from ..protocol import ShareSpeed


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

def run_program(sim, dev, program, trace=None):
    """SimPy process: device ``dev`` of simulation ``sim`` runs ``program``
    (``program(opts, stats)``); ``trace`` as :class:`mxhet.protocol.Session`'s.

    Raises:
        ConfigError: the program yields an effect the simulator cannot carry out.
    """
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
    yield from sim.leave(dev)
