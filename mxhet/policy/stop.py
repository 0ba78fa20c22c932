"""The stop protocol: when a worker wants to stop, and how the job agrees.

Every worker of a job must stop at a point where the others can too: a
worker that leaves a synchronous exchange early leaves the others waiting
forever. The agreement depends on how the mode moves data:

* ``vote`` (sync, localsgd): each worker's :meth:`StopRule.ballot` rides on the
  synchronous exchange as one more value; the servers sum the ballots and
  every worker stops after the exchange whose sum :meth:`StopRule.agreed`.
* ``state-server`` (esync, adsp, ssp): the worker says it wants to stop in
  its next request (ESync's RESET), and the State Server decides for all.
* ``own`` (async, dcasgd, local): no one waits for anyone; a worker stops on
  its own, at once when asked.

Both engines use this rule: the cluster's modes (:mod:`mxhet.modes`) and
the simulator (:mod:`mxhet.sim`).
"""


class StopRule:
    """Whether this worker wants to stop: asked to, or its condition holds.

    Args:
        condition: optional ``callable(stats) -> bool`` checked where the
            mode can stop (the training script's time budget or target).
    """

    def __init__(self, condition=None):
        if condition is not None and not callable(condition):
            raise ValueError("condition must be callable(stats) -> bool, got %r" % (condition,))
        self.condition = condition
        self.requested = False

    def request(self):
        """Ask to stop; the mode stops where every worker can."""
        self.requested = True

    def wants(self, stats):
        """True if a stop was requested or the condition holds for ``stats`` now."""
        return self.requested or (self.condition is not None and bool(self.condition(stats)))

    @staticmethod
    def ballot(wants):
        """This worker's value in a stop vote (the servers sum the workers')."""
        return 1.0 if wants else 0.0

    @staticmethod
    def agreed(total):
        """True if the summed ballots of an exchange say: everyone stops now (any one voted)."""
        return total > 0
