"""A cheap closed-loop load generator for ``mxhet-bench control-plane``: DEALER peers
that speak ZMTP 3.0 (NULL mechanism) on plain TCP sockets.

The State Server cannot tell these clients from libzmq DEALER sockets (ZMTP is
the wire protocol; each client is its own TCP connection and owns its ranks).
They cost the generator far less per query than a libzmq DEALER per client
driven from Python: no I/O thread, no mailbox signalling between threads, and
one ``epoll`` over the connections instead of ``zmq_poll``, which looks at
every socket on every call. On a 2-core machine that leaves the core the
generator runs on with room to spare, so the server, not the generator, sets
the rate. CURVE needs libzmq: authenticated runs use the libzmq generator.
"""
import array
import os
import select
import socket
import struct
import time

_GREETING = (b"\xff" + b"\x00" * 8 + b"\x7f"     # signature
             + b"\x03\x00"                        # ZMTP 3.0
             + b"NULL".ljust(20, b"\x00")         # mechanism
             + b"\x00" + b"\x00" * 31)            # as-server = 0, filler
_READY_BODY = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
_READY = b"\x04" + bytes([len(_READY_BODY)]) + _READY_BODY
_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04


def frame(body):
    """One ZMTP message frame (the last of its message) holding ``body``."""
    if len(body) < 256:
        return b"\x00" + bytes([len(body)]) + body
    return bytes([_LONG]) + struct.pack(">Q", len(body)) + body


class Peer:
    """One DEALER connection to a ROUTER at ``address`` (``tcp://host:port``).

    Raises:
        ValueError: for an address that is not tcp://host:port.
        ConnectionError: the peer is not a ZMTP 3 NULL-mechanism ROUTER.
    """

    def __init__(self, address, timeout=30.0):
        if not address.startswith("tcp://") or ":" not in address[6:]:
            raise ValueError("expected tcp://host:port, got %r" % (address,))
        host, port = address[6:].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.sock.sendall(_GREETING + _READY)
        greeting = self._read_exactly(64)
        if greeting[0] != 0xFF or greeting[9] != 0x7F or greeting[10] < 3 or greeting[12:16] != b"NULL":
            raise ConnectionError("not a ZMTP 3 NULL-mechanism peer: %r" % greeting[:32])
        while True:                         # the peer's READY (and nothing else) before any message
            command = self._next_frame(blocking=True)
            if command[0] & _COMMAND and command[1][:6] == b"\x05READY":
                break
        self.sock.settimeout(None)
        self.fileno = self.sock.fileno()

    def _read_exactly(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the State Server closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _next_frame(self, blocking=False):
        """``(flags, body)`` of the next complete frame in the buffer (reading more when
        ``blocking``), or None."""
        while True:
            buf = self.buffer
            if len(buf) >= 2:
                flags = buf[0]
                if flags & _LONG:
                    if len(buf) >= 9:
                        size = struct.unpack_from(">Q", buf, 1)[0]
                        if len(buf) >= 9 + size:
                            self.buffer = buf[9 + size:]
                            return flags, buf[9:9 + size]
                else:
                    size = buf[1]
                    if len(buf) >= 2 + size:
                        self.buffer = buf[2 + size:]
                        return flags, buf[2:2 + size]
            if not blocking:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the State Server closed the connection")
            self.buffer += chunk

    def send(self, body):
        self.sock.sendall(frame(body))

    def messages(self):
        """Read what is waiting on the socket; the complete single-frame messages in it.

        Raises:
            ConnectionError: the server closed the connection or sent a multi-frame message.
        """
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the State Server closed the connection")
        self.buffer += chunk
        out = []
        while True:
            got = self._next_frame()
            if got is None:
                return out
            flags, body = got
            if flags & _COMMAND:
                continue                    # e.g. PING: the server sets no heartbeats, so none come
            if flags & _MORE:
                raise ConnectionError("a reply of more than one frame")
            out.append(body)

    def close(self):
        self.sock.close()


def register(peer, messages, window=256, timeout=120.0):
    """Send ``messages`` (bytes) through ``peer``, at most ``window`` unanswered at once.

    Raises:
        RuntimeError: a refusal, or ``timeout`` seconds without a reply.
    """
    sent = received = 0
    poller = select.poll()
    poller.register(peer.fileno, select.POLLIN)
    while received < len(messages):
        while sent < len(messages) and sent - received < window:
            peer.send(messages[sent])
            sent += 1
        if not poller.poll(1000 * timeout):
            raise RuntimeError("the State Server did not answer %d registrations" % (len(messages) - received))
        for reply in peer.messages():
            if b'"ok":true' not in reply:
                raise RuntimeError("registration refused: %r" % reply[:300])
            received += 1


def generate(config, address, client_ids, ready, start, results, register_template, query_template, incarnation,
             capability):
    """A generator process (runs in a child): closed-loop ZMTP clients ``client_ids``.

    Reports ``{"pid", "queries", "errors", "cpu_s", "latencies"}`` through ``results``
    as :func:`bench.control_plane.generate` does.
    """
    if config.generator_cpus:
        os.sched_setaffinity(0, config.generator_cpus)
    peers = []
    try:
        ranks, seqs, turn, sent_at, prefixes = [], [], [], [], []
        for client in client_ids:
            peer = Peer(address)
            own = config.ranks_of(client)
            register(peer, [(register_template % (r, incarnation, r)).encode() for r in own])
            peers.append(peer)
            ranks.append(own)
            seqs.append([1] * len(own))
            turn.append(0)
            sent_at.append(0.0)
        caps = {r: capability(r) for own in ranks for r in own}
        poller = select.epoll()
        index = {}
        for i, peer in enumerate(peers):
            poller.register(peer.fileno, select.EPOLLIN)
            index[peer.fileno] = i
        ready.put(os.getpid())
        t0 = start.get()
        window_start = t0 - time.time() + time.perf_counter()
        end = window_start + config.duration
        latencies = array.array("d")
        queries = errors = 0
        perf = time.perf_counter

        def send(i):
            own, t = ranks[i], turn[i]
            rank = own[t]
            seq = seqs[i][t] = seqs[i][t] + 1
            turn[i] = (t + 1) % len(own)
            sent_at[i] = perf()
            peers[i].sock.send(frame((query_template % (rank, seq, incarnation, seq, caps[rank])).encode()))

        for i in range(len(peers)):
            send(i)
        cpu0 = None
        while True:
            now = perf()
            if cpu0 is None and now >= window_start:
                cpu0 = time.process_time()
            if now >= end:
                break
            for fd, _ in poller.poll(0.1):
                i = index[fd]
                for reply in peers[i].messages():
                    done = perf()
                    if sent_at[i] >= window_start and done < end:
                        latencies.append(done - sent_at[i])
                        queries += 1
                        if b'"ok":true' not in reply:
                            errors += 1
                    send(i)
        cpu = time.process_time() - (cpu0 if cpu0 is not None else time.process_time())
        results.put({"pid": os.getpid(), "queries": queries, "errors": errors, "cpu_s": cpu,
                     "latencies": latencies.tobytes()})
    except Exception as exc:  # noqa: BLE001  (reported to the parent, which fails the run)
        ready.put("error: %r" % (exc,))
        results.put({"error": repr(exc)})
    finally:
        for peer in peers:
            peer.close()
