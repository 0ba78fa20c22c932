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

    def request_stop(self):
        super().request_stop()
        self.stopped = True
