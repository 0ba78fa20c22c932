"""The worker's side of the State Server protocol.

A DEALER socket with poll-with-timeout, so a lost server never leaves a worker
stuck in a blocking receive; replies are matched by sequence number and stale
ones (of an earlier request) are dropped.
"""
import time

import zmq

from ..errors import ProtocolError, StateServerTimeout
from . import messages as m

DEFAULT_TIMEOUT = 60.0
"""Seconds to wait for a State Server reply before giving up."""


class StateClient:
    """Talks to the State Server for one worker.

    Args:
        address: ZeroMQ address of the State Server.
        rank: this worker's PS-LITE rank.
        slot: this worker's launcher slot.
        timeout: seconds to wait for each reply (> 0).
        context: a ``zmq.Context`` (default: the process-wide instance).
        clock: monotonic clock in seconds.

    Raises:
        ValueError: for a bad timeout or address.
    """

    def __init__(self, address, rank, slot, timeout=DEFAULT_TIMEOUT, context=None, clock=time.monotonic):
        if not address:
            raise ValueError("no State Server address (MXHET_STATE_SERVER is empty): "
                             "start the job with mxhet-launch, which starts the State Server")
        if not timeout > 0:
            raise ValueError("timeout must be > 0 seconds, got %r" % (timeout,))
        self.address, self.rank, self.slot, self.timeout = address, rank, slot, float(timeout)
        self._clock = clock
        self._seq = 0
        self._sock = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, m.MAX_MESSAGE_BYTES)
        self._sock.connect(address)
        self.queries = 0
        self.bytes_sent = 0
        self.bytes_received = 0

    def _next_seq(self):
        self._seq += 1
        return self._seq

    def request(self, message):
        """Send ``message`` and wait for its reply.

        Raises:
            StateServerTimeout: no reply within ``timeout`` seconds.
            ProtocolError: the server refused the request or sent garbage.
        """
        data = m.encode(message)
        self._sock.send(data)
        self.bytes_sent += len(data)
        deadline = self._clock() + self.timeout
        while True:
            left = deadline - self._clock()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1):
                raise StateServerTimeout("no reply from the State Server at %s within %.1f s to %s #%d"
                                         % (self.address, self.timeout, message.TYPE, message.seq))
            raw = self._sock.recv()
            self.bytes_received += len(raw)
            reply = m.decode(raw, {m.Reply.TYPE: m.Reply})
            if reply.seq != message.seq:
                continue  # a late reply to an earlier request
            if not reply.ok:
                raise ProtocolError("State Server refused %s: %s" % (message.TYPE, reply.error))
            return reply

    def register(self):
        return self.request(m.Register(rank=self.rank, seq=self._next_seq(), slot=self.slot))

    def query(self, round_, k, c, since_finish=0.0):
        """QUERY-STATE; True means READY (aggregate now)."""
        self.queries += 1
        reply = self.request(m.Query(rank=self.rank, seq=self._next_seq(), round=round_, k=k,
                                     c=float(c), since_finish=float(since_finish)))
        return reply.ready

    def reset(self, round_, want_stop=False):
        """RESET after pulling the model of ``round_``; True means stop training now."""
        return self.request(m.Reset(rank=self.rank, seq=self._next_seq(), round=round_,
                                    want_stop=bool(want_stop))).stop

    def bye(self):
        self.request(m.Bye(rank=self.rank, seq=self._next_seq()))

    def close(self):
        self._sock.close(0)
