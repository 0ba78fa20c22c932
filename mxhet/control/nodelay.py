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

Under ``mxhet-launch --elastic`` the merge runs on ``dist_async`` servers that
add every push (:class:`kvstore_ext.updaters.MemberSum`), so the count of a
round's pushes lives here instead: the request names the round's *members*
(the live ranks it was requested from, m of them; each pushes ``w.x / m``),
each member reports its push applied (:meth:`TransferRule.pushed`), and the
members may pull once every one of them pushed or is gone
(:class:`PushRelease`). A rank that leaves -- its script ended its loop, or the
State Server's heartbeat watch found it dead: one path, :meth:`TransferRule.leave`
-- is dropped from the live ranks at once, so neither the announcement, the
push barrier nor the arrival of a merge waits for it; a member gone before it
reported its push makes its round *incomplete* (its push may be missing, or
partly applied if it died while pushing). A rank's push of a round is counted
once, and only a member's: a process started again for a dead rank
(:meth:`TransferRule.join`) takes part from the next round requested, never
in the round its predecessor was a member of. Fewer than ``min_workers`` live
ranks end the job (:class:`TooFewWorkers`).

Nothing here reads a clock, a socket or MXNet; requests are matched to
answers through opaque ``token``s (the State Server uses sequence numbers).
"""
import dataclasses

from ..errors import ProtocolError
from . import wire as w
from .membership import TooFewWorkers


@dataclasses.dataclass(frozen=True)
class TransferRequest:
    """The master's request: hand over ``w.x`` for ``round`` (``stop``: the job's last round).

    ``tokens`` maps each live rank to the token of its announcement.
    """
    round: int
    stop: bool
    tokens: dict

    @property
    def members(self):
        """How many ranks the transfer was requested from (each pushes ``w.x`` / this on ``dist_async``)."""
        return len(self.tokens)


@dataclasses.dataclass(frozen=True)
class PushRelease:
    """Every member of ``round`` pushed or is gone: the members still here may pull the merged model.

    ``tokens`` maps each waiting rank to the token of its :meth:`TransferRule.pushed`;
    ``complete`` is False when a member left before reporting its push."""
    round: int
    complete: bool
    tokens: dict


class TransferRule:
    """When to request the next transfer (Algorithm 1's master).

    Args:
        ranks: the workers' ranks (every one must take part in every round).
        min_workers: the fewest live ranks the job may go on with (``--elastic``).

    Raises:
        ValueError: for an empty set of ranks or a ``min_workers`` below 1.
    """

    def __init__(self, ranks, min_workers=1):
        self.live = set(ranks)
        if not self.live:
            raise ValueError("the transfer rule needs at least one worker rank")
        if not isinstance(min_workers, int) or isinstance(min_workers, bool) or min_workers < 1:
            raise ValueError("min_workers must be an integer >= 1, got %r" % (min_workers,))
        self.min_workers = min_workers
        self.failed = None        # the TooFewWorkers that ended the job, once it did
        self.members = frozenset()  # the ranks the last transfer was requested from
        self.pushes = {}          # member -> token of its report that its push of the last round is applied
        self.lost = set()         # members of the last round gone before reporting their push
        self.push_released = True  # the last round's push barrier was released (nothing requested yet: True)
        self.incomplete = []      # rounds a member left before reporting its push
        self.departures = []      # (rank, the next round to request when it left)
        self.joins = []           # (rank, the first round it takes part in)
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

    def pushed(self, rank, round_, token=None):
        """``rank``'s push of round ``round_`` is applied; returns a :class:`PushRelease` once every
        member of the round pushed or is gone (None: it waits).

        Raises:
            ProtocolError: for an unknown or departed rank, a round other than the last requested,
                a rank that is no member of it (e.g. started again after the round was requested),
                or a second report (a push is counted once).
        """
        self._check(rank)
        if round_ != self.round - 1:
            raise ProtocolError("rank %d reported its push of round %d; the last transfer requested is round %d"
                                % (rank, round_, self.round - 1))
        if rank not in self.members or rank in self.lost:   # (lost: a dead member's rank, started again)
            raise ProtocolError("rank %d is no member of round %d (it was requested from ranks %s)"
                                % (rank, round_, sorted(self.members)))
        if rank in self.pushes or self.push_released:
            raise ProtocolError("rank %d reported its push of round %d twice" % (rank, round_))
        self.pushes[rank] = token
        return self._push_due()

    def leave(self, rank):
        """``rank`` left the job (its loop ended, or it died: one path); returns what is now due, in
        order: a :class:`PushRelease` (the others' pull of the round it was a member of), a
        :class:`TransferRequest` (the others complete an announcement without it), or only a
        :class:`TooFewWorkers` when fewer than ``min_workers`` live ranks are left."""
        if rank not in self.live:
            return []
        self.live.discard(rank)
        if not self.stopped:   # (a rank that ends with the job after its last round is no departure)
            self.departures.append((rank, self.round))
        self.announced.pop(rank, None)
        self.wishes.discard(rank)
        self.arrived.discard(rank)
        if rank in self.members and rank not in self.pushes and not self.push_released:
            self.lost.add(rank)
        if self.live and len(self.live) < self.min_workers and not self.stopped and self.failed is None:
            self.failed = TooFewWorkers(
                "rank %d left at transfer round %d: %d worker(s) still train, fewer than the job's minimum of %d "
                "(--min-workers)" % (rank, self.round, len(self.live), self.min_workers))
            return [self.failed]
        due = [self._push_due()]
        if self.live:
            due.append(self._due())
        return [d for d in due if d is not None]

    def join(self, rank):
        """``rank`` is back (a worker started again for a dead or departed rank); returns the first
        round it takes part in -- the next one requested: it announces that round, and the round
        waits for it as for any live rank -- or None when the job's last round was requested already
        (nothing is left for it). It holds the global model from its start, so the merge in flight
        does not wait for its arrival.

        Raises:
            ProtocolError: for a rank that is still live.
        """
        if rank in self.live:
            raise ProtocolError("rank %d joins but never left" % rank)
        if self.stopped or self.failed is not None:
            return None
        self.live.add(rank)
        self.arrived.add(rank)
        self.joins.append((rank, self.round))
        return self.round

    @property
    def merging(self):
        """True while the last requested merge has not reached every live worker."""
        return self.round > 0 and not self.live <= self.arrived

    def _check(self, rank):
        if self.failed is not None:
            raise ProtocolError(self.failed.message)
        if rank not in self.live:
            raise ProtocolError("rank %d is not a live worker of this job" % rank)

    def _due(self):
        if self.stopped or self.merging or not self.live <= set(self.announced):
            return None
        stop = bool(self.wishes & self.live)
        request = TransferRequest(self.round, stop, {r: self.announced[r] for r in sorted(self.live)})
        self.requested.append((self.round, stop, sorted(self.live)))
        self.members = frozenset(self.live)
        self.pushes, self.lost, self.push_released = {}, set(), False
        self.round += 1
        self.announced, self.wishes, self.arrived = {}, set(), set()
        self.stopped = stop
        return request

    def _push_due(self):
        if self.push_released or not self.members <= set(self.pushes) | self.lost:
            return None
        self.push_released = True
        complete = not self.lost
        if not complete:
            self.incomplete.append(self.round - 1)
        waiting = {r: t for r, t in sorted(self.pushes.items()) if r in self.live}
        return PushRelease(self.round - 1, complete, waiting)

    def stats(self):
        stats = {"rounds": self.round, "stopped": self.stopped,
                 "requests": [{"round": r, "stop": s, "ranks": ranks} for r, s, ranks in self.requested]}
        if self.departures or self.joins or self.incomplete or self.failed is not None:
            stats.update(departures=[{"rank": r, "round": n} for r, n in self.departures],
                         joins=[{"rank": r, "round": n} for r, n in self.joins],
                         incomplete_rounds=list(self.incomplete),
                         failed=None if self.failed is None else self.failed.message)
        return stats


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
    members: int = 0
    CHECKS = {"ready": w.check_bool, "round": w.integer(), "stop": w.check_bool, "members": w.integer()}


@w.reply_record
class TransferPushedReply(w.Reply):
    """The answer to :class:`TransferPushed`, once every member of ``round`` pushed or is
    gone (``complete`` false: a member left before reporting its push)."""
    TYPE = "transfer_pushed_reply"
    round: int = 0
    complete: bool = True
    CHECKS = {"round": w.integer(), "complete": w.check_bool}


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransferPushed(w.Request):
    """nodelay under ``--elastic``: the worker's push of transfer round ``round`` is applied on the
    (``dist_async``) servers; answered once every member's is, or the member is gone."""
    TYPE = "transfer_pushed"
    REPLY = TransferPushedReply
    round: int
    CHECKS = {"round": w.integer()}
