"""The one way mxhet smooths a measured time (RTT, commit cost) or the loss."""

DEFAULT_WEIGHT = 0.2
"""Weight of the newest sample: about the last 5 samples matter, so a device
that changes speed is seen within a round or two, while one slow sample
(a page fault, a GC pause) moves the estimate by a fifth only."""


class MovingAverage:
    """Exponential moving average; the first sample sets it.

    Args:
        weight: weight of the newest sample, in (0, 1].

    Raises:
        ValueError: for a weight outside (0, 1].
    """

    def __init__(self, weight=DEFAULT_WEIGHT):
        if not 0 < weight <= 1:
            raise ValueError("weight must be in (0, 1], got %r" % (weight,))
        self.weight = float(weight)
        self.value = None
        self.samples = 0

    def update(self, sample):
        """Add ``sample``; returns the new average."""
        sample = float(sample)
        self.value = sample if self.value is None else (1 - self.weight) * self.value + self.weight * sample
        self.samples += 1
        return self.value

    def get(self, default=0.0):
        """The average, or ``default`` before the first sample."""
        return default if self.value is None else self.value
