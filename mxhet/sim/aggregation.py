"""ESync's delta weighting in the simulator (``--aggregation normalized|weighted``).

The cluster's steps, over the emulated links: every device pushes its count
vector (:func:`mxhet.policy.aggregation.count_vector`) to the count key, the
servers sum them (``dist_sync``), each device pulls the sums and scales its own
delta before the round's push. The maths is :mod:`mxhet.policy.aggregation`;
the outer optimizer runs in the servers' updater, as on the cluster.
"""
import mxnet as mx

from kvstore_ext.keys import ESYNC_COUNT_KEY
from ..gluon_private import trainer_optimizer
from ..policy import aggregation as agg


class _ControlKeys:
    """The servers' control keys: each holds the plain sum of the round's pushes."""

    def __init__(self):
        self.values = {}

    def apply(self, key, value):
        self.values[key] = value.copy()

    def snapshot(self, keys):
        return [self.values[k].copy() for k in keys]


def local_momentum(trainer):
    """The local SGD momentum of a ``gluon.Trainer`` (0 for other optimizers)."""
    return float(getattr(trainer_optimizer(trainer), "momentum", 0.0) or 0.0)


def scale_delta(weights, global_copy, trainable, factor):
    """Make ``weights - global_copy`` ``factor`` times as long for trainable keys, in place."""
    if factor == 1.0:
        return
    for w, g, train in zip(weights, global_copy, trainable):
        if train:
            w[:] = g + factor * (w - g)


def weigh_delta(sim, dev, round_index, steps):
    """Before ``dev`` pushes the delta of ``round_index`` (``steps`` local
    iterations): exchange counts and scale its delta (a SimPy generator; a
    no-op for ``aggregation="mean"``)."""
    opts = sim.job.mode_options
    aggregation = opts.get("aggregation", "mean")
    if not agg.needs_counts(aggregation):
        return
    from .engine import SyncRound
    index = ("esync-counts", round_index)
    if index not in sim._rounds:
        sim._rounds[index] = SyncRound(sim.env, _ControlKeys(), [ESYNC_COUNT_KEY], len(sim.devices))
    own = agg.count_vector(steps, steps * dev.batch_size, local_momentum(dev.trainer))
    result, _ = yield from sim.exchange(dev, index, [mx.nd.array(own, ctx=dev.weights()[0].context)],
                                        [ESYNC_COUNT_KEY])
    totals = [float(x) for x in result[0].asnumpy()]
    factor = agg.push_scale(aggregation, own, totals, len(sim.devices))
    scale_delta(dev.weights(), dev.global_copy, [p.grad_req != "null" for p in dev.params], factor)
