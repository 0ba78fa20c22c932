"""ESync (Algorithm 1 of the paper).

Every worker trains a replica of the global model w_t. After each local
iteration it asks the State Server whether to keep training (NOT-READY) or to
aggregate (READY). On READY it pushes Δ = w_local - w_t for every parameter
(BatchNorm running statistics included), the servers apply
``w_t+1 = w_t + ε·mean(Δ)`` (:class:`kvstore_ext.updaters.ESyncAverage`), the
worker pulls w_t+1 into its replica and sends RESET.

Optimizer state at a round boundary: kept by default (momentum or Adam moments
carry on, as if the local optimizer ran continuously on the replica); with
``reset_optimizer_state=True`` it starts afresh every round.
"""
import mxnet as mx

from ..control.client import DEFAULT_TIMEOUT, StateClient
from ..errors import ConfigError
from .base import SyncMode, copy_all
from .registry import register


@register
class ESync(SyncMode):
    name = "esync"
    kvstore_type = "dist_sync"
    needs_state_server = True
    description = ("local iterations on a replica, State Server decides when to average model deltas; "
                   "fast devices keep training while the slowest finishes one iteration")
    options = {"global_lr": 1.0, "reset_optimizer_state": False, "state_timeout": DEFAULT_TIMEOUT}

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        if not self.opts["global_lr"] > 0:
            raise ConfigError("global_lr (ε of Algorithm 1) must be > 0, got %r" % (self.opts["global_lr"],))
        self.client = None
        self.round = 0
        self.k = 0
        self.w_global = []
        self.round_hook = None  # called as hook(round, w_before, deltas, w_after) with numpy arrays

    def server_updater(self, batch_size):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(self.kv.num_workers, epsilon=self.opts["global_lr"])

    def on_setup(self, batch_size):
        self.w_global = self.wbufs
        self._deltas = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in self.w_global]
        self.client = StateClient(self.config.state_server, self.kv.rank, self.config.slot,
                                  timeout=self.opts["state_timeout"])
        self.client.register()

    def local_update(self, batch_size, ignore_stale_grad):
        self.trainer.local_step(batch_size, ignore_stale_grad)
        self.aggregated = False

    def communicate(self, batch_size, capability, compute_end):
        self.k += 1
        t0 = self.clock()
        ready = self.client.query(self.round, self.k, capability, since_finish=t0 - compute_end)
        self.stats.query_s += self.clock() - t0
        self.stats.state_queries = self.client.queries
        if ready:
            self.aggregate()

    def aggregate(self):
        """Push Δ for every key in one batch, pull w_t+1, reset the replica, RESET."""
        replicas, deltas = self.weights(), self._deltas
        for w, g, d in zip(replicas, self.w_global, deltas):
            mx.nd.elemwise_sub(w, g, out=d)
        if self.round_hook:
            # Copied now: MXNet reuses a pushed CPU array as the key's receive
            # buffer, so after the pull ``deltas`` hold w_t+1.
            before = [g.asnumpy() for g in self.w_global]
            pushed = [d.asnumpy() for d in deltas]
        self.push_pull(self.keys, deltas, self.w_global)
        copy_all(self.w_global, replicas)
        if self.opts["reset_optimizer_state"]:
            for updater in self.trainer._updaters:
                updater.states.clear()
                updater.states_synced.clear()
        mx.nd.waitall()
        if self.round_hook:
            self.round_hook(self.round, before, pushed, [g.asnumpy() for g in self.w_global])
        self.stats.local_iters.append(self.k)
        self.round += 1
        self.stats.rounds = self.round
        self.k = 0
        self.aggregated = True
        t0 = self.clock()
        if self.client.reset(self.round, want_stop=self.wants_stop()):
            self.stopped = True
        self.stats.query_s += self.clock() - t0

    def global_arrays(self):
        return {p.name: g for p, g in zip(self.trainer._params, self.w_global)} if self.w_global \
            else super().global_arrays()

    def close(self):
        if self.client is not None:
            self.client.bye()
            self.client.close()
            self.client = None
        super().close()


