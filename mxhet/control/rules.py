"""The State Server's rules as plugins.

:class:`~.server.StateService` keeps what every job shares (sessions and
replays, rank ownership, registration, goodbyes, heartbeats and the
Algorithm 2 table of records); everything a mode decides there is a
:class:`RulePlugin`: it names the request kinds it handles (``KINDS``), answers
them, hears of departures and reports its statistics under ``NAME``. A job's
State Server loads the plugins its mode's spec names
(:attr:`mxhet.policy.spec.ModeSpec.state_rules`); a request of a kind no
loaded plugin handles is refused.

Each rule owns its wire records: the request classes it answers
(``REQUESTS``, each naming its answer's record in ``REPLY``) and its reply
records (``REPLIES``), declared in the rule's module (SSP's here) with only
the fields that rule answers; :mod:`.messages` gathers every plugin's. A
refused request gets the generic :class:`~.wire.Reply` whatever its kind.

A plugin reaches the service only through the few things it is given:
``host.registered(rank)`` (the record, or NotRegistered), ``host.table``,
``host.released`` (deferred replies now due), ``host.num_workers`` and
``host.left``.
"""
import dataclasses
import json
import math
import time

from ..errors import ConfigError, ProtocolError
from . import adsp
from . import gcada
from . import membership
from . import nodelay
from . import preduce
from . import state_rule
from . import wire as w
from .gcada import GroupCoordinator
from .membership import RESTARTED, Done, Entered, Finished, RoundRendezvous, TooFewWorkers
from .nodelay import TransferRule
from .preduce import PartialReduceController
from .state_rule import LazyHeap
from ..policy.deadline import RoundBook, check_deadline, check_round_length, min_local_iters, training_start, waited
from ..policy.needed import LossBook, check_wait_needed


class RulePlugin:
    """One rule of the State Server; subclasses set ``NAME``, ``REQUESTS`` and ``REPLIES``.

    ``handle`` returns the reply (a record of the request's ``REPLY``), or None
    when the answer is deferred (it is then appended to ``host.released``
    later). ``KINDS``, the request kinds handled, follow from ``REQUESTS``.
    """

    NAME = ""
    REQUESTS = ()   # the request record classes this rule answers
    REPLIES = ()    # its own reply record classes (the generic Reply is everyone's)
    KINDS = ()
    STATS_KEY = None   # the State Server statistics' key of this rule's record (default: NAME)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.KINDS = tuple(req.TYPE for req in cls.REQUESTS)

    def __init__(self, host):
        self.host = host

    def handle(self, request, now):
        """Answer ``request`` (a kind in ``KINDS``); every rule overrides this."""
        raise ProtocolError("State Server rule %r has no handler for %r" % (self.NAME, request.TYPE))

    def registered(self, rank):
        """A rank (re)registered and is present."""

    def bye(self, rank):
        """A rank said goodbye; returns True if the goodbye's reply says ``ready`` (G-CADA)."""
        return False

    def depart(self, rank, cause):
        """A rank is gone without a goodbye (``cause``)."""

    def stats(self):
        """This rule's record for the State Server's statistics (JSON-serializable); None if it has none."""
        return None

    @staticmethod
    def empty_stats():
        """The record when the rule is not loaded."""
        return None


