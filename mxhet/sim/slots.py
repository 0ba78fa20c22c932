"""Partial Reduce's rendezvous slots on the simulated servers, and its evaluation point.

The slots are sets of keys next to the parameter keys
(:func:`kvstore_ext.keys.preduce_keys`), applied by the servers' own
:class:`kvstore_ext.updaters.PartialReduceSum` through MXNet's updater path,
as a PS-LITE server applies them. One per simulation, made at the first
``ReduceJoin`` (:func:`rendezvous`).

What is evaluated is what a real job can evaluate: during training the
snapshots score rank 0's own model (no average of the N models exists
anywhere until the end, and building one would be the global
synchronisation the method avoids); once every device has stopped, the
average of all N models, Algorithm 2's output (the cluster's final point).
"""
import mxnet as mx

from kvstore_ext import keys as ps_keys
from ..control.preduce import check_options, default_slots
from .engine import Servers


class Rendezvous:
    """The slot keys of simulation ``sim`` and its servers' evaluation point."""

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
        self.devices = sim.devices
        sim.servers.snapshot = self.evaluation_point

    def evaluation_point(self, keys=None):
        """Rank 0's model while any device trains, then the average of all N."""
        keys = range(len(self.devices[0].params)) if keys is None else keys
        if not all(dev.stopped for dev in self.devices):
            return [self.devices[0].weights()[k].copy() for k in keys]
        return self.average(keys)

    def average(self, keys=None):
        keys = range(len(self.devices[0].params)) if keys is None else keys
        out = []
        for k in keys:
            total = self.devices[0].weights()[k].copy()
            for dev in self.devices[1:]:
                total += dev.weights()[k]
            out.append(total / len(self.devices))
        return out


def rendezvous(sim):
    """The :class:`Rendezvous` of ``sim`` (made on the first call)."""
    if getattr(sim, "_preduce", None) is None:
        sim._preduce = Rendezvous(sim)
    return sim._preduce
