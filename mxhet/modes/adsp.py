"""ADSP (``adsp``): no waiting, commits at scheduled rates (the ADSP paper).

Every worker trains its replica continuously. Its accumulated update since
the last commit is ``U_i = Σ η'·g``, i.e. ``w_pulled - w_local``; it commits
``Δ = -U_i`` to the servers through ``dist_async``, where
:class:`kvstore_ext.updaters.ESyncAverage` applies ``W ← W + (ε/M)·Δ`` on
arrival (global learning rate η = ε/M, 1/M by default), pulls W and goes on.
No worker ever waits for another.

When to commit comes from the scheduler in the State Server
(:mod:`mxhet.control.adsp`): each commit report returns the total number of
commits due by the next checkpoint and the time left until it; the worker
spreads the remaining commits evenly over that time, minus its measured
commit cost O_i (the paper's timer Γ/ΔC_target^i − O_i, re-aimed after every
commit so that all workers reach the checkpoint with the same count). Commits
happen between iterations, at the boundary nearest to the due time. The worker's recent training loss goes with each
report and feeds the commit-rate search; rank 0 puts the search's record in the run's summary (``adsp_search``).
"""
import logging

from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..errors import ConfigError, ProtocolError, StateServerTimeout
from ..policy import specs
from ..policy.worker import Action, ADSPPolicy
from .base import SyncMode
from .registry import register

LOG = logging.getLogger(__name__)


@register
class ADSP(SyncMode):
    """The executor of :class:`mxhet.policy.worker.ADSPPolicy` on the real cluster."""
    spec = specs.ADSP
    bucket_bytes = DEFAULT_BUCKET_BYTES

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        if not self.opts["global_lr"] > 0:
            raise ConfigError("global_lr must be > 0, got %r" % (self.opts["global_lr"],))
        self.policy = ADSPPolicy()

    @property
    def commits(self):
        return self.policy.commits

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=opts["global_lr"])

    def on_connect(self):
        self.client = self.join_state_server()

    def on_setup(self, batch_size):
        self._report(self.clock())

    def _report(self, now):
        t0 = self.clock()
        target, left = self.client.commit_report(self.policy.commits, -1.0 if self.loss is None else self.loss,
                                                 self.policy.commit_cost)
        self.stats.query_s += self.clock() - t0
        self.policy.schedule(now, target, left)

    def local_update(self, batch_size, ignore_stale_grad):
        self.trainer.local_step(batch_size, ignore_stale_grad)
        self.aggregated = False

    def communicate(self, batch_size, capability, compute_end):
        stopping = self.wants_stop()
        action = self.policy.completed(self.clock(), capability, stopping=stopping)
        if action is Action.REPORT:
            self._report(self.clock())
        if action is not Action.COMMIT:
            return
        t0 = self.clock()
        self.exchange_deltas(self.stats.rounds)
        k = self.policy.committed(self.clock() - t0)
        self.stats.rounds += 1
        self.stats.local_iters.append(k)
        self.aggregated = True
        if stopping or self.wants_stop():
            self.stopped = True
            return
        self._report(self.clock())

    def summary_fields(self):
        """The commit-rate search as the scheduler ran it (``adsp_search``; times in seconds from the
        scheduler's start, the first commit report, which comes just before the run's clock starts).
        None, with a warning, when the State Server cannot send it: the run's summary is still written."""
        try:
            return {"adsp_search": self.client.adsp_record()}
        except (ProtocolError, StateServerTimeout) as exc:
            LOG.warning("the ADSP search record could not be fetched: %s", exc)
            return {"adsp_search": None}

    def request_stop(self):
        super().request_stop()
        if not self.policy.holds_local_work:
            self.stopped = True
