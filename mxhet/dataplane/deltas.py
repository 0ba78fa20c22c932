"""The delta exchange of the model-averaging modes (ESync, local SGD, ADSP).

Each worker pushes ``delta = replica - global`` for every parameter in one
batch, the servers' updater folds the workers' deltas into the global model,
and the worker pulls the new global model into its copy of it and resets its
replica to it. When and how often this happens is the mode's policy; what the
servers do with the deltas is the updater (:mod:`kvstore_ext`).
"""
import mxnet as mx

from .channel import copy_all


class DeltaExchange:
    """Args:
        channel: the worker's :class:`~mxhet.dataplane.channel.KVChannel`.
        check: ``callable(deltas, round_index)`` applied before the push
            (the NaN/Inf rule: it raises, or zeroes the arrays).
    """

    def __init__(self, channel, check):
        self.channel = channel
        self.check = check
        self._deltas = None

    def exchange(self, round_index, keys, replicas, global_model, extra_keys=(), extra_values=(), extra_outs=(),
                 hook=None):
        """Push the deltas (and control values on ``extra_keys``), pull the new
        global model into ``global_model`` (and ``extra_outs``), and copy it
        into ``replicas``. ``hook(round, global_before, deltas, global_after)``,
        if given, sees numpy copies (the training script's delta dump)."""
        if self._deltas is None:
            self._deltas = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in global_model]
        deltas = self._deltas
        for w, g, d in zip(replicas, global_model, deltas):
            mx.nd.elemwise_sub(w, g, out=d)
        self.check(deltas, round_index)
        if hook:
            # Copied now: MXNet reuses a pushed CPU array as the key's receive
            # buffer, so after the pull ``deltas`` hold the new model.
            before = [g.asnumpy() for g in global_model]
            pushed = [d.asnumpy() for d in deltas]
        self.channel.push_pull(list(keys) + list(extra_keys), deltas + list(extra_values),
                               list(global_model) + list(extra_outs))
        copy_all(global_model, replicas)
        mx.nd.waitall()
        if hook:
            hook(round_index, before, pushed, [g.asnumpy() for g in global_model])
