"""The worker's side of the control-plane transport.

A :class:`Transport` owns a ZeroMQ DEALER socket in a background I/O thread:
the training thread hands it messages to send and takes received ones, never
touching the socket, so a reply arriving or a message leaving never stalls a
local iteration. It can add a one-way delay in each direction, emulating a
slow link (this kernel has no netem): a message leaves ``delay`` seconds after
:meth:`send`, and a reply is handed over ``delay`` seconds after it arrived.
"""
import collections
import threading
import time

import zmq

from . import messages as m


class Transport:
    """Background DEALER socket with an optional emulated one-way delay.

    Args:
        address: ZeroMQ address to connect to.
        delay: one-way delay in seconds (>= 0), added in both directions.
        context: a ``zmq.Context`` (default: the process-wide instance).
        clock: monotonic clock in seconds.
        keys: the job's CURVE key directory (:mod:`mxhet.control.auth`), or "" for none.

    Raises:
        ValueError: for a negative delay or missing key files.
    """

    def __init__(self, address, delay=0.0, context=None, clock=time.monotonic, keys=""):
        if not delay >= 0:
            raise ValueError("delay must be >= 0 seconds, got %r" % (delay,))
        self.delay = float(delay)
        self._clock = clock
        self._ctx = context or zmq.Context.instance()
        self._outbox = collections.deque()   # (due, bytes)
        self._inbox = collections.deque()    # (deliver_at, bytes)
        self._lock = threading.Condition()
        self._closed = False
        self._heartbeat = None   # (interval seconds, bytes)
        self._last_sent = clock()
        self._wake_addr = "inproc://mxhet-transport-%x" % id(self)
        self._waker = self._ctx.socket(zmq.PAIR)
        self._waker.bind(self._wake_addr)
        self._ready = threading.Event()
        self._error = None
        self._keys = keys
        self._thread = threading.Thread(target=self._run, args=(address,), name="mxhet-control-io", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def send(self, data):
        """Queue ``data`` for sending; returns at once."""
        with self._lock:
            if self._closed:
                raise RuntimeError("transport is closed")
            self._outbox.append((self._clock() + self.delay, bytes(data)))
        self._waker.send(b"", zmq.NOBLOCK)

    def set_heartbeat(self, data, interval):
        """Send ``data`` whenever nothing was sent for ``interval`` seconds (from the I/O thread,
        so a heartbeat goes out also while the training thread computes)."""
        if not interval > 0:
            raise ValueError("heartbeat interval must be > 0 seconds, got %r" % (interval,))
        with self._lock:
            self._heartbeat = (float(interval), bytes(data))
        self._waker.send(b"", zmq.NOBLOCK)

    def recv(self, timeout=0.0):
        """The next delivered message as ``(arrived_at, bytes)``, waiting up to
        ``timeout`` seconds; None if none. ``arrived_at`` is when the message
        reached this worker (emulated delay included), on the transport's clock."""
        deadline = self._clock() + max(0.0, timeout)
        with self._lock:
            while True:
                now = self._clock()
                if self._inbox and self._inbox[0][0] <= now:
                    return self._inbox.popleft()
                if now >= deadline:
                    return None
                wake_at = min(deadline, self._inbox[0][0]) if self._inbox else deadline
                self._lock.wait(wake_at - now)

    def close(self):
        with self._lock:
            self._closed = True
        try:
            self._waker.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._thread.join(timeout=5)
        self._waker.close(0)

    def _run(self, address):
        try:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, m.MAX_MESSAGE_BYTES)
            if self._keys:
                from .auth import secure_client
                secure_client(sock, self._keys)
            sock.connect(address)
            wake = self._ctx.socket(zmq.PAIR)
            wake.connect(self._wake_addr)
        except (zmq.ZMQError, ValueError) as exc:
            self._error = ValueError("cannot connect to the State Server at %r: %s" % (address, exc))
            self._ready.set()
            return
        self._ready.set()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    now = self._clock()
                    while self._outbox and self._outbox[0][0] <= now:
                        sock.send(self._outbox.popleft()[1])
                        self._last_sent = now
                    timeout = (self._outbox[0][0] - now) if self._outbox else 1.0
                    if self._heartbeat is not None:
                        interval, beat = self._heartbeat
                        if now - self._last_sent >= interval:
                            sock.send(beat)  # not delayed: it only says the process is alive
                            self._last_sent = now
                        timeout = min(timeout, self._last_sent + interval - now)
                for s, _ in poller.poll(max(1, int(timeout * 1000))):
                    if s is wake:
                        while wake.poll(0):
                            wake.recv()
                    else:
                        while sock.poll(0):
                            data = sock.recv()
                            with self._lock:
                                self._inbox.append((self._clock() + self.delay, data))
                                self._lock.notify_all()
        finally:
            sock.close(0)
            wake.close(0)
