"""Standalone training on one device (the paper's "Standalone" column)."""
from ..policy import specs
from .base import SyncMode
from .registry import register


@register
class Local(SyncMode):
    spec = specs.LOCAL

    def local_update(self, batch_size, ignore_stale_grad):
        self.trainer.local_step(batch_size, ignore_stale_grad)

    def communicate(self, batch_size, capability, compute_end):
        self.stats.rounds += 1
        self.stats.local_iters.append(1)
        self.stopped = self.wants_stop()

    def request_stop(self):
        super().request_stop()
        self.stopped = True
