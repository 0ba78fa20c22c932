"""The NaN/Inf guard on what a worker is about to push (``--on-nonfinite``):
the element-wise check on the devices, and the policy's decision
(:class:`mxhet.policy.nonfinite.NonfiniteRule`, shared with the simulator)."""
import logging

import mxnet as mx

from ..policy.nonfinite import NonfiniteRule

LOG = logging.getLogger("mxhet.modes")


def nonfinite_indices(arrays):
    """Indices of the arrays holding a NaN or an Inf, checked element-wise.

    Each array is reduced to one flag on its own device (``all_finite``); only
    the flags travel to the host, in one copy. A sum would not do: a finite
    array whose float32 sum overflows would count as non-finite.
    """
    if not arrays:
        return []
    flags = mx.nd.concat(*[mx.nd.all_finite(a).reshape((1,)).as_in_context(mx.cpu()) for a in arrays], dim=0)
    return [i for i, ok in enumerate(flags.asnumpy()) if not ok]


class NonfiniteGuard:
    """Applies the NaN/Inf policy to a worker's pushes.

    Args:
        policy: ``"stop"`` or ``"skip"`` (:data:`mxhet.policy.nonfinite.NONFINITE_POLICIES`).
        slot: the worker's slot, named in the message.
        stats: the worker's :class:`~mxhet.modes.stats.WorkerStats` (its rank
            is read at each check: it is known only once connected).

    Raises:
        ConfigError: an unknown policy.
    """

    def __init__(self, policy, slot, stats):
        self.rule = NonfiniteRule(policy)
        self.slot = slot
        self.stats = stats

    def check(self, arrays, what, round_index, params):
        """Apply the policy to ``arrays`` (``params``: the parameters, to name the bad ones by index).

        Returns:
            True if they were finite, False if they were zeroed (policy ``skip``).

        Raises:
            NonFiniteError: naming the worker, the round and the parameter (policy ``stop``).
        """
        names = [params[i].name if i < len(params) else "#%d" % i for i in nonfinite_indices(arrays)]
        if self.rule.decide(what, self.slot, self.stats.rank, round_index, names) == "push":
            return True
        LOG.warning("%s: pushing zeros instead (on_nonfinite=skip)",
                    self.rule.message(what, self.slot, self.stats.rank, round_index, names))
        self.stats.skipped_pushes += 1
        for a in arrays:
            a[:] = 0
        return False