class ESyncRule(RulePlugin):
    """Algorithm 2's QUERY-STATE and RESET over the service's table (:mod:`.state_rule`)."""

    NAME = "esync"
    REQUESTS = (state_rule.Query, state_rule.Reset)
    REPLIES = (state_rule.QueryReply, state_rule.ResetReply)
    STATS_KEY = "rounds"

    def __init__(self, host, round_deadline=0.0, round_length=0.0, late_memory=False, wait_needed=0.0):
        super().__init__(host)
        self.stop_decisions = {}  # round -> stop after this round?
        self.rounds = {}          # round -> {"slowest": rank, "local_iters": {rank: k}}
        # --round-deadline D (mxhet.policy.deadline); 0: Algorithm 2 as in the paper, untouched
        self.deadline = check_deadline(round_deadline)
        if late_memory and not self.deadline:
            raise ConfigError("late_memory (--late-memory) needs round_deadline (--round-deadline) > 0")
        # --late-memory: the rounds a late device misses add its latest delta again (mxhet.policy.deadline)
        self.book = RoundBook(memory=late_memory) if self.deadline else None
        # --round-length L: a round lasts about L fast iterations (0: one iteration of the slowest device on time)
        self.round_length = check_round_length(round_length, self.deadline)
        # --wait-needed R: the rounds also wait for a device whose loss on the global model is above R x the
        # lowest (mxhet.policy.needed); 0: off
        need = check_wait_needed(wait_needed, self.deadline)
        self.losses = LossBook(need) if need else None
        self._late_seq = {}       # late rank -> seq of its deferred READY (released when its round closes)
        self._start = None        # where an unmeasured device's running time counts from (deadline.training_start)

    def handle(self, req, now):
        if req.TYPE == state_rule.Query.TYPE:
            if self.deadline:
                return self._deadline_query(req, now)
            return self._query(req, now)
        host = self.host
        host.registered(req.rank)
        host.table.reset(req.rank, req.round, now - req.since_finish)
        stop = self.stop_decisions.setdefault(req.round, req.want_stop)
        if stop and self._late_seq:
            self._release_late_on_stop(req.rank)
        return state_rule.ResetReply(seq=req.seq, round=req.round, stop=stop)

    def _release_late_on_stop(self, rank):
        """The job agreed to stop: the late devices' deferred queries are answered with the stop
        (their deltas' rounds will never close; a blocked worker would otherwise wait for ever)."""
        records = self.host.table.records
        for r, seq in sorted(self._late_seq.items()):
            if r == rank:
                continue
            self.book.forget(r)
            reply = state_rule.QueryReply(seq=seq, round=records[r].round, stop=True)
            self.host.released.append((r, reply))
        self._late_seq = {r: s for r, s in self._late_seq.items() if r == rank}

    def deferred_late(self):
        """The late ranks whose READY waits for the round their delta enters to close (sorted)."""
        return sorted(self._late_seq)

    def named_members(self, round_):
        """Under ``--round-deadline``, round ``round_``'s members once its membership closed (the
        on-time devices and the late ones whose delta enters it); None otherwise (every worker
        still training is a member)."""
        if self.book is None:
            return None
        closed = self.book.membership(round_)
        return None if closed is None else frozenset(closed.members)

    def _query(self, req, now):
        rank, round_ = req.rank, req.round
        record = self.host.registered(rank)
        if round_ != record.round:
            raise ProtocolError("query for round %d, rank %d is in round %d" % (round_, rank, record.round))
        if any(stop and t <= round_ for t, stop in self.stop_decisions.items()):
            # Protocol v2: workers send RESET without waiting for its answer, so
            # the job's decision to stop after the round just aggregated comes
            # back with the first query of the next one (never READY: no worker
            # pushes again, every worker stops after the same round). A later round
            # is a worker that rejoined while the last one was open: it stops too.
            membership_rule = self.host.rule("membership")
            if membership_rule is not None:
                membership_rule.stopped_before_its_rounds(rank)
            return state_rule.QueryReply(seq=req.seq, round=round_, stop=True)
        table = self.host.table
        ready = table.query(rank, req.k, req.c, now - req.since_finish, now, present_only=True)
        # the device decided against: one that left (goodbye, death, its loop's end) is never named
        slowest = table.slowest_present_rank()
        if slowest is None:
            slowest = table.slowest_rank()
        if ready:
            info = self.rounds.get(round_)
            if info is None:
                info = self.rounds[round_] = {"slowest": slowest, "local_iters": {}}
            info["local_iters"].setdefault(rank, req.k)
        return state_rule.query_reply(req.seq, ready, round_, slowest)

    # -- --round-deadline (mxhet.policy.deadline) ---------------------------------------------
    def waited_ranks(self, now):
        """The present ranks the rounds wait for under the deadline at ``now``
        (a test batch running longer than the bound already is late); a rank that
        stopped training (it left its loop, :class:`MembershipRule`) is none of them."""
        table = self.host.table
        records, present = table.records, [r for r in self.host.present if table.is_present(r)]
        start = -math.inf if self._start is None else self._start
        on_time = waited({r: records[r].capability for r in present}, self.deadline,
                         {r: now - max(records[r].last_finish, start) for r in present})
        if self.losses is None:
            return on_time
        return on_time | self.losses.needed(present)

    def needed_ranks(self):
        """Under ``--wait-needed``, the present ranks waited for because the global model serves
        their data badly (whether on time or not; sorted); None when the rule is off."""
        if self.losses is None:
            return None
        table = self.host.table
        return sorted(self.losses.needed([r for r in self.host.present if table.is_present(r)]))

    def _deadline_query(self, req, now):
        """QUERY-STATE under a deadline. A device the rounds wait for is answered
        by Algorithm 2 among those devices; READY closes its round's membership
        and carries the round's ``target`` (members) and the device's ``weight``
        (its share). A late device's query after an iteration is deferred until
        the round its delta enters closes, then answered READY with that round
        (possibly ahead of its own), its share and the target."""
        rank, round_ = req.rank, req.round
        host, table = self.host, self.host.table
        record = host.registered(rank)
        if round_ != record.round:
            raise ProtocolError("query for round %d, rank %d is in round %d" % (round_, rank, record.round))
        if self._start is None and req.k == 0:   # the first test batch reported
            self._start = training_start(record.last_finish, now - req.since_finish, req.c)
        if self.losses is not None and req.loss != state_rule.NO_LOSS:
            self.losses.observe(rank, req.loss)
        if any(stop and t >= round_ for t, stop in self.stop_decisions.items()):
            # the job stops after a round this device has not passed: it never pushes again
            self.book.forget(rank)
            return state_rule.QueryReply(seq=req.seq, round=round_, stop=True)
        # A device whose late delta waits for its round (a deferred query) is not waited for: it can do nothing
        # until that round closes, and Algorithm 2 would wait for its next query (a deadlock).
        on_time = ((self.waited_ranks(now) - set(self._late_seq))
                   | ({rank} if rank not in host.present else set()) or {rank})
        slowest = max(on_time, key=lambda r: (table.records[r].capability, -r))
        closed = self.book.membership(round_)
        min_iters = self._min_iters(rank, req.c) if self.round_length else None
        if closed is not None and rank in closed.members:
            # Named a member when its round closed (it was on time then): the round's rendezvous waits for
            # it, so it aggregates there with its share whatever the bound says of its speed since.
            ready = table.query(rank, req.k, req.c, now - req.since_finish, now, among=(), min_iters=min_iters)
            if min_iters is not None and not ready:   # --round-length: short of its local iterations
                return state_rule.query_reply(req.seq, False, round_, slowest)
            self.rounds.setdefault(round_, {"slowest": slowest, "local_iters": {}})["local_iters"].setdefault(
                rank, req.k)
            return _ready(req.seq, round_, slowest, closed, rank)
        if rank not in on_time or closed is not None:
            # Late, or on time again only after its round closed without it: its delta enters a later round.
            table.query(rank, req.k, req.c, now - req.since_finish, now, among=())   # the record's c, t_e
            if req.k == 0:
                return state_rule.query_reply(req.seq, False, round_, slowest)
            open_round = max(table.records[r].round for r in on_time)
            due = self.book.arrive(rank, round_, open_round)
            info = self.rounds.setdefault(due, {"slowest": slowest, "local_iters": {}})
            info["local_iters"].setdefault(rank, req.k)
            if not on_time - {rank}:
                # nobody else trains to close its round (the others left or died): it closes the round alone
                alone = self.book.close(due, [])
                info["late"] = {str(r): s for r, s in sorted(alone.late.items())}
                return _ready(req.seq, due, rank, alone, rank)
            self._late_seq[rank] = req.seq
            return None
        ready = table.query(rank, req.k, req.c, now - req.since_finish, now, among=sorted(on_time),
                            min_iters=min_iters)
        if not ready:
            return state_rule.query_reply(req.seq, False, round_, slowest)
        info = self.rounds.setdefault(round_, {"slowest": slowest, "local_iters": {}})
        info["local_iters"].setdefault(rank, req.k)
        first = not self.book.is_closed(round_)
        closed = self.book.close(round_, sorted(on_time))
        if first:
            info["late"] = {str(r): s for r, s in sorted(closed.late.items())}
            if self.losses is not None:   # the members the round waited for as needed (a deferred one is late)
                info["needed"] = sorted(set(self.needed_ranks()) & on_time)
            for r in closed.late:
                host.released.append((r, _ready(self._late_seq.pop(r), round_, slowest, closed, r)))
        return _ready(req.seq, round_, slowest, closed, rank)

    def _min_iters(self, rank, capability):
        """``--round-length``: capability -> the fewest local iterations a device on time does in a round,
        against the fastest present measured capability (``capability``, the querying ``rank``'s new c,
        replacing its record's)."""
        table = self.host.table
        caps = [table.records[r].capability for r in self.host.present if r != rank and table.is_present(r)]
        fastest = min([c for c in caps if math.isfinite(c)] + [capability])
        length = self.round_length
        return lambda c: min_local_iters(length, c, fastest)

    def depart(self, rank, cause):
        if self.book is not None:
            self.book.forget(rank)
            self._late_seq.pop(rank, None)
        if self.losses is not None:
            self.losses.forget(rank)

    def bye(self, rank):
        self.depart(rank, "bye")
        return False

    @staticmethod
    def empty_stats():
        return []

    def stats(self):
        # "late" (rank -> rounds missed) only under --round-deadline, "needed" (ranks) only under
        # --wait-needed: the paper's record is unchanged
        return [dict({"round": t, "slowest": info["slowest"],
                      "local_iters": {str(r): k for r, k in sorted(info["local_iters"].items())}},
                     **{key: info[key] for key in ("late", "needed") if key in info})
                for t, info in sorted(self.rounds.items())]


