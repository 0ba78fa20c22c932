"""The State Server: Algorithm 2 behind a ZeroMQ ROUTER socket.

:class:`StateService` turns validated requests into replies at a given clock
reading (no I/O, no clock of its own); :func:`serve` is the socket loop. A bad
request is logged and answered with an error reply (or dropped when it cannot
be answered); the loop keeps serving.

Every request costs O(log N) amortized in the number of workers N: the
slowest device, the oldest silence, SSP's minimum clock and the deferred SSP
requests each live in a :class:`~.state_rule.LazyHeap` updated as requests
arrive, instead of being searched for.
"""
import json
import logging
import os
import time

import zmq

from ..errors import NotRegistered, ProtocolError
from . import messages as m
from . import adsp
from .gcada import GroupCoordinator
from .membership import Done, Entered, Finished, RoundRendezvous, TooFewWorkers
from .nodelay import TransferRule
from .preduce import PartialReduceController
from .state_rule import DEFAULT_EPSILON, LazyHeap, StateTable

LOG = logging.getLogger("mxhet.state_server")


class StateService:
    """The control plane's state and request handling.

    It serves ESync (QUERY-STATE / RESET), SSP (the staleness gate) and ADSP
    (commit targets and the commit-rate search).

    Args:
        num_workers: number of workers; their PS-LITE ranks are 0..n-1.
        epsilon: Algorithm 2's ε in seconds.
        staleness: SSP's bound s: a worker may be at most s iterations ahead
            of the slowest worker still in the job.
        adsp_period, adsp_epoch, adsp_window: ADSP's check period Γ (s),
            search epoch (s) and check periods per evaluated commit rate.
        now: the clock reading at creation.
    """

    def __init__(self, num_workers, epsilon=DEFAULT_EPSILON, staleness=2, adsp_period=adsp.DEFAULT_PERIOD,
                 adsp_epoch=adsp.DEFAULT_EPOCH, adsp_window=adsp.DEFAULT_WINDOW_PERIODS, now=0.0, min_workers=1):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("num_workers must be a positive integer, got %r" % (num_workers,))
        if not isinstance(staleness, int) or staleness < 0:
            raise ValueError("staleness must be an integer >= 0, got %r" % (staleness,))
        self.num_workers = num_workers
        self.staleness = staleness
        self.table = StateTable(range(num_workers), epsilon=epsilon, now=now)
        self.clocks = {}         # SSP: rank -> iterations done
        self.waiting = {}        # SSP: rank -> seq of its deferred clock request
        self.released = []       # (rank, Reply) deferred replies now due
        self._live_clocks = LazyHeap()    # SSP: present rank -> its clock (min = the slowest)
        self._deferred = LazyHeap()       # SSP: waiting rank -> (its clock, arrival order)
        self._arrivals = 0
        self._adsp_args = dict(period=adsp_period, epoch=adsp_epoch, window_periods=adsp_window)
        adsp.ADSPScheduler(range(num_workers), **self._adsp_args)  # validate now
        self.adsp = None
        self.slots = {}          # rank -> launcher slot
        self.owners = {}         # rank -> sender (connection) that registered it
        self.last_seen = {}      # rank -> server clock of its latest message
        self._seen = LazyHeap()  # present rank -> last_seen (the oldest first)
        self.sessions = {}       # rank -> (incarnation, last seq, last reply) for replays
        self.signature = None    # (model signature, rank that set it)
        self.left = set()        # ranks that said bye
        self.present = set()     # registered ranks that have not said bye
        self.stop_decisions = {}  # round -> stop after this round?
        self.rounds = {}         # round -> {"slowest": rank, "local_iters": {rank: k}}
        self._handlers = {}      # request type -> bound _on_<type> method
        # the members of each synchronous round on dist_async (mxhet.control.membership)
        self.rendezvous = RoundRendezvous(range(num_workers), min_workers=min_workers)

    @property
    def finished(self):
        """True once every registered worker has left."""
        return bool(self.slots) and not self.present

    def handle(self, request, now, sender=None):
        """Answer one validated request at server clock ``now``.

        ``sender`` identifies the connection (the ZeroMQ identity). A rank
        belongs to the connection that registered it: requests for that rank
        from any other connection are refused, so a stray or hostile client
        cannot act for a live worker.

        Returns the reply, or None when the answer is deferred (an SSP worker
        too far ahead); deferred answers appear later in :attr:`released`.
        """
        rank, kind = request.rank, request.TYPE
        try:
            owner = self.owners.get(rank)
            if owner is not None and owner != sender:
                if kind != _REGISTER:
                    raise ProtocolError("rank %d belongs to another connection" % rank)
                if rank in self.slots and rank not in self.left:
                    raise ProtocolError("rank %d is already registered by another connection" % rank)
            replayable = kind in _REPLAYABLE
            if replayable:
                session = self.sessions.get(rank)
                if session is not None:
                    incarnation, last_seq, last_reply = session
                    if incarnation == request.incarnation:
                        if request.seq == last_seq:
                            return last_reply        # a replay: the same answer, no second state change
                        if request.seq < last_seq:
                            raise ProtocolError("stale request #%d from rank %d (last was #%d)"
                                                % (request.seq, rank, last_seq))
                    elif rank in self.slots and rank not in self.left:
                        raise ProtocolError("rank %d is live in another incarnation" % rank)
            handler = self._handlers.get(kind)
            if handler is None:
                handler = self._handlers[kind] = getattr(self, "_on_" + kind)
            reply = handler(request, now)
            if replayable:
                self.sessions[rank] = (request.incarnation, request.seq, reply)
            if kind == _REGISTER:
                self.owners[rank] = sender
            if rank in self.slots:
                self.last_seen[rank] = now
                if rank in self.present:
                    self._seen.set(rank, now)
            return reply
        except (KeyError, ValueError, ProtocolError) as exc:
            if request.TYPE == m.Heartbeat.TYPE:
                return None  # heartbeats are never answered, not even with an error
            LOG.warning("refused %s from rank %s: %s", request.TYPE, request.rank, exc)
            return m.Reply(seq=request.seq, ok=False, error=str(exc).strip('"'),
                           code="not_registered" if isinstance(exc, NotRegistered) else "")

    def _registered(self, rank):
        if rank not in self.slots:
            raise NotRegistered("rank %d has not registered" % rank)
        return self.table.record(rank)

    def _on_register(self, req, now):
        self.table.record(req.rank)  # range check
        if req.signature:
            if self.signature is None:
                self.signature = (req.signature, req.rank)
            elif req.signature != self.signature[0]:
                raise ProtocolError("the model of rank %d (slot %d) differs from rank %d's in parameter shapes "
                                    "or dtypes" % (req.rank, req.slot, self.signature[1]))
        known = self.slots.get(req.rank)
        if known is not None and known != req.slot:
            raise ProtocolError("rank %d is already registered for slot %d" % (req.rank, known))
        self.slots[req.rank] = req.slot
        self.left.discard(req.rank)
        self.present.add(req.rank)
        self.table.set_present(req.rank, True)
        self._live_clocks.set(req.rank, self.clocks.setdefault(req.rank, 0))
        record = self.table.record(req.rank)
        if req.round > record.round:  # a worker resuming with a restarted State Server
            self.table.reset(req.rank, req.round, now)
        if req.rank in self.rendezvous.gone:
            # A worker back after it left or died (a restarted process): it takes part from the
            # next round boundary (mxhet.control.membership), and says so with the reply's round.
            self.table.reset(req.rank, self.rendezvous.join(req.rank), now)
        LOG.info("rank %d (slot %d) registered", req.rank, req.slot)
        return m.Reply(seq=req.seq, round=self.table.record(req.rank).round)

    def _on_query(self, req, now):
        rank, round_ = req.rank, req.round
        record = self._registered(rank)
        if round_ != record.round:
            raise ProtocolError("query for round %d, rank %d is in round %d" % (round_, rank, record.round))
        if self.stop_decisions.get(round_):
            # Protocol v2: workers send RESET without waiting for its answer, so
            # the job's decision to stop after the round just aggregated comes
            # back with the first query of the next one (never READY: no worker
            # pushes again, every worker stops after the same round).
            return m.Reply(seq=req.seq, round=round_, stop=True)
        table = self.table
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
        return m.query_reply(req.seq, ready, round_, slowest)

    def _on_reset(self, req, now):
        self._registered(req.rank)
        self.table.reset(req.rank, req.round, now - req.since_finish)
        stop = self.stop_decisions.setdefault(req.round, req.want_stop)
        return m.Reply(seq=req.seq, round=req.round, stop=stop)

    def _on_bye(self, req, now):
        self._registered(req.rank)
        self.left.add(req.rank)
        self.present.discard(req.rank)
        self.table.set_present(req.rank, False)
        self._seen.discard(req.rank)
        self._live_clocks.discard(req.rank)
        self._release_clocks()
        if getattr(self, "transfers", None) is not None:
            self._release_transfers(self.transfers.leave(req.rank))
        if getattr(self, "preduce", None) is not None:
            self._reduce_groups(self.preduce.leave(req.rank))
            self._reduce_stopped(self.preduce.check_stop())
        retired = False
        if getattr(self, "gcada", None) is not None:
            retired = self.gcada.leave(req.rank)
            self._group_reply(self.gcada, None)
        self._release_rounds(self.rendezvous.depart(req.rank, "bye"))
        # G-CADA: ready says the sender's group has no member left (its last gradient is to be zeroed)
        return m.Reply(seq=req.seq, ready=retired)

    def _on_heartbeat(self, req, now):
        self._registered(req.rank)
        return None  # no answer: the heartbeat only refreshes last_seen

    def silent(self, now, timeout):
        """Registered ranks still in the job that sent nothing for ``timeout`` seconds.

        O(1) amortized while none is silent (only the oldest is looked at).
        """
        oldest = self._seen.peek()
        if oldest is None or not now - oldest[0] > timeout:
            return []
        return sorted(r for r, t in self.last_seen.items() if r not in self.left and now - t > timeout)

    # -- SSP -------------------------------------------------------------------
    def _ssp_allows(self, rank):
        return self._ssp_allows_clock(self.clocks[rank])

    def _ssp_allows_clock(self, clock):
        slowest = self._live_clocks.peek()   # the minimum clock of the ranks still in the job
        return slowest is None or clock - slowest[0] <= self.staleness

    def _on_clock(self, req, now):
        self._registered(req.rank)
        if req.clock < self.clocks.get(req.rank, 0):
            raise ProtocolError("rank %d clock went back from %d to %d"
                                % (req.rank, self.clocks[req.rank], req.clock))
        self.clocks[req.rank] = req.clock
        if req.rank in self.present:
            self._live_clocks.set(req.rank, req.clock)
        self.waiting.pop(req.rank, None)
        self._deferred.discard(req.rank)
        self._release_clocks()
        if self._ssp_allows(req.rank):
            return m.Reply(seq=req.seq)
        self.waiting[req.rank] = req.seq
        self._arrivals += 1
        self._deferred.set(req.rank, (req.clock, self._arrivals))
        return None

    def _release_clocks(self):
        """Release the deferred requests now allowed, in the order they arrived.

        The deferred are ordered by clock, so only those released (plus one)
        are looked at: O(k log N) for k released.
        """
        due = []
        while True:
            top = self._deferred.peek()
            if top is None or not self._ssp_allows_clock(top[0][0]):
                break
            self._deferred.pop()
            due.append((top[0][1], top[1]))
        for _, rank in sorted(due):
            self.released.append((rank, m.Reply(seq=self.waiting.pop(rank))))

    def take_released(self):
        """Deferred replies that are now due, as ``(rank, Reply)``."""
        released, self.released = self.released, []
        return released

    # -- G-CADA (mxhet.control.gcada) ---------------------------------------------
    def _groups(self, req):
        self._registered(req.rank)
        coordinator = getattr(self, "gcada", None)
        if coordinator is None:
            if req.TYPE != m.GroupBegin.TYPE:
                raise ProtocolError("G-CADA %s before any group_begin" % req.TYPE)
            coordinator = self.gcada = GroupCoordinator(self.num_workers, req.groups, req.max_delay, req.c)
        if req.TYPE == m.GroupBegin.TYPE:
            coordinator.check(req.groups, req.max_delay, req.c)
        if req.group >= coordinator.rule.groups:
            raise ProtocolError("group %d of rank %d: the job has %d groups"
                                % (req.group, req.rank, coordinator.rule.groups))
        if req.TYPE == m.GroupBegin.TYPE:
            coordinator.smoothness(req.rank, req.group, req.smoothness)
        return coordinator

    def _group_reply(self, coordinator, reply):
        self.released.extend(coordinator.released)
        coordinator.released = []
        return reply

    def _on_group_begin(self, req, now):
        c = self._groups(req)
        return self._group_reply(c, c.begin(req.rank, req.seq, req.iteration, req.group, req.want_stop))

    def _on_group_watch(self, req, now):
        c = self._groups(req)
        return self._group_reply(c, c.watch(req.rank, req.seq, req.iteration, req.group))

    def _on_group_done(self, req, now):
        c = self._groups(req)
        return self._group_reply(c, c.done(req.rank, req.seq, req.iteration, req.group))

    def _on_group_uploaded(self, req, now):
        c = self._groups(req)
        return self._group_reply(c, c.uploaded(req.rank, req.seq, req.iteration, req.group))

    def _on_group_stepped(self, req, now):
        c = self._groups(req)
        return self._group_reply(c, c.stepped(req.rank, req.seq, req.iteration, req.delta_sq, req.group_sq, now))

    # -- Partial Reduce (mxhet.control.preduce) --------------------------------
    def _on_reduce_join(self, req, now):
        self._registered(req.rank)
        settings = (req.group_size, req.dynamic, float(req.alpha), req.avoid_frozen, req.window)
        if getattr(self, "preduce", None) is None:
            self.preduce = PartialReduceController(self.num_workers, req.group_size, dynamic=req.dynamic,
                                                   alpha=req.alpha, avoid_frozen=req.avoid_frozen,
                                                   window=req.window)
            self._reduce_settings, self._reduce_waiting = settings, {}
        elif settings != self._reduce_settings:
            raise ProtocolError("rank %d joins Partial Reduce with %s, the job has %s"
                                % (req.rank, settings, self._reduce_settings))
        return m.Reply(seq=req.seq)

    def _reduce(self, req):
        self._registered(req.rank)
        if getattr(self, "preduce", None) is None:
            raise ProtocolError("%s from rank %d before any reduce_join" % (req.TYPE, req.rank))
        return self.preduce

    def _reduce_groups(self, groups, rank=None, seq=None):
        """Answer the members of newly formed groups; returns ``rank``'s own answer, if it is in one."""
        own = None
        for g in groups:
            for member, weight in zip(g.members, g.weights):
                reply = m.Reply(seq=seq if member == rank else self._reduce_waiting.pop(member), round=g.id,
                                group_slot=g.slot, weight=min(1.0, max(0.0, weight)), k=g.k,
                                target=g.fill_of(member))
                if member == rank:
                    own = reply
                else:
                    self.released.append((member, reply))
        return own

    def _reduce_stopped(self, ranks, rank=None, seq=None):
        """Answer the waiting ``ranks`` with stop; returns ``rank``'s own answer if it is one of them."""
        own = None
        for r in ranks:
            reply = m.Reply(seq=seq if r == rank else self._reduce_waiting.pop(r), stop=True)
            if r == rank:
                own = reply
            else:
                self.released.append((r, reply))
        return own

    def _on_reduce_ready(self, req, now):
        # A stop wish ends the job once every live worker has been in a group
        # (none leaves without having contributed); groups already formed
        # finish their reduce, every later READY is answered with stop.
        ctl = self._reduce(req)
        if ctl.stopping:
            ctl.pulled(req.rank)
            return m.Reply(seq=req.seq, stop=True)
        if req.want_stop:
            self._reduce_stopped(ctl.want_stop())   # stops now if everyone has been in a group
            if ctl.stopping:
                ctl.pulled(req.rank)
                return m.Reply(seq=req.seq, stop=True)
        own = self._reduce_groups(ctl.ready(req.rank, req.k), req.rank, req.seq)
        if own is None:
            self._reduce_waiting[req.rank] = req.seq
        stopped = self._reduce_stopped(ctl.check_stop(), req.rank, req.seq)
        if stopped is not None:
            self._reduce_waiting.pop(req.rank, None)
            ctl.pulled(req.rank)
        return own or stopped

    def _on_reduce_pushed(self, req, now):
        ctl = self._reduce(req)
        members = ctl.push_done(req.rank, req.group)
        if not members:
            self._reduce_waiting[req.rank] = req.seq
            return None
        for member in members:
            if member != req.rank:
                self.released.append((member, m.Reply(seq=self._reduce_waiting.pop(member), round=req.group)))
        return m.Reply(seq=req.seq, round=req.group)

    # -- the round rendezvous (mxhet.control.membership) --------------------------
    def _on_round_enter(self, req, now):
        self._registered(req.rank)
        record = self.table.record(req.rank)
        if record.round == req.round:
            # A worker enters a round's rendezvous only once Algorithm 2 told it READY. A State Server
            # restarted while it waited there never did: unmarked, its fresh record (no capability: the
            # slowest) would keep the device the round waits for NOT-READY for ever.
            record.ready = True
        return self._release_rounds(self.rendezvous.enter(req.rank, req.round, req.seq, req.want_stop, req.counts),
                                    req.rank)

    def _on_round_done(self, req, now):
        self._registered(req.rank)
        return self._release_rounds(self.rendezvous.done(req.rank, req.round, req.seq), req.rank)

    def _on_round_finish(self, req, now):
        self._registered(req.rank)
        # No longer a device Algorithm 2 waits for: ESync's slowest is looked for among those still training.
        self.table.set_present(req.rank, False)
        return self._release_rounds(self.rendezvous.finish(req.rank, req.seq), req.rank)

    def _release_rounds(self, releases, rank=None):
        """Turn the rendezvous' releases into replies; returns ``rank``'s own (None: it waits)."""
        own = None
        for r, seq, answer in releases:
            if isinstance(answer, Entered):
                reply = m.Reply(seq=seq, round=answer.round, target=answer.members, stop=answer.ballots > 0,
                                k=answer.ballots, counts=answer.counts)
            elif isinstance(answer, Done):
                reply = m.Reply(seq=seq, round=answer.round, ready=answer.complete)
            elif isinstance(answer, Finished):
                reply = m.Reply(seq=seq, ready=True)
            elif isinstance(answer, TooFewWorkers):
                reply = m.Reply(seq=seq, ok=False, error=answer.message, code="too_few_workers")
            else:
                raise TypeError("unknown rendezvous answer %r" % (answer,))
            if r == rank:
                own = reply
            else:
                self.released.append((r, reply))
        return own

    def depart(self, rank, cause):
        """``rank`` is gone without a goodbye (``cause``, e.g. "died: silent for 5 s"):
        the rounds, the SSP gate and the goodbye bookkeeping go on without it."""
        if rank in self.left or rank not in self.slots:
            return
        LOG.warning("rank %d (slot %s) %s; the job goes on without it", rank, self.slots.get(rank), cause)
        self.left.add(rank)
        self.present.discard(rank)
        self.table.set_present(rank, False)
        self._seen.discard(rank)
        self._live_clocks.discard(rank)
        self._release_clocks()
        self._release_rounds(self.rendezvous.depart(rank, cause))

    # -- ADSP ------------------------------------------------------------------
    def _on_commit(self, req, now):
        self._registered(req.rank)
        if self.adsp is None:  # the first check period starts with the first report
            self.adsp = adsp.ADSPScheduler(range(self.num_workers), now=now, **self._adsp_args)
        target, left = self.adsp.report(req.rank, req.commits, req.loss, req.commit_cost, now)
        return m.Reply(seq=req.seq, target=target, period_left=max(0.0, left))

    def _on_adsp_record(self, req, now):
        """A page of the commit-rate search's record (JSON text, ``null`` before any commit report);
        the text is taken anew whenever page 0 is asked for."""
        self._registered(req.rank)
        if req.start == 0 or getattr(self, "_adsp_text", None) is None:
            record = self.adsp.search_record() if self.adsp is not None else None
            self._adsp_text = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
        text = self._adsp_text
        return m.Reply(seq=req.seq, payload=text[req.start:req.start + m.RECORD_PAGE], k=len(text))

    # -- nodelay (mxhet.control.nodelay) ------------------------------------------
    def _transfer_rule(self):
        if getattr(self, "transfers", None) is None:
            self.transfers = TransferRule(set(range(self.num_workers)) - self.left)
        return self.transfers

    def _on_notify(self, req, now):
        self._registered(req.rank)
        return self._release_transfers(self._transfer_rule().notify(req.rank, req.round, req.want_stop, req.seq),
                                       req.rank)

    def _on_merged(self, req, now):
        self._registered(req.rank)
        self._release_transfers(self._transfer_rule().merged(req.rank, req.round))
        return m.Reply(seq=req.seq, round=req.round)

    def _release_transfers(self, request, rank=None):
        """Answer every announcement of a due transfer request; returns ``rank``'s own answer (None if not due)."""
        own = None
        for r, seq in (request.tokens.items() if request is not None else ()):
            answer = m.Reply(seq=seq, ready=True, round=request.round, stop=request.stop)
            if r == rank:
                own = answer
            else:
                self.released.append((r, answer))
        return own

    def stats(self):
        """ESync per round: which rank was slowest, each rank's n_i; SSP clocks; ADSP checkpoints."""
        return {
            "epsilon": self.table.epsilon,
            "ssp_clocks": {str(r): c for r, c in sorted(self.clocks.items())},
            "gcada": self.gcada.stats() if getattr(self, "gcada", None) is not None else None,
            "adsp": self.adsp.stats() if self.adsp is not None else None,
            "preduce": self.preduce.stats() if getattr(self, "preduce", None) is not None else None,
            "membership": self.rendezvous.stats(),
            "nodelay": self.transfers.stats() if getattr(self, "transfers", None) is not None else None,
            "slots": {str(r): s for r, s in sorted(self.slots.items())},
            "rounds": [{"round": t, "slowest": info["slowest"],
                        "local_iters": {str(r): k for r, k in sorted(info["local_iters"].items())}}
                       for t, info in sorted(self.rounds.items())],
        }


