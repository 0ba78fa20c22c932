"""Local SGD / fixed ADACOMM (``localsgd``): τ local steps, then a synchronous model average.

Every worker applies ``local_steps`` (τ) optimizer steps to its replica, then
all workers push their model deltas through ``dist_sync`` and the servers
average them (:class:`kvstore_ext.updaters.ESyncAverage` with ε = 1). Fast
workers wait for the slowest at every average: that is the point of this
baseline. The stop vote rides on the average, so every worker stops after the
same round.
"""
import mxnet as mx

from kvstore_ext import keys as ps_keys
from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..policy import specs
from ..policy.stop import StopRule
from ..policy.worker import Action, LocalSGDPolicy
from .base import SyncMode
from .registry import register


@register
class LocalSGD(SyncMode):
    """The executor of :class:`mxhet.policy.worker.LocalSGDPolicy` on the real cluster."""
    spec = specs.LOCALSGD
    bucket_bytes = DEFAULT_BUCKET_BYTES

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        self.policy = LocalSGDPolicy(self.opts["local_steps"])

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=1.0)

    def on_setup(self, batch_size):
        self._vote = [mx.nd.zeros((1,))]
        self.channel.init([ps_keys.STOP_VOTE_KEY], [mx.nd.zeros((1,))])

    def local_update(self, batch_size, ignore_stale_grad):
        self.trainer.local_step(batch_size, ignore_stale_grad)
        self.aggregated = False

    def communicate(self, batch_size, capability, compute_end):
        if self.policy.completed() is not Action.AGGREGATE:
            return
        round_index = self.stats.rounds
        self.stats.rounds += 1
        self.stats.local_iters.append(self.policy.aggregated())
        vote = mx.nd.full((1,), StopRule.ballot(self.wants_stop()))
        self.exchange_deltas(round_index, [ps_keys.STOP_VOTE_KEY], [vote], self._vote)
        self.aggregated = True
        if StopRule.agreed(self._vote[0].asscalar()):
            self.stopped = True
