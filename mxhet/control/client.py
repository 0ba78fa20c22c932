"""The worker's side of the State Server protocol.

Two ways to ask QUERY-STATE:

* blocking (:meth:`StateClient.query`): send and wait for the answer, as in the
  paper's Algorithm 1;
* delayed ACK (:meth:`StateClient.send_query`, then :meth:`StateClient.poll`):
  send and keep training; answers are picked up later without waiting, and
  no answer yet means NOT-READY (the paper's §4.2).

RESET goes out without waiting either (:meth:`StateClient.send_reset`,
protocol v2): its answer is taken whenever replies are read, and the job's
decision to stop after a round also comes back with the first query of the
next round; :attr:`StateClient.stop_decided` says when it came.

Messages go through a :class:`~mxhet.control.transport.Transport` (a
background I/O thread), so waiting is always bounded by a timeout, and
replies are matched by sequence number. The client measures the round-trip
time of every answered query (``rtt``, a :class:`~mxhet.policy.speed.MovingAverage`).
:meth:`StateClient.poll` never waits longer than its own timeout, not even to
register again with a restarted State Server: it sends the registration and
picks up the answer later.
"""
import dataclasses
import json
import random
import time

from ..errors import ProtocolError, StateServerTimeout
from ..policy.specs import DEFAULT_STATE_TIMEOUT
from ..policy.speed import MovingAverage
from . import messages as m
from .transport import Transport

DEFAULT_TIMEOUT = DEFAULT_STATE_TIMEOUT
"""Seconds to wait for a State Server reply, resends included, before giving up."""
RETRY_INTERVAL = 0.5
"""Seconds before a request is sent again; doubled after each silent attempt."""
MAX_RETRY_INTERVAL = 8.0
HEARTBEAT_INTERVAL = 1.0
"""Seconds of silence after which the worker's I/O thread sends a heartbeat."""