_REGISTER = m.Register.TYPE
_REPLAYABLE = m.REPLAYABLE


class SilentWorker(Exception):
    """A registered worker sent nothing for longer than the heartbeat timeout."""


DEFAULT_HEARTBEAT_TIMEOUT = 30.0
"""Seconds of silence after which the State Server declares a worker hung.
Workers' I/O threads send a heartbeat every second (also while a slow device
computes), so this only trips on a stopped or hung process."""


MAX_BATCH = 512
"""Requests handled in one turn of the loop at most, before the replies go out
and ``should_stop`` and the heartbeats are checked again."""


def handle_frames(service, frames, now, identities):
    """Decode one received message, let ``service`` answer it, encode the reply.

    ``identities`` (rank -> ZeroMQ identity of its latest accepted request) is
    updated. Returns the reply bytes, or None when there is nothing to send.
    A bad message is logged and answered with an error reply (or dropped);
    nothing raises.
    """
    if len(frames) != 2:
        LOG.warning("dropped a message of %d frames (expected identity + body)", len(frames))
        return None
    identity, body = frames
    try:
        request = m.decode(body, m.REQUEST_TYPES)
    except ProtocolError as exc:
        LOG.warning("bad request: %s", exc)
        return m.encode(m.Reply(seq=0, ok=False, error=str(exc)))
    except Exception:  # noqa: BLE001  (a bug must not take the control plane down)
        LOG.exception("unexpected error decoding a request; dropped")
        return None
    try:
        reply = service.handle(request, now, sender=identity)
    except Exception:  # noqa: BLE001
        LOG.exception("unexpected error handling %s from rank %d", request.TYPE, request.rank)
        reply = m.Reply(seq=request.seq, ok=False, error="internal error")
    if reply is None or reply.ok:
        identities[request.rank] = identity
    return None if reply is None else m.encode(reply)