def _ready(seq, round_, slowest, closed, rank):
    """READY under ``--round-deadline`` for ``rank`` in the closed round ``closed``: the round's
    size and the rank's share; under ``--late-memory`` whether its delta is remembered (it is
    late) and, for the keeper, the memories it adds."""
    memory, share = closed.memory_for(rank)
    return state_rule.QueryReply(seq=seq, ready=True, round=round_, slowest=slowest, target=closed.target,
                                 weight=closed.members.get(rank, 0.0),
                                 remember=closed.memory and rank in closed.late,
                                 memory=memory, memory_share=share)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Clock(w.Request):
    """SSP: the worker finished ``clock`` iterations and asks to start the next.

    The State Server answers (a plain :class:`~.wire.Reply`) when the worker is
    at most ``staleness`` iterations ahead of the slowest worker still in the job.
    """
    TYPE = "clock"
    clock: int
    CHECKS = {"clock": w.integer()}


class SSPRule(RulePlugin):
    """SSP's staleness gate: a CLOCK is answered once the sender is at most s iterations ahead.

    O(log N) per request: the minimum clock of the ranks present and the
    deferred requests each live in a :class:`~.state_rule.LazyHeap`.
    """

    NAME = "ssp"
    REQUESTS = (Clock,)
    STATS_KEY = "ssp_clocks"

    def __init__(self, host, staleness=2):
        super().__init__(host)
        if not isinstance(staleness, int) or staleness < 0:
            raise ValueError("staleness must be an integer >= 0, got %r" % (staleness,))
        self.staleness = staleness
        self.clocks = {}         # rank -> iterations done
        self.waiting = {}        # rank -> seq of its deferred clock request
        self._live_clocks = LazyHeap()    # present rank -> its clock (min = the slowest)
        self._deferred = LazyHeap()       # waiting rank -> (its clock, arrival order)
        self._arrivals = 0

    def _allows(self, clock):
        slowest = self._live_clocks.peek()   # the minimum clock of the ranks still in the job
        return slowest is None or clock - slowest[0] <= self.staleness

    def handle(self, req, now):
        self.host.registered(req.rank)
        if req.clock < self.clocks.get(req.rank, 0):
            raise ProtocolError("rank %d clock went back from %d to %d"
                                % (req.rank, self.clocks[req.rank], req.clock))
        self.clocks[req.rank] = req.clock
        if req.rank in self.host.present:
            self._live_clocks.set(req.rank, req.clock)
        self.waiting.pop(req.rank, None)
        self._deferred.discard(req.rank)
        self._release()
        if self._allows(self.clocks[req.rank]):
            return w.Reply(seq=req.seq)
        self.waiting[req.rank] = req.seq
        self._arrivals += 1
        self._deferred.set(req.rank, (req.clock, self._arrivals))
        return None

    def _release(self):
        """Release the deferred requests now allowed, in the order they arrived.

        The deferred are ordered by clock, so only those released (plus one)
        are looked at: O(k log N) for k released.
        """
        due = []
        while True:
            top = self._deferred.peek()
            if top is None or not self._allows(top[0][0]):
                break
            self._deferred.pop()
            due.append((top[0][1], top[1]))
        for _, rank in sorted(due):
            self.host.released.append((rank, w.Reply(seq=self.waiting.pop(rank))))

    def registered(self, rank):
        self._live_clocks.set(rank, self.clocks.setdefault(rank, 0))

    def bye(self, rank):
        self.depart(rank, "bye")
        return False

    def depart(self, rank, cause):
        self._live_clocks.discard(rank)
        self._release()

    @staticmethod
    def empty_stats():
        return {}

    def stats(self):
        return {str(r): c for r, c in sorted(self.clocks.items())}


