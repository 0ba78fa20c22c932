"""The simulator's model of ``preduce`` (Partial Reduce).

The same decisions as the cluster (:mod:`mxhet.modes.preduce`): the controller
is :class:`~mxhet.control.preduce.PartialReduceController` behind the real
:class:`~mxhet.control.server.StateService` (READY answered when the group
forms, the all-pushed barrier), and the slots are applied by the servers' own
:class:`kvstore_ext.updaters.PartialReduceSum` through MXNet's updater path.
Each device:

* computes one iteration of virtual duration and takes a real local SGD step;
* sends READY and waits for its group (or the stop);
* pushes β·x to the group's slot (the transfer, then the server's ack),
  waits at the barrier, pulls the slot's sum (a request, then the transfer)
  and continues from it with k = max k_j.

What is evaluated: the snapshots and the final point are the average of all
N device models, Algorithm 2's output (the cluster's final point is the same
average; its snapshots during training are rank 0's own model, since no
average exists on the servers until the end).
"""
import mxnet as mx

from kvstore_ext import keys as ps_keys
from ...control import messages as m
from ...control.preduce import default_slots
from ...dataplane import copy_all, nbytes
from ...modes.preduce import check_options, join_fields
from ..engine import Servers, sim_driver


class _Rendezvous:
    """The servers' slot keys of one simulation, and its evaluation point."""

    def __init__(self, sim):
        from kvstore_ext.updaters import PartialReduceSum
        n = len(sim.devices)
        opts = sim.spec.resolve(sim.job.mode_options)
        check_options(opts, n)
        first = sim.devices[0].weights()
        self.keys = [ps_keys.preduce_keys(s, len(first)) for s in range(default_slots(n, opts["group_size"]))]
        arrays = {key: mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype)
                  for keys in self.keys for key, w in zip(keys, first)}
        self.store = Servers(arrays, PartialReduceSum(n, opts["group_size"]))
        self.join = join_fields(opts)
        self.devices = sim.devices
        sim.servers.snapshot = self.average   # snapshots and the final model: the average of all N models

    def average(self, keys=None):
        keys = range(len(self.devices[0].params)) if keys is None else keys
        out = []
        for k in keys:
            total = self.devices[0].weights()[k].copy()
            for dev in self.devices[1:]:
                total += dev.weights()[k]
            out.append(total / len(self.devices))
        return out


def _rendezvous(sim):
    if getattr(sim, "_preduce", None) is None:
        sim._preduce = _Rendezvous(sim)
    return sim._preduce


@sim_driver("preduce")
def preduce(sim, dev):
    rv = _rendezvous(sim)
    net = sim.job.network
    yield from sim.register(dev)
    yield from sim.request(dev, dev.message(m.ReduceJoin, **rv.join))
    k = 0
    while True:
        yield from sim.iterate(dev)
        dev.compute(local_step=True)
        k += 1
        t0 = sim.env.now
        dev.stats.state_queries += 1
        reply = yield from sim.request(dev, dev.message(m.ReduceReady, k=k, want_stop=sim.wants_stop(dev)))
        sim.blocked(dev, t0, query=True)
        if reply.stop:
            break
        keys = rv.keys[reply.group_slot]
        weights = dev.weights()
        values = [w * reply.weight for w in weights]
        size = nbytes(values)
        transfer = net.transfer(dev.slot, size, len(keys))
        t1 = sim.env.now
        yield sim.env.timeout(transfer)
        for key, value in zip(keys, values):
            rv.store.apply(key, value)
        yield sim.env.timeout(net.message(dev.slot))   # the push's acknowledgement
        sim.blocked(dev, t1, sync=True)
        t2 = sim.env.now
        dev.stats.state_queries += 1
        yield from sim.request(dev, dev.message(m.ReducePushed, group=reply.round))
        sim.blocked(dev, t2, query=True)
        t3 = sim.env.now
        yield sim.env.timeout(net.message(dev.slot))   # the pull request
        result = rv.store.snapshot(keys)
        yield sim.env.timeout(transfer)
        copy_all(result, weights)
        sim.blocked(dev, t3, sync=True)
        dev.stats.bytes_pushed += size
        dev.stats.bytes_pulled += size
        k = reply.k
        dev.stats.rounds += 1
        dev.stats.local_iters.append(1)
    yield from sim.leave(dev)
