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
from . import rules as rules_mod
from .state_rule import DEFAULT_EPSILON, LazyHeap, StateTable

LOG = logging.getLogger("mxhet.state_server")


class StateService:
    """The control plane's state and request handling.

    The service keeps what every job shares: registration, sessions and
    replays, rank ownership, goodbyes, heartbeats and Algorithm 2's table of
    records. Every mode's decisions are rule plugins (:mod:`.rules`): ESync's
    QUERY-STATE / RESET, SSP's staleness gate, ADSP's commit targets, nodelay,
    Partial Reduce, G-CADA and the round membership. A request of a kind no
    loaded plugin handles is refused.

    Args:
        num_workers: number of workers; their PS-LITE ranks are 0..n-1.
        epsilon: Algorithm 2's ε in seconds.
        staleness: SSP's bound s: a worker may be at most s iterations ahead
            of the slowest worker still in the job.
        adsp_period, adsp_epoch, adsp_window: ADSP's check period Γ (s),
            search epoch (s) and check periods per evaluated commit rate.
        now: the clock reading at creation.
        min_workers: the fewest members a synchronous round may go on with.
        rules: the names of the rule plugins to load (:data:`.rules.ALL_RULES`
            by default; a mode's spec names its own in ``state_rules``).
        round_deadline: ESync's ``--round-deadline`` D (0: off, Algorithm 2
            as in the paper; see :mod:`mxhet.policy.deadline`).
        round_length: ESync's ``--round-length`` L (0: off; needs
            ``round_deadline``): a round lasts about L fast iterations.
        late_memory: ESync's ``--late-memory`` (needs ``round_deadline``): a
            late device's latest delta is added again to the rounds it misses.
        wait_needed: ESync's ``--wait-needed`` R (0: off; needs
            ``round_deadline``): the rounds also wait for a device whose loss
            on the global model is above R x the lowest (:mod:`mxhet.policy.needed`).

    Raises:
        ValueError: for a bad argument or an unknown rule name.
    """

    def __init__(self, num_workers, epsilon=DEFAULT_EPSILON, staleness=2, adsp_period=adsp.DEFAULT_PERIOD,
                 adsp_epoch=adsp.DEFAULT_EPOCH, adsp_window=adsp.DEFAULT_WINDOW_PERIODS, now=0.0, min_workers=1,
                 rules=rules_mod.ALL_RULES, round_deadline=0.0, round_length=0.0, late_memory=False,
                 wait_needed=0.0):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("num_workers must be a positive integer, got %r" % (num_workers,))
        if not isinstance(staleness, int) or staleness < 0:
            raise ValueError("staleness must be an integer >= 0, got %r" % (staleness,))
        unknown = [r for r in rules if r not in rules_mod.PLUGINS]
        if isinstance(rules, str) or unknown:
            raise ValueError("unknown State Server rule(s) %r; known: %s"
                             % (rules if isinstance(rules, str) else unknown, ", ".join(rules_mod.ALL_RULES)))
        self.num_workers = num_workers
        self.staleness = staleness
        self.table = StateTable(range(num_workers), epsilon=epsilon, now=now)
        self.released = []       # (rank, Reply) deferred replies now due
        self.slots = {}          # rank -> launcher slot
        self.owners = {}         # rank -> sender (connection) that registered it
        self.last_seen = {}      # rank -> server clock of its latest message
        self._seen = LazyHeap()  # present rank -> last_seen (the oldest first)
        self.sessions = {}       # rank -> (incarnation, last seq, last reply) for replays
        self.signature = None    # (model signature, rank that set it)
        self.left = set()        # ranks that said bye
        self.present = set()     # registered ranks that have not said bye
        self._live_by_slot = {}  # slot -> present ranks registered for it (one at most, see _on_register)
        options = {"ssp": dict(staleness=staleness), "membership": dict(min_workers=min_workers),
                   "preduce": dict(min_workers=min_workers),
                   "nodelay": dict(min_workers=min_workers),
                   "gcada": dict(min_workers=min_workers),
                   "esync": dict(round_deadline=round_deadline, round_length=round_length, late_memory=late_memory,
                                 wait_needed=wait_needed),
                   "adsp": dict(period=adsp_period, epoch=adsp_epoch, window_periods=adsp_window)}
        # loaded in the registry's order whatever order ``rules`` names them in: a goodbye reaches them in that order
        self.plugins = [cls(self, **options.get(name, {})) for name, cls in rules_mod.PLUGINS.items()
                        if name in set(rules)]
        self.rules = {p.NAME: p for p in self.plugins}
        self._handlers = {_REGISTER: self._on_register, m.Bye.TYPE: self._on_bye,
                          m.Heartbeat.TYPE: self._on_heartbeat}
        for plugin in self.plugins:
            for kind in plugin.KINDS:
                if kind in self._handlers:
                    raise ValueError("request kind %r is handled twice (rule %r)" % (kind, plugin.NAME))
                self._handlers[kind] = plugin.handle

    def rule(self, name):
        """The loaded rule plugin called ``name`` (:data:`.rules.PLUGINS`), or None if this job has none."""
        return self.rules.get(name)

    # what callers read of the rules (the simulator's ADSP report, tests)
    @property
    def adsp(self):
        """ADSP's scheduler, once the first commit report arrived (None before, or without the rule)."""
        rule = self.rules.get("adsp")
        return rule.scheduler if rule is not None else None

    @property
    def clocks(self):
        """SSP: rank -> iterations done (empty without the rule)."""
        rule = self.rules.get("ssp")
        return rule.clocks if rule is not None else {}

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
            handler = self._handlers.get(kind)
            if handler is None:
                raise ProtocolError("no State Server rule of this job handles %r requests (rules loaded: %s)"
                                    % (kind, ", ".join(self.rules) or "none"))
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

    def registered(self, rank):
        """``rank``'s Algorithm 2 record; NotRegistered if it has not registered."""
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
        if known is not None and known != req.slot and req.rank not in self.left:
            raise ProtocolError("rank %d is already registered for slot %d" % (req.rank, known))
        # Two workers dead at once and started again: PS-LITE's recovery gives each replacement the
        # first dead id it finds (van.cc UpdateLocalID), so the two may swap ranks. A rank that left may
        # come back for another slot; a slot is never held by two live ranks.
        holder = self._slot_holder(req.slot, req.rank)
        if holder is not None:
            raise ProtocolError("slot %d is already held by live rank %d (rank %d registers for it)"
                                % (req.slot, holder, req.rank))
        if known is not None:
            self._unhold(known, req.rank)
        self.slots[req.rank] = req.slot
        self._live_by_slot.setdefault(req.slot, set()).add(req.rank)
        self.left.discard(req.rank)
        self.present.add(req.rank)
        self.table.set_present(req.rank, True)
        for plugin in self.plugins:
            plugin.registered(req.rank)
        record = self.table.record(req.rank)
        if req.round > record.round:  # a worker resuming with a restarted State Server
            self.table.reset(req.rank, req.round, now)
        members = self.rule("membership")
        back = (members.rejoin(req.rank, not_before=self.table.record(req.rank).round)
                if members is not None else None)
        if back == rules_mod.JOB_OVER:
            # A restarted worker that came after the job's end: it takes part in nothing and leaves.
            self.table.set_present(req.rank, False)
            LOG.info("rank %d (slot %d) registered after the job's end", req.rank, req.slot)
            return m.Registered(seq=req.seq, round=self.table.record(req.rank).round, over=True)
        groups = self.rule("gcada")
        if back is not None and groups is not None:
            # G-CADA takes it back into its slot's group; the rendezvous holds no rounds there (none named)
            groups.rejoin(req.rank, req.slot)
        transfers = self.rule("nodelay")
        if back is not None and transfers is not None:
            # nodelay counts its own rounds (transfers): the one named is the next transfer requested.
            back = transfers.rejoin(req.rank)
        if back is not None:
            # A worker back after it left or died (a restarted process): it takes part from the
            # next round boundary (mxhet.control.membership), and says so with the reply's round.
            self.table.reset(req.rank, back, now)
        LOG.info("rank %d (slot %d) registered", req.rank, req.slot)
        return m.Registered(seq=req.seq, round=self.table.record(req.rank).round, rejoined=back is not None)

    def _slot_holder(self, slot, rank):
        """A rank other than ``rank`` registered for ``slot`` and still in the job, or None (O(1))."""
        return next((r for r in self._live_by_slot.get(slot, ()) if r != rank), None)

    def _unhold(self, slot, rank):
        holders = self._live_by_slot.get(slot)
        if holders is not None:
            holders.discard(rank)
            if not holders:
                del self._live_by_slot[slot]

    def _leave(self, rank):
        self._unhold(self.slots[rank], rank)
        self.left.add(rank)
        self.present.discard(rank)
        self.table.set_present(rank, False)
        self._seen.discard(rank)

    def _on_bye(self, req, now):
        self.registered(req.rank)
        self._leave(req.rank)
        retired = False
        for plugin in self.plugins:
            retired = plugin.bye(req.rank) or retired
        # G-CADA: retired says the sender's group has no member left (its last gradient is to be zeroed)
        return m.ByeReply(seq=req.seq, retired=retired)

    def _on_heartbeat(self, req, now):
        self.registered(req.rank)
        return None  # no answer: the heartbeat only refreshes last_seen

    def silent(self, now, timeout):
        """Registered ranks still in the job that sent nothing for ``timeout`` seconds.

        O(1) amortized while none is silent (only the oldest is looked at).
        """
        oldest = self._seen.peek()
        if oldest is None or not now - oldest[0] > timeout:
            return []
        return sorted(r for r, t in self.last_seen.items() if r not in self.left and now - t > timeout)

    def take_released(self):
        """Deferred replies that are now due, as ``(rank, Reply)``."""
        released, self.released = self.released, []
        return released

    def depart(self, rank, cause):
        """``rank`` is gone without a goodbye (``cause``, e.g. "died: silent for 5 s"):
        the rounds, the SSP gate and the goodbye bookkeeping go on without it."""
        if rank in self.left or rank not in self.slots:
            return
        LOG.warning("rank %d (slot %s) %s; the job goes on without it", rank, self.slots.get(rank), cause)
        self._leave(rank)
        for plugin in self.plugins:
            plugin.depart(rank, cause)

    def stats(self):
        """ESync per round: which rank was slowest, each rank's n_i; SSP clocks; each rule's own record."""
        stats = {"epsilon": self.table.epsilon, "slots": {str(r): s for r, s in sorted(self.slots.items())}}
        for name, cls in rules_mod.PLUGINS.items():   # every rule's key, null (or empty) when not loaded
            rule = self.rules.get(name)
            stats[cls.STATS_KEY or name] = rule.stats() if rule is not None else cls.empty_stats()
        return stats


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
          heartbeat_timeout=DEFAULT_HEARTBEAT_TIMEOUT, keys="", max_batch=MAX_BATCH, elastic=False,
          until_stopped=False, **options):
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
        until_stopped: serve on after every worker left, until ``should_stop()``
            (``mxhet-launch --max-restarts``: a worker started again that comes
            after the job's end is answered, and told so, instead of waiting
            for a State Server that is gone).
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
        def all_left():
            return service.finished and not until_stopped

        while not should_stop() and not all_left():
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
                if all_left():
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
