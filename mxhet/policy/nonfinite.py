"""What a worker does with NaN or Inf in what it is about to push.

``stop`` (the default) ends the worker with :class:`NonFiniteError` before
anything reaches the servers, so the global model is never touched (the
launcher then ends the job); ``skip`` pushes zeros instead -- no contribution
this round -- and goes on. The executor finds the bad arrays and zeroes them;
this rule decides and words the message, the same on both engines.
"""
from ..errors import ConfigError, NonFiniteError

NONFINITE_POLICIES = ("stop", "skip")


class NonfiniteRule:
    """Args:
        policy: ``"stop"`` or ``"skip"``.

    Raises:
        ConfigError: for another policy.
    """

    def __init__(self, policy="stop"):
        if policy not in NONFINITE_POLICIES:
            raise ConfigError("on_nonfinite must be one of %s, got %r" % (NONFINITE_POLICIES, policy))
        self.policy = policy

    @staticmethod
    def message(what, slot, rank, round_index, names):
        """One line naming the worker, the round and (up to three of) the bad parameters."""
        names = list(names)
        shown = ", ".join(names[:3])
        more = " and %d more" % (len(names) - 3) if len(names) > 3 else ""
        return ("non-finite values (NaN or Inf) in the %s of worker slot %d (rank %d) in round %d: %s%s"
                % (what, slot, rank, round_index, shown, more))

    def decide(self, what, slot, rank, round_index, names):
        """For the parameters ``names`` found non-finite: ``"push"`` when there
        are none, ``"zero"`` to push zeros instead (policy ``skip``).

        Raises:
            NonFiniteError: under policy ``stop``, naming the worker, round and parameters.
        """
        names = list(names)
        if not names:
            return "push"
        text = self.message(what, slot, rank, round_index, names)
        if self.policy == "stop":
            raise NonFiniteError(text + "; the global model was not touched")
        return "zero"
