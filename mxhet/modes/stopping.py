"""How a worker stops together with the others (:class:`StopProtocol`): the
script's stop request and condition, the stop ballot that rides a round's
exchange, and the end every mode shares -- the final barrier and the pull of
the job's final model."""
import mxnet as mx

from kvstore_ext import keys as ps_keys
from ..dataplane import copy_all
from ..policy.stop import StopRule


class StopProtocol:
    """A worker's side of the stop protocol.

    The decision rules are :class:`mxhet.policy.stop.StopRule`'s (shared with
    the simulator); this class carries them out on the cluster. ``votes``:
    the members' summed ballots as the last exchange pulled them (a one-element
    list of NDArrays), once :meth:`open_vote` has run.
    """

    def __init__(self, condition=None):
        self.rule = StopRule(condition)
        self.votes = None

    # -- the script's wish --------------------------------------------------
    def request(self):
        """The script asks to stop; the mode stops when every worker can stop consistently."""
        self.rule.request()

    @property
    def requested(self):
        return self.rule.requested

    @property
    def condition(self):
        """``callable(stats) -> bool``, checked where the mode can stop (or None)."""
        return self.rule.condition

    @condition.setter
    def condition(self, condition):
        self.rule.condition = condition

    def wants(self, stats):
        """True if the script asked to stop, or its condition holds for ``stats`` now."""
        return self.rule.wants(stats)

    # -- the ballot -----------------------------------------------------------
    def open_vote(self, channel):
        """Create the stop-vote key on ``channel``'s servers: a round's ballot
        travels as one more key of its push/pull, so it costs no extra round trip."""
        self.votes = [mx.nd.zeros((1,))]
        channel.init([ps_keys.STOP_VOTE_KEY], [mx.nd.zeros((1,))])

    def ballot(self, vote):
        """The control ``(keys, values, outs)`` of an exchange that carries ``vote`` (1: stop)."""
        return [ps_keys.STOP_VOTE_KEY], [mx.nd.full((1,), vote)], self.votes

    def tally(self):
        """The summed ballots the last exchange pulled."""
        return float(self.votes[0].asscalar())

    # -- the end ----------------------------------------------------------------
    @staticmethod
    def final_model(channel, barrier, keys, wbufs, weights):
        """The job's final model at ``keys``, in this worker's replica.

        With a ``channel`` (None: standalone, the replica is the model):
        ``barrier()`` -- every worker's last contribution is in --, then pull
        the global model into ``wbufs`` and copy it into the parameters
        (``weights()``: their first copies). Returns the final arrays, in ``keys``' order.
        """
        if channel is None:
            weights = weights()
            return [weights[i] for i in keys]
        barrier()
        outs = [wbufs[i] for i in keys]
        channel.pull(keys, outs)
        weights = weights()
        copy_all(outs, [weights[i] for i in keys])
        return outs
