"""What both interpreters share: stepping a program, and its trace."""
from .effects import Compute


class Session:
    """One worker program being run.

    :meth:`advance` hands the program the result of its last effect and
    returns its next effect (None once the program has returned: the worker
    stops). An interpreter loops: carry the effect out, advance with its
    result. ``trace``, if given, is a list that receives every
    ``(effect, result)`` pair in order: the worker's decisions, which the
    parity tests compare across interpreters.

    Args:
        program: a started-not-yet generator (a mode's worker program).
        trace: optional list to append ``(effect, result)`` to.
    """

    def __init__(self, program, trace=None):
        self._program = program
        self._pending = None   # the effect the program waits on
        self._started = False
        self.trace = trace
        self.finished = False

    @property
    def pending(self):
        """The effect the program waits on (None before the start and after the end)."""
        return self._pending

    def advance(self, result=None):
        """Give the pending effect's ``result``; returns the next effect, or None when done."""
        if self.finished:
            raise RuntimeError("the worker program has already returned")
        if self.trace is not None and self._started:
            self.trace.append((self._pending, result))
        try:
            effect = self._program.send(result) if self._started else next(self._program)
        except StopIteration:
            self._pending, self.finished = None, True
            return None
        self._started = True
        self._pending = effect
        return effect

    def run_until_compute(self, handle, result=None):
        """Cluster stepping: advance, carrying every effect out with
        ``handle(effect) -> result``, until the program asks for a
        :class:`Compute` (returned) or returns (None)."""
        effect = self.advance(result)
        while effect is not None and not isinstance(effect, Compute):
            effect = self.advance(handle(effect))
        return effect