class StateClient:
    """Talks to the State Server for one worker.

    Args:
        address: ZeroMQ address of the State Server.
        rank: this worker's PS-LITE rank.
        slot: this worker's launcher slot.
        timeout: seconds to wait for a reply to a blocking request (> 0).
        delay: emulated one-way network delay, seconds.
        clock: monotonic clock in seconds.
        transport: a transport object (default: a :class:`Transport` to ``address``).
        keys: the job's CURVE key directory, or "" for none.

    Raises:
        ValueError: for a bad timeout or address.
        TransportError: the default transport's I/O thread did not start.
    """

    def __init__(self, address, rank, slot, timeout=DEFAULT_TIMEOUT, delay=0.0, clock=time.monotonic,
                 transport=None, keys=""):
        if not address and transport is None:
            raise ValueError("no State Server address (MXHET_STATE_SERVER is empty): "
                             "start the job with mxhet-launch, which starts the State Server")
        if not timeout > 0:
            raise ValueError("timeout must be > 0 seconds, got %r" % (timeout,))
        self.address, self.rank, self.slot, self.timeout = address, rank, slot, float(timeout)
        self._clock = clock
        self._seq = 0
        self.incarnation = random.SystemRandom().getrandbits(52)
        self._round = 0          # latest round this worker spoke of (to resume after a restart)
        self._signature = ""
        self.reregistrations = 0
        self.job_over = False    # registered after the job's end (a restarted worker too late; Registered.over)
        self.rejoined = False    # registered as a rank the job takes back (a restarted worker; Registered.rejoined)
        self._register_seq = 0        # seq of the latest Register sent
        self._register_replies = set()  # seqs of Registers sent by poll(), whose replies poll() takes
        self._resets = set()    # seqs of RESETs sent without waiting, not answered yet
        self.stop_decided = False  # an answer said: the job stops after the round just aggregated
        self._sent_at = {}
        self._pending = []   # replies to queries, received while waiting for something else
        self._transport = transport if transport is not None else Transport(address, delay=delay, clock=clock,
                                                                            keys=keys)
        self._rtt = MovingAverage()
        self.queries = 0
        self.max_in_flight = 0   # most requests sent and not yet answered at once (1: it always waited)
        self.replies = 0

    @property
    def rtt(self):
        """Smoothed round-trip time of answered requests, seconds (0 before the first)."""
        return self._rtt.get()

    def _send(self, message):
        data = m.encode(message)
        if message.TYPE == m.Register.TYPE:
            self._register_seq = message.seq
        self._sent_at[message.seq] = self._clock()
        self.max_in_flight = max(self.max_in_flight, len(self._sent_at) - len(self._resets))
        self._transport.send(data)

    def _decode(self, received):
        arrived, raw = received
        reply = m.decode(raw, m.REPLY_TYPES)
        sent = self._sent_at.pop(reply.seq, None)
        if sent is not None:
            sample = arrived - sent
            self._rtt.update(sample)
            self.replies += 1
        # any rule's answer that carries the job's stop decides it (Reply.stop: False where a record has none)
        if reply.ok and reply.stop:
            self.stop_decided = True
        return reply

    def request(self, message, timeout=None):
        """Send ``message`` and wait for its reply, resending it with back-off.

        A resend is harmless: it carries the same incarnation and sequence
        number, so the State Server answers a replay with its first answer. A
        State Server that no longer knows this worker (it was restarted) gets a
        new registration, then the request again. Replies to earlier
        delayed-ACK queries that arrive meanwhile are kept for :meth:`poll`.

        ``timeout``: seconds in all (None: the client's ``timeout``).

        Raises:
            StateServerTimeout: no reply within the timeout.
            ProtocolError: the server refused the request (or a registration :meth:`poll`
                sent), sent garbage, or answered with another record than the request's
                ``REPLY`` (another rule's, say).
            TransportError: the transport's I/O thread failed.
        """
        limit = self.timeout if timeout is None else timeout
        deadline = self._clock() + limit
        wait, attempts = RETRY_INTERVAL, 0
        while True:
            self._send(message)
            attempts += 1
            reply = self._await_reply(message.seq, min(deadline, self._clock() + wait))
            if reply is None:  # silence: send the same request again, a little later each time
                if self._clock() >= deadline:
                    raise StateServerTimeout("no reply from the State Server at %s to %s #%d after %d attempts "
                                             "over %.1f s" % (self.address, message.TYPE, message.seq,
                                                              attempts, limit))
                wait = min(2 * wait, MAX_RETRY_INTERVAL)
                continue
            if reply.ok:
                if type(reply) is not message.REPLY:
                    raise ProtocolError("State Server answered %s #%d with a %r record, expected %r"
                                        % (message.TYPE, message.seq, reply.TYPE, message.REPLY.TYPE))
                return reply
            if reply.code == "not_registered" and message.TYPE != m.Register.TYPE and attempts < 100:
                self._register_again()
                message = dataclasses.replace(message, seq=self._next_seq())
                continue
            raise ProtocolError("State Server refused %s: %s" % (message.TYPE, reply.error))

    def _await_reply(self, seq, until):
        """The reply to request ``seq`` if it comes before ``until``; others are kept for :meth:`poll`."""
        while True:
            left = until - self._clock()
            received = self._transport.recv(left) if left > 0 else None
            if received is None:
                return None
            reply = self._decode(received)
            if reply.seq == seq:
                return reply
            if not self._took_register_reply(reply) and not self._took_reset_reply(reply):
                self._pending.append(reply)

    def _register_again(self):
        self.reregistrations += 1
        self.request(self._register_message())

    def _register_message(self):
        return self._message(m.Register, slot=self.slot, signature=self._signature, round=self._round)

    def _took_register_reply(self, reply):
        """True if ``reply`` answers a Register sent by :meth:`poll` (and is thereby handled).

        Raises:
            ProtocolError: the server refused that registration.
        """
        if reply.seq not in self._register_replies:
            return False
        self._register_replies.discard(reply.seq)
        if not reply.ok:
            raise ProtocolError("State Server refused the new registration: %s" % reply.error)
        return True

    def _took_reset_reply(self, reply):
        """True if ``reply`` answers a RESET sent by :meth:`send_reset` (and is thereby handled).

        A "not registered" answer is left to the caller (the State Server was
        restarted: the next query's answer says so too).

        Raises:
            ProtocolError: the server refused the RESET for another reason.
        """
        if reply.seq not in self._resets:
            return False
        self._resets.discard(reply.seq)
        if reply.ok or reply.code == "not_registered":
            return reply.ok
        raise ProtocolError("State Server refused RESET: %s" % reply.error)

    def _next_seq(self):
        self._seq += 1
        return self._seq

    def _message(self, cls, **fields):
        """A request of this worker's rank and incarnation with the next sequence number."""
        if "round" in fields and cls is not m.Register:
            self._round = max(self._round, fields["round"])
        return cls(rank=self.rank, seq=self._next_seq(), incarnation=self.incarnation, **fields)

    def register(self, signature="", heartbeat=HEARTBEAT_INTERVAL, round_=0):
        """Join the job with the model's ``signature`` at round ``round_`` (> 0 when
        resuming from a checkpoint); from then on the I/O
        thread sends a heartbeat every ``heartbeat`` seconds of silence (0 = none).

        Raises:
            ProtocolError: e.g. when the model differs from the other workers'.
        """
        self._signature = signature
        self._round = max(self._round, round_)
        reply = self.request(self._register_message())
        self.registered_round = reply.round   # > round_ for a worker the job takes back (a rejoin)
        self.job_over = reply.over
        self.rejoined = reply.rejoined   # the job took this rank back after it left or died
        if heartbeat and hasattr(self._transport, "set_heartbeat"):
            beat = m.Heartbeat(rank=self.rank, seq=0, incarnation=self.incarnation)
            self._transport.set_heartbeat(m.encode(beat), heartbeat)
        return reply

    def _query(self, round_, k, c, since_finish, loss):
        self.queries += 1
        return self._message(m.Query, round=round_, k=k, c=float(c), since_finish=float(since_finish),
                             loss=m.NO_LOSS if loss is None else float(loss))

    def query(self, round_, k, c, since_finish=0.0, loss=None):
        """Blocking QUERY-STATE; returns the reply (``reply.ready`` True = aggregate now). ``loss``:
        the training loss on the global model just pulled (``--wait-needed``), or None."""
        return self.request(self._query(round_, k, c, since_finish, loss))

    def send_query(self, round_, k, c, since_finish=0.0, loss=None):
        """Delayed-ACK QUERY-STATE: send and return at once."""
        self._send(self._query(round_, k, c, since_finish, loss))

    def send(self, cls, **fields):
        """Send a request of message class ``cls`` and return at once (nodelay's
        Notify and Merged); its answer comes from :meth:`poll`, whenever the State
        Server gives it. Returns the request's sequence number."""
        message = self._message(cls, **fields)
        self._send(message)
        return message.seq

    def poll(self, timeout=0.0):
        """Replies to delayed-ACK queries received so far (waiting up to ``timeout`` seconds
        for the first, never longer).

        A "not registered" answer means the State Server was restarted: poll()
        sends a new registration without waiting for it (its answer is taken
        by a later poll() or request()), and the queries after it are answered
        again. A "not registered" answer to a request sent before the latest
        registration is expected meanwhile and sends no other one.

        Raises:
            ProtocolError: the server refused a query or the new registration.
            TransportError: the transport's I/O thread failed.
        """
        received, self._pending = self._pending, []
        raw = self._transport.recv(timeout) if not received else self._transport.recv(0.0)
        while raw is not None:
            received.append(self._decode(raw))
            raw = self._transport.recv(0.0)
        replies, forgotten = [], False
        for reply in received:
            if self._took_register_reply(reply) or self._took_reset_reply(reply):
                continue
            if reply.ok:
                replies.append(reply)
            elif reply.code != "not_registered":
                raise ProtocolError("State Server refused a query: %s" % reply.error)
            elif reply.seq > self._register_seq:
                forgotten = True
        if forgotten:
            self.reregistrations += 1
            register = self._register_message()
            self._register_replies.add(register.seq)
            self._send(register)
        return replies

    def reset(self, round_, want_stop=False):
        """RESET after pulling the model of ``round_``; True means stop training now."""
        return self.request(self._message(m.Reset, round=round_, want_stop=bool(want_stop))).stop

    def send_reset(self, round_, want_stop=False, since_finish=0.0):
        """RESET without waiting: its answer is taken by a later :meth:`poll` or
        request, and the stop decision also comes with the next query's answer
        (:attr:`stop_decided`). ``since_finish``: seconds the State Server takes
        off the receipt for t_e (the round trip the worker does not wait)."""
        message = self._message(m.Reset, round=round_, want_stop=bool(want_stop),
                                since_finish=float(since_finish))
        self._resets.add(message.seq)
        self._send(message)

    def clock(self, iterations):
        """SSP: report ``iterations`` done; returns when the staleness bound allows the next."""
        self.request(self._message(m.Clock, clock=int(iterations)))

    def commit_report(self, commits, loss, commit_cost):
        """ADSP: report commits so far; returns ``(target total commits, seconds to the next checkpoint)``."""
        reply = self.request(self._message(m.Commit, commits=int(commits), loss=float(loss),
                                           commit_cost=float(commit_cost)))
        return reply.target, reply.period_left

    def paged_record(self, cls, what):
        """A rule's record (JSON, decoded), asked for with request class ``cls`` (a
        :class:`~mxhet.control.wire.RecordRequest`) page by page; ``what`` names it in errors.

        Raises:
            ProtocolError: when the pages do not add up to the announced length or to JSON.
        """
        text, total = "", None
        while total is None or len(text) < total:
            reply = self.request(self._message(cls, start=len(text)))
            if total is not None and reply.total != total or not reply.payload and len(text) < reply.total:
                raise ProtocolError("%s pages do not add up (%d of %d characters)" % (what, len(text), reply.total))
            total = reply.total
            text += reply.payload
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ProtocolError("the %s is not JSON: %s" % (what, exc)) from None

    def adsp_record(self):
        """ADSP: the commit-rate search's record, as the State Server keeps it (a dict; None before any
        commit report; :class:`~mxhet.control.adsp.AdspRecord`).

        Raises:
            ProtocolError: when the pages do not add up to the announced length or to JSON.
        """
        return self.paged_record(m.AdspRecord, "ADSP record")

    def membership_record(self):
        """The round rendezvous' record (a dict, :class:`~mxhet.control.membership.MembershipRecord`).

        Raises:
            ProtocolError: when the pages do not add up to the announced length or to JSON.
        """
        return self.paged_record(m.MembershipRecord, "membership record")

    def reduce_join(self, group_size, dynamic, alpha, avoid_frozen, window, spare_slots=0):
        """Partial Reduce: tell the controller the job's settings (the same on every worker);
        returns its :class:`~mxhet.control.preduce.JoinedReply` (``model_slot`` >= 0: a worker
        back after its death starts from that slot's model)."""
        return self.request(self._message(m.ReduceJoin, group_size=int(group_size), dynamic=bool(dynamic),
                                          alpha=float(alpha), avoid_frozen=bool(avoid_frozen), window=int(window),
                                          spare_slots=int(spare_slots)))

    def reduce_ready(self, k, want_stop=False):
        """Partial Reduce: READY at iteration ``k``; returns once in a group (``round``,
        ``group_slot``, ``weight``, ``k``, ``target``: filler pushes) or told to ``stop``."""
        return self.request(self._message(m.ReduceReady, k=int(k), want_stop=bool(want_stop)))

    def reduce_pushed(self, group):
        """Partial Reduce: this worker's push to ``group``'s slot is in; returns once every member's
        is (False), or True once the group is released (a member died before its push was in)."""
        return self.request(self._message(m.ReducePushed, group=int(group))).released

    def reduce_leave(self, final):
        """Partial Reduce under ``--elastic``: this worker trains no more (``final``: its final
        model is on the parameter keys); returns how many workers' final models are in."""
        return self.request(self._message(m.ReduceLeave, final=bool(final))).finals

    # -- the round rendezvous (mxhet.control.membership) -------------------------
    def round_enter(self, round_, want_stop=False, timeout=None):
        """Enter synchronous round ``round_``; returns once every worker still
        training has: ``(members, ballots)`` (ballots: members that want to stop).
        ``(0, 0)``, with :attr:`job_over` set, when the round comes after the job's
        agreed stop (a worker that rejoined while the last round was open).

        Raises:
            ProtocolError: also when the job fell below its minimum of live workers.
        """
        reply = self.request(self._message(m.RoundEnter, round=int(round_), want_stop=bool(want_stop)), timeout)
        self.job_over = self.job_over or reply.over
        return reply.target, reply.ballots

    def round_enter_counted(self, round_, counts, want_stop=False, timeout=None):
        """:meth:`round_enter` with this worker's count vector (ESync's delta weighting);
        returns ``(members, ballots, the members' summed counts)``; ``(0, 0, ())`` with
        :attr:`job_over` set after the job's agreed stop."""
        reply = self.request(self._message(m.RoundEnter, round=int(round_), want_stop=bool(want_stop),
                                           counts=tuple(float(c) for c in counts)), timeout)
        self.job_over = self.job_over or reply.over
        return reply.target, reply.ballots, tuple(reply.counts)

    def round_done(self, round_, timeout=None):
        """This worker's push of ``round_`` is applied; returns once every member's
        is (or the member is gone): True when every member pushed."""
        return self.request(self._message(m.RoundDone, round=int(round_)), timeout).ready

    def round_wait(self, round_, timeout=None):
        """Returns once every push of round ``round_`` is applied (this worker need not be a
        member): True when every member pushed."""
        return self.request(self._message(m.RoundWait, round=int(round_)), timeout).ready

    def round_finish(self, timeout=None):
        """This worker stopped training; returns once no worker trains any more: the rank
        that does the chief's end-of-job duties (the lowest still in the job; -1: none)."""
        return self.request(self._message(m.RoundFinish), timeout).chief

    def ask(self, cls, **fields):
        """A blocking request of message type ``cls`` (e.g. G-CADA's); returns the reply."""
        return self.request(self._message(cls, **fields))

    def send_request(self, cls, **fields):
        """Send a request of message type ``cls`` without waiting; its answer
        comes with :meth:`poll`, matched by the returned sequence number."""
        message = self._message(cls, **fields)
        self._send(message)
        return message.seq

    def bye(self):
        """Leave the job; returns the State Server's :class:`~mxhet.control.wire.ByeReply`
        (G-CADA: ``retired`` once the sender's group has no member left)."""
        return self.request(self._message(m.Bye))

    def close(self):
        self._transport.close()