def serve(bind, num_workers, epsilon=DEFAULT_EPSILON, should_stop=lambda: False,
          clock=time.monotonic, poll_interval=0.2, context=None, on_bound=None,
          heartbeat_timeout=DEFAULT_HEARTBEAT_TIMEOUT, keys="", max_batch=MAX_BATCH, elastic=False, **options):
    """Run the State Server on ``bind`` until ``should_stop()`` or every worker left.

    Each turn of the loop takes every request already waiting (up to
    ``max_batch``) without polling in between, answers them in order with
    the clock read at each one's receipt, then sends the replies.

    Args:
        bind: ZeroMQ address to bind, e.g. ``tcp://127.0.0.1:5555``.
        num_workers: number of workers.
        epsilon: Algorithm 2's ε in seconds.
        should_stop: checked every turn, at least every ``poll_interval`` seconds.
        clock: monotonic clock in seconds; every decision uses its readings.
        poll_interval: seconds to wait for a request before checking
            ``should_stop`` and the heartbeats again.
        context: a ``zmq.Context`` (default: the process-wide instance).
        on_bound: called with the bound endpoint once the socket listens.
        heartbeat_timeout: seconds of silence after which a registered worker
            counts as hung (0 = never).
        keys: the job's CURVE key directory (:mod:`mxhet.control.auth`): only
            clients holding the job's client key get through; "" for none.
        max_batch: requests handled per turn at most (>= 1).
        elastic: a silent worker is dropped from the job (the rounds go on
            without it, :meth:`StateService.depart`) instead of ending the
            State Server with :class:`SilentWorker`.
        options: more :class:`StateService` arguments (SSP, ADSP).

    Returns:
        The :class:`StateService`, for its statistics.

    Raises:
        SilentWorker: naming the rank and slot of a worker silent for longer
            than ``heartbeat_timeout``.
        ValueError: for a bad ``max_batch`` (or a bad service argument).
    """
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError("max_batch must be a positive integer, got %r" % (max_batch,))
    service = StateService(num_workers, epsilon=epsilon, now=clock(), **options)
    identities = {}  # rank -> ZeroMQ identity of its latest request
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, m.MAX_MESSAGE_BYTES)
    authenticator = None
    if keys:
        from .auth import secure_server
        authenticator = secure_server(sock, keys, ctx)
    sock.bind(bind)
    if on_bound is not None:
        on_bound(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    LOG.info("State Server listening on %s for %d workers (epsilon %.3f s, %s)",
             sock.getsockopt_string(zmq.LAST_ENDPOINT), num_workers, epsilon,
             "CURVE-authenticated" if keys else "unauthenticated")
    # The first request of a turn is a receive that waits up to poll_interval (no zmq_poll call
    # before it: that costs as much as the receive); the rest of the turn takes what is already waiting.
    sock.setsockopt(zmq.RCVTIMEO, int(poll_interval * 1000))
    # Plain recv/send calls: recv_multipart and send_multipart cost three times as much in pyzmq.
    recv, send, getsockopt = sock.recv, sock.send, sock.getsockopt
    again, nonblocking, more, rcvmore = zmq.Again, zmq.NOBLOCK, zmq.SNDMORE, zmq.RCVMORE
    try:
        while not should_stop() and not service.finished:
            if heartbeat_timeout:
                silent = service.silent(clock(), heartbeat_timeout)
                if silent and elastic:
                    for rank in silent:
                        service.depart(rank, "died (silent for over %g s)" % heartbeat_timeout)
                    for rank, late in service.take_released():
                        send(identities[rank], more)
                        send(m.encode(late))
                    continue
                if silent:
                    raise SilentWorker("worker rank %d (slot %s) sent nothing for over %.0f s: its process is "
                                       "hung or stopped" % (silent[0], service.slots.get(silent[0]),
                                                             heartbeat_timeout))
            try:
                identity = recv()
            except again:
                continue
            out = []
            for _ in range(max_batch):
                frames = [identity, recv()]    # a ROUTER delivers every frame of a message at once
                while getsockopt(rcvmore):
                    frames.append(recv())
                data = handle_frames(service, frames, clock(), identities)
                if data is not None:
                    out.append((identity, data))
                if service.released:
                    out.extend((identities[rank], m.encode(late)) for rank, late in service.take_released())
                if service.finished:
                    break
                try:
                    identity = recv(nonblocking)
                except again:
                    break
            for identity, data in out:
                send(identity, more)
                send(data)
    finally:
        sock.close(0)
        if authenticator is not None:
            authenticator.stop()
    return service


def write_stats(service, path):
    """Write the service's statistics as JSON (atomically)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(service.stats(), f, indent=1)
    os.replace(tmp, path)
