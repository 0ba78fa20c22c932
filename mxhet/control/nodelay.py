"""The master of asynchronous SGD without gradient delay (``nodelay``) as a pure rule.

Algorithm 1 of "Asynchronous SGD without gradient delay for efficient
distributed training", lines 28-34: wait until every worker holds at least
one gradient since its last transfer, request a transfer of ``w.x`` from all,
merge ``PS.x += (1/|W|)·Σ w.x`` and provide the new model to all. Here the
merge itself runs on the parameter servers (``dist_sync`` with the ESync
averaging updater: one push per worker per round); the rule decides *when*:

* a worker announces round ``r`` (:meth:`TransferRule.notify`) once it has a
  gradient since its transfer of round ``r - 1``;
* a worker reports that round ``r``'s merged model arrived (:meth:`TransferRule.merged`);
* the transfer of round ``r`` is requested from every live worker when all
  of them announced it and, for ``r > 0``, all of them received round
  ``r - 1``'s model (the previous merge is done). So a worker never hands over
  round ``r + 1`` before its pull of round ``r`` finished, which ``dist_sync``
  needs: it counts pushes per key, not per sender.

The live workers are all ``num_workers`` ranks minus those that left: a rank
that has not registered yet still owes its push to ``dist_sync``. A worker's
wish to stop rides on its announcement; the round is the job's last if any
live worker wished it, so every worker stops after the same round.

Nothing here reads a clock, a socket or MXNet; requests are matched to
answers through opaque ``token``s (the State Server uses sequence numbers).
"""
import dataclasses

from ..errors import ProtocolError
from . import wire as w


@dataclasses.dataclass(frozen=True)
class TransferRequest:
    """The master's request: hand over ``w.x`` for ``round`` (``stop``: the job's last round).

    ``tokens`` maps each live rank to the token of its announcement.
    """
    round: int
    stop: bool
    tokens: dict


class TransferRule:
    """When to request the next transfer (Algorithm 1's master).

    Args:
        ranks: the workers' ranks (every one must take part in every round).

    Raises:
        ValueError: for an empty set of ranks.
    """

    def __init__(self, ranks):
        self.live = set(ranks)
        if not self.live:
            raise ValueError("the transfer rule needs at least one worker rank")
        self.round = 0            # the round to request next
        self.announced = {}       # rank -> token of its announcement of `round`
        self.wishes = set()       # ranks that want `round` to be the last
        self.arrived = set()      # ranks that received round `round - 1`'s model
        self.requested = []       # (round, stop, ranks) of every request made
        self.stopped = False      # a stop round was requested: no further rounds

    def notify(self, rank, round_, want_stop=False, token=None):
        """``rank`` holds a gradient for round ``round_``; returns a request if it is now due.

        Raises:
            ProtocolError: for an unknown or departed rank, a round other than
                the next one, a second announcement, or one after the job's last round.
        """
        self._check(rank)
        if self.stopped:
            raise ProtocolError("rank %d announced round %d after the job's last round" % (rank, round_))
        if round_ != self.round:
            raise ProtocolError("rank %d announced round %d; the next transfer is round %d"
                                % (rank, round_, self.round))
        if rank in self.announced:
            raise ProtocolError("rank %d announced round %d twice" % (rank, round_))
        self.announced[rank] = token
        if want_stop:
            self.wishes.add(rank)
        return self._due()

    def merged(self, rank, round_):
        """``rank`` received the model merged in round ``round_``; returns a request if it is now due.

        Raises:
            ProtocolError: for an unknown or departed rank, or a round other than the last requested.
        """
        self._check(rank)
        if round_ != self.round - 1:
            raise ProtocolError("rank %d received round %d; the last merge requested is round %d"
                                % (rank, round_, self.round - 1))
        self.arrived.add(rank)
        return self._due()

    def leave(self, rank):
        """``rank`` left the job; returns a request if the others now complete a round."""
        self.live.discard(rank)
        self.announced.pop(rank, None)
        self.wishes.discard(rank)
        self.arrived.discard(rank)
        return self._due() if self.live else None

    @property
    def merging(self):
        """True while the last requested merge has not reached every live worker."""
        return self.round > 0 and not self.live <= self.arrived

    def _check(self, rank):
        if rank not in self.live:
            raise ProtocolError("rank %d is not a live worker of this job" % rank)

    def _due(self):
        if self.stopped or self.merging or not self.live <= set(self.announced):
            return None
        stop = bool(self.wishes & self.live)
        request = TransferRequest(self.round, stop, {r: self.announced[r] for r in sorted(self.live)})
        self.requested.append((self.round, stop, sorted(self.live)))
        self.round += 1
        self.announced, self.wishes, self.arrived = {}, set(), set()
        self.stopped = stop
        return request

    def stats(self):
        return {"rounds": self.round, "stopped": self.stopped,
                "requests": [{"round": r, "stop": s, "ranks": ranks} for r, s, ranks in self.requested]}


# -- nodelay's wire records (the plugin: mxhet.control.rules.NodelayRule) ---------------------

@w.reply_record
class TransferReply(w.Reply):
    """The answer to :class:`Notify` (deferred until the rule requests the
    transfer: ``ready`` true, ``stop`` true when it is the job's last round) and
    to :class:`Merged` (``ready`` false), naming the ``round``."""
    TYPE = "transfer_reply"
    ready: bool = False
    round: int = 0
    stop: bool = False
    CHECKS = {"ready": w.check_bool, "round": w.integer(), "stop": w.check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Notify(w.Request):
    """nodelay: the worker holds ``pending`` (>= 1) gradients for transfer round
    ``round`` (Algorithm 1, line 16); ``want_stop`` asks for the job to stop after it."""
    TYPE = "notify"
    REPLY = TransferReply
    round: int
    pending: int
    want_stop: bool
    CHECKS = {"round": w.integer(), "pending": w.integer(1), "want_stop": w.check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Merged(w.Request):
    """nodelay: the worker received the global model merged in round ``round``."""
    TYPE = "merged"
    REPLY = TransferReply
    round: int
    CHECKS = {"round": w.integer()}