class ADSPRule(RulePlugin):
    """ADSP's commit targets and commit-rate search (:mod:`.adsp`)."""

    NAME = "adsp"
    REQUESTS = (adsp.Commit, adsp.AdspRecord)
    REPLIES = (adsp.CommitReply,)

    def __init__(self, host, period=adsp.DEFAULT_PERIOD, epoch=adsp.DEFAULT_EPOCH,
                 window_periods=adsp.DEFAULT_WINDOW_PERIODS):
        super().__init__(host)
        self._args = dict(period=period, epoch=epoch, window_periods=window_periods)
        adsp.ADSPScheduler(range(host.num_workers), **self._args)  # validate now
        self.scheduler = None   # the first check period starts with the first report
        self._text = None       # the search record's JSON, paged out by ADSP_RECORD

    def handle(self, req, now):
        self.host.registered(req.rank)
        if req.TYPE == adsp.Commit.TYPE:
            if self.scheduler is None:
                self.scheduler = adsp.ADSPScheduler(range(self.host.num_workers), now=now, **self._args)
            target, left = self.scheduler.report(req.rank, req.commits, req.loss, req.commit_cost, now)
            return adsp.CommitReply(seq=req.seq, target=target, period_left=max(0.0, left))
        # A page of the record (``null`` before any commit report); the text is taken anew at page 0.
        if req.start == 0 or self._text is None:
            record = self.scheduler.search_record() if self.scheduler is not None else None
            self._text = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
        return w.record_page(req.seq, self._text, req.start)

    def stats(self):
        return self.scheduler.stats() if self.scheduler is not None else None


class NodelayRule(RulePlugin):
    """nodelay's transfer requests (:mod:`.nodelay`), created with the ranks present at the first request.

    A rank's goodbye and its death (the heartbeat watch under ``--elastic``) both leave the rule
    (:meth:`TransferRule.leave`); a rank started again after it died (``--max-restarts``) joins it back
    at the next round requested (:meth:`rejoin`, from the service's registration)."""

    NAME = "nodelay"
    REQUESTS = (nodelay.Notify, nodelay.Merged, nodelay.TransferPushed)
    REPLIES = (nodelay.TransferReply, nodelay.TransferPushedReply)

    def __init__(self, host, min_workers=1):
        super().__init__(host)
        self.min_workers = min_workers
        self.rule = None
        self._waiting = {}   # rank -> seq of its deferred Notify or TransferPushed (answered with the job's failure)
        self._gone_early = set()   # ranks that left before the rule was made

    def _rule(self):
        """The rule, made at the first request (only a nodelay job sends one) over every rank; those
        that left before it and are still gone then leave it, so a death in the others' start-up counts
        against ``min_workers`` too (the request is then refused)."""
        if self.rule is None:
            gone = self._gone_early & self.host.left
            self.rule = TransferRule(set(range(self.host.num_workers)) - (self.host.left - gone),
                                     min_workers=min(self.min_workers, self.host.num_workers))
            for rank in sorted(gone):
                self._release(self.rule.leave(rank))
        return self.rule

    def handle(self, req, now):
        host = self.host
        host.registered(req.rank)
        rule = self._rule()
        if req.TYPE == nodelay.Notify.TYPE:
            own = self._release([rule.notify(req.rank, req.round, req.want_stop, req.seq)], req.rank)
        elif req.TYPE == nodelay.TransferPushed.TYPE:
            own = self._release([rule.pushed(req.rank, req.round, req.seq)], req.rank)
        else:
            self._release([rule.merged(req.rank, req.round)])
            return nodelay.TransferReply(seq=req.seq, round=req.round)
        if own is None:
            self._waiting[req.rank] = req.seq
        return own

    def _release(self, due, rank=None):
        """Answer every request a rule action releases; returns ``rank``'s own answer (None if not due)."""
        own = None
        for action in due:
            if action is None:
                continue
            if isinstance(action, TooFewWorkers):
                answers = [(r, w.Reply(seq=seq, ok=False, error=action.message, code="too_few_workers"))
                           for r, seq in sorted(self._waiting.items())]
            elif isinstance(action, nodelay.PushRelease):
                answers = [(r, nodelay.TransferPushedReply(seq=seq, round=action.round, complete=action.complete))
                           for r, seq in action.tokens.items()]
            else:
                answers = [(r, nodelay.TransferReply(seq=seq, ready=True, round=action.round, stop=action.stop,
                                                     members=action.members))
                           for r, seq in action.tokens.items()]
            for r, answer in answers:
                self._waiting.pop(r, None)
                if r == rank:
                    own = answer
                else:
                    self.host.released.append((r, answer))
        return own

    def bye(self, rank):
        if self.rule is None:
            self._gone_early.add(rank)
        else:
            self._waiting.pop(rank, None)
            self._release(self.rule.leave(rank))
        return False

    def depart(self, rank, cause):
        # A death takes the goodbye's path: the rule cannot tell a silent rank from one that left.
        self.bye(rank)

    def event_round(self, event, rank):
        """The transfer round of ``rank``'s latest ``event`` ("leave": the first round it no longer took
        part in; "join": its first round back), for the membership record."""
        if self.rule is None:
            return 0
        found = [n for r, n in (self.rule.departures if event == "leave" else self.rule.joins) if r == rank]
        return found[-1] if found else self.rule.round

    def rejoin(self, rank):
        """The first transfer round of a rank back after it died; None when it never left this rule or
        no round is left for it."""
        if self.rule is None or rank in self.rule.live:
            return None
        return self.rule.join(rank)

    def stats(self):
        return self.rule.stats() if self.rule is not None else None


