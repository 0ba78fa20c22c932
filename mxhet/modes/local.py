"""Standalone training on one device (the paper's "Standalone" column)."""
from ..policy import specs
from ..protocol import programs
from .program import ProgramMode
from .registry import register


@register
class Local(ProgramMode):
    spec = specs.LOCAL
    program = staticmethod(programs.local)
    votes = False   # no servers: nothing to vote through

    def local_update(self, batch_size, ignore_stale_grad):
        super().local_update(batch_size, ignore_stale_grad)
        # One device: its replica is the job's model after every step, never unaggregated local work
        # (the chief snapshots only an aggregated model: a standalone run's curve held its start and end)
        self.aggregated = True

    def request_stop(self):
        super().request_stop()
        self.stopped = True
