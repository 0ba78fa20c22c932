"""How to split one batch across a worker's contexts: in proportion to their speeds.

With ``split_and_load`` every context gets the same share of a batch, and the
worker's step waits for the slowest (a CPU beside a GPU). Cannikin sizes each
device's batch so that all of them finish together; this is the same rule
inside one worker: a context that processes twice the samples per second gets
twice the samples. Pure: no MXNet, no clock.
"""
import math


def split_sizes(total, speeds):
    """Samples per context for a batch of ``total`` samples, proportional to
    ``speeds`` (samples per second, one per context), rounded by largest
    remainder (ties to the earlier context); every context gets at least one
    sample, so each computes a gradient that the step sums.

    Returns:
        a list of ints, one per context, summing to ``total``.

    Raises:
        ValueError: no speeds, a speed that is not a finite number > 0, or
            ``total`` not an integer >= the number of contexts.
    """
    speeds = list(speeds)
    if not speeds:
        raise ValueError("speeds must name at least one context, got %r" % (speeds,))
    for s in speeds:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ValueError("every speed must be a finite number > 0 (samples/s), got %r" % (s,))
    if isinstance(total, bool) or not isinstance(total, int) or total < len(speeds):
        raise ValueError("total must be an integer >= the %d contexts, got %r" % (len(speeds), total))
    whole = float(sum(speeds))
    ideal = [total * s / whole for s in speeds]
    sizes = [max(1, int(math.floor(x))) for x in ideal]
    order = sorted(range(len(sizes)), key=lambda i: (-(ideal[i] - sizes[i]), i))
    left = total - sum(sizes)
    for i in order[:max(left, 0)]:   # at most one each: the floors lost less than one sample apiece
        sizes[i] += 1
    while sum(sizes) > total:        # a context raised to its one sample: take it from the most over its share
        i = max((j for j in range(len(sizes)) if sizes[j] > 1), key=lambda j: (sizes[j] - ideal[j], -j))
        sizes[i] -= 1
    return sizes


__all__ = ["split_sizes"]