class PartialReduceRule(RulePlugin):
    """Partial Reduce's groups (:mod:`.preduce`), set up by the first REDUCE_JOIN.

    Under ``--elastic`` a rank found dead (:meth:`depart`) leaves the controller
    at once: the group waiting for its push is released and its members are
    told so; below ``min_workers`` live ranks every waiting worker, and every
    later request, is refused with ``too_few_workers``. A dead rank that
    registers again is grouped again (:meth:`registered`)."""

    NAME = "preduce"
    REQUESTS = (preduce.ReduceJoin, preduce.ReduceReady, preduce.ReducePushed, preduce.ReduceLeave)
    REPLIES = (preduce.GroupedReply, preduce.JoinedReply, preduce.PushedReply, preduce.LeftReply)

    def __init__(self, host, min_workers=1):
        super().__init__(host)
        self.controller = None
        self._settings = None
        self._waiting = {}   # rank -> seq of its unanswered READY or PUSHED
        self.min_workers = min_workers
        self.failed = None   # the refusal's message once a death left fewer than min_workers live ranks
        self.dead = set()    # ranks found dead and not back
        self.finals = set()  # ranks whose final model is on the parameter keys (ReduceLeave final)
        self._model_slot = {}   # rank back after its death -> slot of its starting model
        self._dead_cause = {}   # rank found dead before the first REDUCE_JOIN -> why

    def handle(self, req, now):
        self.host.registered(req.rank)
        if self.failed is not None and req.TYPE != preduce.ReduceLeave.TYPE:
            return w.Reply(seq=req.seq, ok=False, error=self.failed, code="too_few_workers")
        if req.TYPE == preduce.ReduceJoin.TYPE:
            return self._join(req)
        if self.controller is None:
            raise ProtocolError("%s from rank %d before any reduce_join" % (req.TYPE, req.rank))
        if req.TYPE == preduce.ReduceReady.TYPE:
            return self._ready(req)
        if req.TYPE == preduce.ReduceLeave.TYPE:
            return self._leave(req)
        return self._pushed(req)

    def _join(self, req):
        settings = (req.group_size, req.dynamic, float(req.alpha), req.avoid_frozen, req.window, req.spare_slots)
        if self.controller is None:
            self.controller = PartialReduceController(self.host.num_workers, req.group_size, dynamic=req.dynamic,
                                                      alpha=req.alpha, avoid_frozen=req.avoid_frozen,
                                                      window=req.window, spare_slots=req.spare_slots)
            self._settings, self._waiting = settings, {}
            for rank in sorted(self.dead):   # died before any REDUCE_JOIN (in its start-up): never grouped
                self.controller.depart(rank)
            if self.dead and len(self.controller.live) < self.min_workers:   # ... and counted
                rank = max(self.dead)
                self.failed = ("worker rank %d %s; %d worker(s) still train, fewer than the job's minimum of %d"
                               % (rank, self._dead_cause.get(rank, "died"), len(self.controller.live),
                                  self.min_workers))
                return w.Reply(seq=req.seq, ok=False, error=self.failed, code="too_few_workers")
        elif settings != self._settings:
            raise ProtocolError("rank %d joins Partial Reduce with %s, the job has %s"
                                % (req.rank, settings, self._settings))
        slot = self._model_slot.pop(req.rank, None)
        if slot is None:
            return preduce.JoinedReply(seq=req.seq)
        ctl = self.controller
        return preduce.JoinedReply(seq=req.seq, model_slot=slot, k=ctl.model_k(slot))

    def _groups(self, groups, rank=None, seq=None):
        """Answer the members of newly formed groups; returns ``rank``'s own answer, if it is in one."""
        own = None
        for g in groups:
            for member, weight in zip(g.members, g.weights):
                reply = preduce.GroupedReply(seq=seq if member == rank else self._waiting.pop(member), round=g.id,
                                             group_slot=g.slot, weight=min(1.0, max(0.0, weight)), k=g.k,
                                             target=g.fill_of(member))
                if member == rank:
                    own = reply
                else:
                    self.host.released.append((member, reply))
        return own

    def _stopped(self, ranks, rank=None, seq=None):
        """Answer the waiting ``ranks`` with stop; returns ``rank``'s own answer if it is one of them."""
        own = None
        for r in ranks:
            reply = preduce.GroupedReply(seq=seq if r == rank else self._waiting.pop(r), stop=True)
            if r == rank:
                own = reply
            else:
                self.host.released.append((r, reply))
        return own

    def _ready(self, req):
        # A stop wish ends the job once every live worker has been in a group
        # (none leaves without having contributed); groups already formed
        # finish their reduce, every later READY is answered with stop.
        ctl = self.controller
        if ctl.stopping:
            ctl.pulled(req.rank)
            return preduce.GroupedReply(seq=req.seq, stop=True)
        if req.want_stop:
            self._stopped(ctl.want_stop())   # stops now if everyone has been in a group
            if ctl.stopping:
                ctl.pulled(req.rank)
                return preduce.GroupedReply(seq=req.seq, stop=True)
        own = self._groups(ctl.ready(req.rank, req.k), req.rank, req.seq)
        if own is None:
            self._waiting[req.rank] = req.seq
        stopped = self._stopped(ctl.check_stop(), req.rank, req.seq)
        if stopped is not None:
            self._waiting.pop(req.rank, None)
            ctl.pulled(req.rank)
        return own or stopped

    def _pushed(self, req):
        if self.controller.was_released(req.group):
            return preduce.PushedReply(seq=req.seq, released=True)
        members = self.controller.push_done(req.rank, req.group)
        if not members:
            self._waiting[req.rank] = req.seq
            return None
        for member in members:
            if member != req.rank and member in self._waiting:   # (a member that died after its push waits not)
                self.host.released.append((member, preduce.PushedReply(seq=self._waiting.pop(member))))
        return preduce.PushedReply(seq=req.seq)

    def _leave(self, req):
        """``--elastic``: the rank trains no more (never grouped again, no goodbye yet: it still
        meets the others at the membership rule's finish barrier)."""
        if req.final:
            self.finals.add(req.rank)
        if self.failed is None and req.rank in self.controller.live:
            self._groups(self.controller.leave(req.rank))
            self._stopped(self.controller.check_stop())
        return preduce.LeftReply(seq=req.seq, finals=len(self.finals))

    def bye(self, rank):
        if self.controller is not None and self.failed is None:
            self._groups(self.controller.leave(rank))
            self._stopped(self.controller.check_stop())
        return False

    def depart(self, rank, cause):
        """``rank`` died: the controller releases its group (its members are told, they keep their
        models), groups the others without it, or -- fewer than ``min_workers`` live -- refuses
        every waiting worker."""
        self.dead.add(rank)
        self._model_slot.pop(rank, None)
        self._waiting.pop(rank, None)
        ctl = self.controller
        if ctl is None:
            self._dead_cause[rank] = cause
            return
        if self.failed is not None:
            return
        was_live = rank in ctl.live
        formed, released = ctl.depart(rank)
        if released is not None:
            for member in released.members:
                if member in self._waiting:
                    self.host.released.append((member, preduce.PushedReply(seq=self._waiting.pop(member),
                                                                           released=True)))
        if was_live and len(ctl.live) < self.min_workers:
            self.failed = ("worker rank %d %s; %d worker(s) still train, fewer than the job's minimum of %d"
                           % (rank, cause, len(ctl.live), self.min_workers))
            for member, seq in sorted(self._waiting.items()):
                self.host.released.append((member, w.Reply(seq=seq, ok=False, error=self.failed,
                                                           code="too_few_workers")))
            self._waiting = {}
            return
        self._groups(formed)
        self._stopped(ctl.check_stop())

    def registered(self, rank):
        """A rank that died or left registers again (a restarted process; the simulator's device
        back, ``--events SLOT:join@T``): it is grouped again, and its REDUCE_JOIN's answer names
        the slot of its starting model."""
        self.dead.discard(rank)
        ctl = self.controller
        if ctl is None or self.failed is not None or rank in ctl.live:
            return
        slot = ctl.join(rank)
        if slot is not None:
            self._model_slot[rank] = slot

    def stats(self):
        return self.controller.stats() if self.controller is not None else None


