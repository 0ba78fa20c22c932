"""ESync's outer momentum, followed on every worker.

With ``outer_optimizer="nesterov"`` the cluster's servers only add pushes
(:class:`kvstore_ext.updaters.MemberSum`): each round's members push their
share of the Nesterov step, the momentum term included
(:meth:`mxhet.modes.esync.ESync._member_round`), so the momentum is this
worker-side copy (the same on every member: computed from the same pulled
models); in the simulator it lives on the simulated servers
(:class:`kvstore_ext.updaters.ESyncAggregate`). Each worker follows it from what it pulls: the update
``w_t+1 - w_t`` of a round and the previous momentum determine the new one
(:func:`mxhet.policy.aggregation.recover_momentum`, within float32 rounding,
errors shrinking every round). A checkpoint saves it; a resumed worker
starts from it.
"""
import mxnet as mx
import numpy as np


PREFIX = "outer_momentum_"


class OuterMomentumMirror:
    """The worker's copy of the servers' momentum buffers, one per trainable key.

    Args:
        lr: the outer learning rate.
        momentum: μ.
        keys: the keys the servers keep momentum for (trainable parameters).
    """

    def __init__(self, lr, momentum, keys):
        self.lr, self.momentum = float(lr), float(momentum)
        self.keys = list(keys)
        self.buffers = {}      # key -> NDArray, created on the first round
        self.restored = {}     # key -> numpy array, from a checkpoint (for the servers)

    def before(self, globals_):
        """Copies of the global model's trainable keys before a round's exchange."""
        return {k: globals_[k].copy() for k in self.keys}

    def after(self, before, globals_):
        """Follow the servers' momentum through the round that moved ``before`` to ``globals_``
        (:func:`mxhet.policy.aggregation.recover_momentum`, in place: ``before`` is used up).

        Returns when the buffers are computed, so the work counts in the round's aggregation and not
        in the next iteration's time, which the State Server takes for the device's capability (0.45 s
        a round for AlexNet's 20 million weights on one CPU core, before it was done in place)."""
        keep, scale = self.momentum / (1.0 + self.momentum), 1.0 / (self.lr * (1.0 + self.momentum))
        for k in self.keys:
            buf = self.buffers.get(k)
            if buf is None:
                buf = self.buffers[k] = mx.nd.zeros(globals_[k].shape, ctx=globals_[k].context,
                                                    dtype=globals_[k].dtype)
            minus_update = before[k]
            minus_update -= globals_[k]
            minus_update *= scale
            buf *= keep
            buf += minus_update
        for buf in self.buffers.values():
            buf.wait_to_read()

    def arrays(self):
        """What a checkpoint saves: ``{"outer_momentum_<key>": NDArray}``."""
        return {PREFIX + str(k): v for k, v in sorted(self.buffers.items())}

    def restore(self, arrays):
        """Take a checkpoint's :meth:`arrays` back (before the model is shared).

        Raises:
            ValueError: for an array of another name.
        """
        for name, value in arrays.items():
            if not name.startswith(PREFIX):
                raise ValueError("not an outer momentum buffer: %r" % (name,))
            key = int(name[len(PREFIX):])
            self.buffers[key] = value.copy()
            self.restored[key] = np.asarray(value.asnumpy())
