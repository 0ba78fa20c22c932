"""ESync's needed devices (``--wait-needed R``, only with a round deadline) as pure code.

Under a deadline (:mod:`mxhet.policy.deadline`) the rounds wait only for the
devices on time; a late device's delta enters a later round. On label-skewed
data a late device may hold classes the others never see: the rounds of the
fast devices then pull the global model away from those classes between its
deltas, and every late delta has to teach them again. A device is *needed*
when the global model serves its data badly, and the rounds wait for it as for
a device on time until the model has caught up.

The measure is the device's own: its training loss on the global model it has
just pulled (its first batch after the pull, before its own step), the only
loss every device measures on the same model. It is smoothed per device, an
exponential moving average with factor 1/2 (:data:`LOSS_SMOOTHING`: one batch's
noise halves, and two rounds forget a past need). A present device is needed
when its average is above R times the lowest average among the present
devices: losses compare by ratio, so R means the same for any loss >= 0 and
any model. When the global model has learnt its classes its loss falls back
within R times the lowest, and it is late again: the fast devices get their
short rounds back.

On i.i.d. data every device's loss on one model differs by batch noise only,
so with R well above 1 nobody is needed and the rounds are the deadline's. A
device that has not reported a loss yet is never needed and does not set the
lowest.
"""
import math

from ..errors import ConfigError

LOSS_SMOOTHING = 0.5
"""Weight of a device's newest loss in its average (the older average keeps the rest)."""


def check_wait_needed(value, deadline):
    """``value`` as a float factor R (0 = off), or ConfigError naming it.

    Raises:
        ConfigError: for a value that is not 0 and not a finite number >= 1, or
            a factor without a deadline (``deadline`` 0).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError("wait_needed must be 0 (off) or a number >= 1, got %r" % (value,))
    if value != 0 and value < 1:
        raise ConfigError("wait_needed must be 0 (off) or a number >= 1 (a ratio of training losses), got %r"
                          % (value,))
    if value and not deadline:
        raise ConfigError("wait_needed (--wait-needed) %r needs round_deadline (--round-deadline) > 0" % (value,))
    return float(value)


def check_loss(value):
    """A reported loss as a float, or ConfigError: the rule compares losses by ratio, so it needs
    finite losses >= 0 (a cross-entropy, a squared error).

    Raises:
        ConfigError: for a negative, non-finite or non-numeric loss.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError("esync --wait-needed compares training losses by ratio: it needs a finite loss >= 0, "
                          "got %r" % (value,))
    return float(value)


class LossBook:
    """The devices' smoothed losses on the global model they pulled, and who is needed."""

    def __init__(self, factor):
        self.factor = float(factor)
        self.average = {}   # rank -> smoothed loss

    def observe(self, rank, loss):
        """Device ``rank`` measured ``loss`` (>= 0) on the global model it just pulled."""
        old = self.average.get(rank)
        self.average[rank] = loss if old is None else (1 - LOSS_SMOOTHING) * old + LOSS_SMOOTHING * loss

    def forget(self, rank):
        """``rank`` left the job: a rank that comes back starts a new average."""
        self.average.pop(rank, None)

    def needed(self, present):
        """The ranks of ``present`` whose average is above the factor times the lowest
        average among ``present`` (a frozenset; empty while fewer than two have one)."""
        known = {r: self.average[r] for r in present if r in self.average}
        if len(known) < 2:
            return frozenset()
        bound = self.factor * min(known.values())
        return frozenset(r for r, loss in known.items() if loss > bound)
