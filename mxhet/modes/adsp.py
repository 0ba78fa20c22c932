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
report and feeds the commit-rate search.
"""
from ..control.client import DEFAULT_TIMEOUT
from ..errors import ConfigError
from .base import SyncMode
from .registry import register

REPORT_MARGIN = 0.05
"""Seconds after a checkpoint at which a worker that met its target asks for the next one."""


@register
class ADSP(SyncMode):
    name = "adsp"
    kvstore_type = "dist_async"
    needs_state_server = True
    exchanges_deltas = True
    uses_loss = True
    description = "ADSP: train without waiting, commit accumulated updates at scheduler-set rates"
    options = {"global_lr": 1.0, "state_timeout": DEFAULT_TIMEOUT}

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        if not self.opts["global_lr"] > 0:
            raise ConfigError("global_lr must be > 0, got %r" % (self.opts["global_lr"],))
        self.commits = 0
        self.commit_cost = 0.0
        self.next_commit = None   # when to commit next (None: the target of this period is met)
        self.next_report = 0.0    # when to ask for the next period's target, if it is met
        self.k = 0

    def server_updater(self, batch_size):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(self.kv.num_workers, epsilon=self.opts["global_lr"])

    def on_connect(self):
        self.client = self.join_state_server()

    def on_setup(self, batch_size):
        self._schedule(self.clock())

    def _schedule(self, now):
        t0 = self.clock()
        target, left = self.client.commit_report(self.commits, -1.0 if self.loss is None else self.loss,
                                                 self.commit_cost)
        self.stats.query_s += self.clock() - t0
        due = target - self.commits
        if due <= 0:
            # Target met: no commit until the next period; ask again once it began.
            self.next_commit = None
            self.next_report = now + left + REPORT_MARGIN
        else:
            # Aim at the middle of the next slot of the remaining time, so the
            # last commit of a period lands well before its checkpoint.
            self.next_commit = now + max(0.0, 0.5 * left / due - self.commit_cost)

    def local_update(self, batch_size, ignore_stale_grad):
        self.trainer.local_step(batch_size, ignore_stale_grad)
        self.aggregated = False

    def communicate(self, batch_size, capability, compute_end):
        self.k += 1
        # Commits happen between iterations: commit at the boundary nearest to
        # the due time, so that a slow device does not fall a commit behind.
        now = self.clock()
        if not self.wants_stop():
            if self.next_commit is None:
                if now >= self.next_report:
                    self._schedule(now)
                return
            if now < self.next_commit - capability / 2:
                return
        t0 = self.clock()
        self.exchange_deltas(self.stats.rounds)
        cost = self.clock() - t0
        self.commit_cost = cost if self.commits == 0 else 0.8 * self.commit_cost + 0.2 * cost
        self.commits += 1
        self.stats.rounds += 1
        self.stats.local_iters.append(self.k)
        self.k = 0
        self.aggregated = True
        if self.wants_stop():
            self.stopped = True
            return
        self._schedule(self.clock())

    def request_stop(self):
        super().request_stop()
        if self.k == 0:
            self.stopped = True
