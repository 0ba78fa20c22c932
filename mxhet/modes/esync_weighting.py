"""ESync's delta weighting on the real cluster (``aggregation="normalized"|"weighted"``).

Right before a round's deltas are pushed, every worker pushes its count vector
(:func:`mxhet.policy.aggregation.count_vector`: effective local steps, samples,
whether it worked) to :data:`kvstore_ext.keys.ESYNC_COUNT_KEY` through
``dist_sync`` and pulls the sum of everyone's; then it stretches its own delta
by :func:`mxhet.policy.aggregation.push_scale` (the replica becomes
``w_t + f·(w_local - w_t)``), so the servers' ``ε·Σ/p`` is the weighted
combination. One extra exchange of three floats per round; none for ``mean``.
"""
import mxnet as mx

from kvstore_ext.keys import ESYNC_COUNT_KEY
from ..gluon_private import trainer_optimizer, trainer_params
from ..policy import aggregation as agg


class DeltaWeighting:
    """The count exchange and the delta scaling of one ESync worker.

    Args:
        aggregation: one of :data:`mxhet.policy.aggregation.AGGREGATIONS`.
    """

    def __init__(self, aggregation):
        self.aggregation = aggregation
        self.active = agg.needs_counts(aggregation)
        self.last_factor = 1.0   # the factor of the last round (for logs and tests)
        self._out = None

    def setup(self, channel):
        """Create the count key (every worker inits it; the servers keep one copy)."""
        if self.active:
            channel.init([ESYNC_COUNT_KEY], [mx.nd.zeros((agg.COUNT_FIELDS,))])
            self._out = [mx.nd.zeros((agg.COUNT_FIELDS,))]

    def weigh(self, mode, steps, batch_size):
        """Exchange counts through ``mode``'s channel and scale ``mode``'s delta for this round."""
        if not self.active:
            return
        optimizer = trainer_optimizer(mode.trainer)
        own = agg.count_vector(steps, steps * batch_size, float(getattr(optimizer, "momentum", 0.0) or 0.0))
        mode.push_pull([ESYNC_COUNT_KEY], [mx.nd.array(own)], self._out)
        totals = [float(x) for x in self._out[0].asnumpy()]
        factor = agg.push_scale(self.aggregation, own, totals, mode.channel.num_workers)
        self.last_factor = factor
        if factor == 1.0:
            return
        for p, w, g in zip(trainer_params(mode.trainer), mode.weights(), mode.wbufs):
            if p.grad_req != "null":  # BatchNorm statistics stay plain means
                w[:] = g.as_in_context(w.context) + factor * (w - g.as_in_context(w.context))
