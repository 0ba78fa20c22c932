"""ESync's delta weighting (``aggregation="normalized"|"weighted"``), for both engines.

Right before a round's deltas are pushed, every worker sends its count
vector (:func:`mxhet.policy.aggregation.count_vector`: effective local steps,
samples, whether it worked) and gets the sum over the round's members: on the
cluster with its entry to the round (the State Server sums them,
:mod:`mxhet.control.membership`), in the simulator without leave events
through :data:`kvstore_ext.keys.ESYNC_COUNT_KEY` on its ``dist_sync`` model.
Then it stretches its own delta by
:func:`mxhet.policy.aggregation.push_scale` over the m members (the weights
sum to one over them), so the members' ``ε·Σ/m`` is the weighted
combination. None of this for ``mean``. How the counts travel is the interpreter's (the cluster's kvstore
channel, the simulator's link model); what is counted and how the delta is
scaled is here.
"""
from ..gluon_private import trainer_optimizer
from ..policy import aggregation as agg


class DeltaWeighting:
    """The counts and the delta scaling of one ESync worker.

    Args:
        aggregation: one of :data:`mxhet.policy.aggregation.AGGREGATIONS`.
    """

    def __init__(self, aggregation):
        self.aggregation = aggregation
        self.active = agg.needs_counts(aggregation)
        self.last_factor = 1.0   # the factor of the last round (for logs and tests)

    @staticmethod
    def counts(steps, batch_size, trainer):
        """This worker's count vector for a round of ``steps`` local iterations of ``batch_size`` samples."""
        momentum = float(getattr(trainer_optimizer(trainer), "momentum", 0.0) or 0.0)
        return agg.count_vector(steps, steps * batch_size, momentum)

    def scale(self, own, totals, num_workers, params, weights, global_model):
        """Stretch this worker's delta ``weights - global_model`` in place by its push
        scale (trainable ``params`` only: BatchNorm statistics stay plain means);
        returns the factor."""
        factor = agg.push_scale(self.aggregation, own, [float(x) for x in totals], num_workers)
        self.last_factor = factor
        if factor != 1.0:
            for p, w, g in zip(params, weights, global_model):
                if p.grad_req != "null":
                    g = g.as_in_context(w.context)
                    w[:] = g + factor * (w - g)
        return factor