class GCADARule(RulePlugin):
    """G-CADA's groups (:mod:`.gcada`), set up by the first GROUP_BEGIN.

    Under ``--elastic`` a rank found dead (:meth:`depart`) has its claim or its trigger handed on; one
    that registers again (:meth:`rejoin`, from the service's registration) is taken back into its group."""

    NAME = "gcada"
    REQUESTS = (gcada.GroupBegin, gcada.GroupWatch, gcada.GroupDone, gcada.GroupUploaded, gcada.GroupStepped)
    REPLIES = (gcada.GroupSelection, gcada.WatchReply, gcada.ClaimReply, gcada.UploadedReply, gcada.SteppedReply)

    def __init__(self, host, min_workers=1):
        super().__init__(host)
        self.coordinator = None
        self.min_workers = min_workers
        self.dead = set()    # ranks found dead (mxhet-launch --elastic)
        self.failed = None   # the refusal's message once a death left fewer than min_workers live ranks

    def handle(self, req, now):
        self.host.registered(req.rank)
        if self.failed is not None:
            return w.Reply(seq=req.seq, ok=False, error=self.failed, code="too_few_workers")
        begin = req.TYPE == gcada.GroupBegin.TYPE
        c = self.coordinator
        if c is None:
            if not begin:
                raise ProtocolError("G-CADA %s before any group_begin" % req.TYPE)
            c = self.coordinator = GroupCoordinator(self.host.num_workers, req.groups, req.max_delay, req.c)
        if begin:
            c.check(req.groups, req.max_delay, req.c)
        if req.group >= c.rule.groups:
            raise ProtocolError("group %d of rank %d: the job has %d groups" % (req.group, req.rank, c.rule.groups))
        if begin:
            c.smoothness(req.rank, req.group, req.smoothness)
            reply = c.begin(req.rank, req.seq, req.iteration, req.group, req.want_stop)
        elif req.TYPE == gcada.GroupWatch.TYPE:
            reply = c.watch(req.rank, req.seq, req.iteration, req.group)
        elif req.TYPE == gcada.GroupDone.TYPE:
            reply = c.done(req.rank, req.seq, req.iteration, req.group)
        elif req.TYPE == gcada.GroupUploaded.TYPE:
            reply = c.uploaded(req.rank, req.seq, req.iteration, req.group)
        else:
            reply = c.stepped(req.rank, req.seq, req.iteration, req.delta_sq, req.group_sq, now)
        self._flush()
        return reply

    def _flush(self):
        self.host.released.extend(self.coordinator.released)
        self.coordinator.released = []

    def bye(self, rank):
        if self.coordinator is None:
            return False
        retired = self.coordinator.leave(rank)
        self._flush()
        return retired

    def finished(self, rank):
        """``rank`` reached the job's end on the finish barrier (``--elastic``): as a goodbye, and a group so
        left with no member is zeroed by the next trigger (nobody is left to zero it)."""
        if self.coordinator is not None and self.failed is None:
            self.coordinator.leave(rank, zero=True)
            self._flush()

    def depart(self, rank, cause):
        """``rank`` died: its group's open claim and the servers' step it was to trigger go to a
        live worker at once (:meth:`.gcada.GroupCoordinator.depart`), or -- fewer than
        ``min_workers`` live -- every waiting worker, and every later request, is refused."""
        if rank in self.dead:
            return
        self.dead.add(rank)
        c = self.coordinator
        if self.failed is None and self.host.num_workers - len(self.dead) < self.min_workers:
            self.failed = ("worker rank %d %s; %d worker(s) still train, fewer than the job's minimum of %d"
                           % (rank, cause, self.host.num_workers - len(self.dead), self.min_workers))
            if c is not None:
                waiting = [(r, seq) for r, (seq, _, _) in c.waiting.items()]
                waiting += [(r, seq) for watchers in c.watches.values() for r, seq in watchers.items()]
                c.waiting, c.watches = {}, {}
                self.host.released.extend((r, w.Reply(seq=seq, ok=False, error=self.failed, code="too_few_workers"))
                                          for r, seq in sorted(waiting) if r != rank)
            return
        if c is not None:
            c.depart(rank)
            self._flush()

    def rejoin(self, rank, slot):
        """``rank``, gone, registered again for ``slot`` (a worker started again, ``--max-restarts``;
        the simulator's device back): no longer counted dead, and taken back into the group of its
        slot at its first GROUP_BEGIN (:meth:`.gcada.GroupCoordinator.rejoin`). When PS-LITE gave it
        another dead worker's id, the rank that held that slot before is named with it."""
        self.dead.discard(rank)
        c = self.coordinator
        if c is None or self.failed is not None:
            return
        host = self.host
        in_place_of = next((r for r, s in host.slots.items() if s == slot and r != rank and r in host.left), None)
        c.rejoin(rank, slot // c.rule.group_size, in_place_of)
        self._flush()

    def stats(self):
        return self.coordinator.stats() if self.coordinator is not None else None


JOB_OVER = -1
""":meth:`MembershipRule.rejoin`'s answer for a worker back after the job's end (no round left for it)."""


class MembershipRule(RulePlugin):
    """The members of each synchronous round on dist_async (:mod:`.membership`)."""

    NAME = "membership"
    REQUESTS = (membership.RoundEnter, membership.RoundDone, membership.RoundWait, membership.RoundFinish,
                membership.MembershipRecord)
    REPLIES = (membership.EnteredReply, membership.DoneReply, membership.FinishedReply)

    def __init__(self, host, min_workers=1, wall_clock=time.time):
        super().__init__(host)
        self.rendezvous = RoundRendezvous(range(host.num_workers), min_workers=min_workers)
        # The leave / join record's times: Unix seconds, so that the chief can put them on its run's clock
        # and beside the launcher's (a record, never a decision).
        self.wall_clock = wall_clock
        self._text = None   # the record's JSON, paged out by MembershipRecord

    def handle(self, req, now):
        host = self.host
        record = host.registered(req.rank)
        if req.TYPE == membership.RoundEnter.TYPE:
            if record.round == req.round:
                # A worker enters a round's rendezvous only once Algorithm 2 told it READY. A State Server
                # restarted while it waited there never did: unmarked, its fresh record (no capability: the
                # slowest) would keep the device the round waits for NOT-READY for ever.
                record.ready = True
            esync = host.rule("esync")
            named = esync.named_members(req.round) if esync is not None else None
            if named is not None:   # --round-deadline: the round waits for the members ESync's book named
                self.rendezvous.name(req.round, named)
            releases = self.rendezvous.enter(req.rank, req.round, req.seq, req.want_stop, req.counts,
                                             now=self.wall_clock(), stopping=self._stop_agreed())
            self._slot_events()
        elif req.TYPE == membership.RoundDone.TYPE:
            releases = self.rendezvous.done(req.rank, req.round, req.seq)
        elif req.TYPE == membership.RoundWait.TYPE:
            releases = self.rendezvous.wait(req.rank, req.round, req.seq)
        elif req.TYPE == membership.MembershipRecord.TYPE:
            # A page of the record with the slots (the chief's summary); the text is taken anew at page 0.
            if req.start == 0 or self._text is None:
                self._text = json.dumps(dict(self.stats(), slots={str(r): s for r, s in sorted(host.slots.items())}),
                                        separators=(",", ":"), ensure_ascii=True)
            return w.record_page(req.seq, self._text, req.start)
        else:
            # No longer a device Algorithm 2 waits for: ESync's slowest is looked for among those still training.
            host.table.set_present(req.rank, False)
            transfers = host.rule("nodelay")
            if transfers is not None:   # nodelay --elastic: leaving the loop leaves its transfers, as a death does
                transfers.bye(req.rank)
            self._transfer_rounds()
            groups = host.rule("gcada")   # G-CADA under --elastic: nobody waits for a finished worker's group
            if groups is not None:
                groups.finished(req.rank)
            releases = self.rendezvous.finish(req.rank, req.seq, now=self.wall_clock(), stopping=self._stop_agreed())
            self._slot_events()
        return self._release(releases, req.rank)

    def _stop_agreed(self):
        """The job agreed to stop through ESync's RESET, Partial Reduce's controller or nodelay's last transfer
        (no ballot here): a rank that finishes then ends with the job rather than leaving its loop (the record's cause)."""
        esync = self.host.rule("esync")
        if esync is not None and any(getattr(esync, "stop_decisions", {}).values()):
            return True
        transfers = self.host.rule("nodelay")   # nodelay: its master requested the job's last transfer
        if transfers is not None and transfers.rule is not None and transfers.rule.stopped:
            return True
        groups = self.host.rule("preduce")   # Partial Reduce's controller answered stop
        return groups is not None and groups.controller is not None and groups.controller.stopping

    def _release(self, releases, rank=None):
        """Turn the rendezvous' releases into replies; returns ``rank``'s own (None: it waits)."""
        own = None
        for r, seq, answer in releases:
            if isinstance(answer, Entered):
                reply = membership.EnteredReply(seq=seq, round=answer.round, target=answer.members,
                                                ballots=answer.ballots, stop=answer.ballots > 0,
                                                counts=answer.counts, over=answer.over)
            elif isinstance(answer, Done):
                reply = membership.DoneReply(seq=seq, round=answer.round, ready=answer.complete)
            elif isinstance(answer, Finished):
                reply = membership.FinishedReply(seq=seq, chief=-1 if answer.chief is None else answer.chief)
            elif isinstance(answer, TooFewWorkers):
                reply = w.Reply(seq=seq, ok=False, error=answer.message, code="too_few_workers")
            else:
                raise TypeError("unknown rendezvous answer %r" % (answer,))
            if r == rank:
                own = reply
            else:
                self.host.released.append((r, reply))
        return own

    def rejoin(self, rank, not_before=0):
        """The round from which a worker back after it left or died takes part
        (the next round boundary, never before ``not_before``); None for a rank
        that never left; :data:`JOB_OVER` for one back after the job's end."""
        if rank not in self.rendezvous.gone:
            return None
        if self.rendezvous.over(stopping=self._stop_agreed()):
            self.rendezvous.late(rank, now=self.wall_clock())
            self._slot_events()
            return JOB_OVER
        first = self.rendezvous.join(rank, cause=RESTARTED, not_before=not_before, now=self.wall_clock())
        self._slot_events()
        return first

    def stopped_before_its_rounds(self, rank):
        """ESync's rule told ``rank`` the job agreed to stop: a worker that rejoined and took part in
        no round since is recorded late (:meth:`RoundRendezvous.stopped_before_its_rounds`)."""
        self._release(self.rendezvous.stopped_before_its_rounds(rank, now=self.wall_clock()))
        self._slot_events()

    def _slot_events(self):
        """Name each new record event's slot now: after two workers restarted at once a rank may
        come back for another slot (:meth:`StateService._on_register`)."""
        transfers = self.host.rule("nodelay")
        for event in self.rendezvous.events:
            if "slot" not in event and transfers is not None and event["event"] in ("leave", "join"):
                # nodelay enters no round here: its round is the transfer rule's, as that rule recorded it
                event["round"] = transfers.event_round(event["event"], event["rank"])
            event.setdefault("slot", self.host.slots.get(event["rank"]))

    def _transfer_rounds(self):
        """nodelay enters no round here: its transfer rule's rounds stand for them in the record."""
        transfers = self.host.rule("nodelay")
        if transfers is not None and transfers.rule is not None and transfers.rule.round > 0:
            self.rendezvous.note_round(transfers.rule.round - 1)

    def bye(self, rank):
        self._transfer_rounds()
        self._release(self.rendezvous.depart(rank, "bye", now=self.wall_clock(), stopping=self._stop_agreed()))
        self._slot_events()
        return False

    def depart(self, rank, cause):
        # The State Server finds a rank dead only by its silence; the launcher, which saw the process
        # end, names the signal or exit code in the chief's summary (mxhet.control.membership.job_events).
        self._transfer_rounds()
        self._release(self.rendezvous.depart(rank, cause, now=self.wall_clock(), stopping=self._stop_agreed()))
        self._slot_events()

    def stats(self):
        return self.rendezvous.stats()


PLUGINS = {cls.NAME: cls for cls in (ESyncRule, SSPRule, NodelayRule, PartialReduceRule, GCADARule,
                                     MembershipRule, ADSPRule)}
"""Every rule plugin by name, in the order a goodbye reaches them."""

ALL_RULES = tuple(PLUGINS)
