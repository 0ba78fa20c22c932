"""The worker's side of the control-plane transport.

A :class:`Transport` owns a ZeroMQ DEALER socket in a background I/O thread:
the training thread hands it messages to send and takes received ones, never
touching the socket, so a reply arriving or a message leaving never stalls a
local iteration. It can add a one-way delay in each direction, emulating a
slow link (this kernel has no netem): a message leaves ``delay`` seconds after
:meth:`send`, and a reply is handed over ``delay`` seconds after it arrived.

The I/O thread never touches the socket while holding the lock the training
thread waits on, and never blocks on a send: a State Server that is away only
makes messages wait in the outbox. If the I/O thread fails, the training
thread's next :meth:`Transport.send` or :meth:`Transport.recv` raises
:class:`~mxhet.errors.TransportError` naming the cause.
"""
import collections
import threading
import time

import zmq

from ..errors import TransportError
from . import messages as m

DEFAULT_STARTUP_TIMEOUT = 10.0
"""Seconds to wait for the I/O thread to open its socket."""
IDLE_POLL = 1.0
"""Seconds the I/O thread waits at most between two looks at its outbox and heartbeat."""


class Transport:
    """Background DEALER socket with an optional emulated one-way delay.

    Args:
        address: ZeroMQ address to connect to.
        delay: one-way delay in seconds (>= 0), added in both directions.
        context: a ``zmq.Context`` (default: the process-wide instance).
        clock: monotonic clock in seconds.
        keys: the job's CURVE key directory (:mod:`mxhet.control.auth`), or "" for none.
        startup_timeout: seconds to wait for the I/O thread to open its socket (> 0).

    Raises:
        ValueError: for a negative delay or startup timeout, missing key files or a bad address.
        TransportError: the I/O thread did not open its socket within ``startup_timeout``,
            or failed to for a reason other than a bad address or key.
    """

    def __init__(self, address, delay=0.0, context=None, clock=time.monotonic, keys="",
                 startup_timeout=DEFAULT_STARTUP_TIMEOUT):
        if not delay >= 0:
            raise ValueError("delay must be >= 0 seconds, got %r" % (delay,))
        if not startup_timeout > 0:
            raise ValueError("startup_timeout must be > 0 seconds, got %r" % (startup_timeout,))
        self.delay = float(delay)
        self._clock = clock
        self._ctx = context or zmq.Context.instance()
        self._outbox = collections.deque()   # (due, bytes)
        self._inbox = collections.deque()    # (deliver_at, bytes)
        self._lock = threading.Condition()
        self._closed = False
        self._failure = None     # the exception that ended the I/O thread
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
        if not self._ready.wait(startup_timeout):
            with self._lock:
                self._closed = True
            self._waker.close(0)
            raise TransportError("the control-plane I/O thread did not open its socket to %r within %.1f s"
                                 % (address, startup_timeout))
        if self._error is not None:
            self._waker.close(0)
            raise self._error

    def _raise_if_failed(self):
        """Raise the I/O thread's failure in the calling thread; call with the lock held."""
        if self._failure is not None:
            raise TransportError("the control-plane I/O thread failed: %s: %s"
                                 % (type(self._failure).__name__, self._failure)) from self._failure

    def _wake(self):
        try:
            self._waker.send(b"", zmq.NOBLOCK)
        except zmq.Again:
            pass  # the queue of wake-ups is full: the I/O thread will wake anyway

    def send(self, data):
        """Queue ``data`` for sending; returns at once.

        Raises:
            TransportError: the I/O thread failed.
            RuntimeError: the transport is closed.
        """
        with self._lock:
            self._raise_if_failed()
            if self._closed:
                raise RuntimeError("transport is closed")
            self._outbox.append((self._clock() + self.delay, bytes(data)))
        self._wake()

    def set_heartbeat(self, data, interval):
        """Send ``data`` whenever nothing was sent for ``interval`` seconds (from the I/O thread,
        so a heartbeat goes out also while the training thread computes). A heartbeat
        that cannot leave at once (the State Server is away) is dropped.

        Raises:
            ValueError: for an interval <= 0.
            TransportError: the I/O thread failed.
        """
        if not interval > 0:
            raise ValueError("heartbeat interval must be > 0 seconds, got %r" % (interval,))
        with self._lock:
            self._raise_if_failed()
            self._heartbeat = (float(interval), bytes(data))
        self._wake()

    def recv(self, timeout=0.0):
        """The next delivered message as ``(arrived_at, bytes)``, waiting up to
        ``timeout`` seconds; None if none. ``arrived_at`` is when the message
        reached this worker (emulated delay included), on the transport's clock.

        Raises:
            TransportError: the I/O thread failed (also while waiting).
        """
        deadline = self._clock() + max(0.0, timeout)
        with self._lock:
            while True:
                self._raise_if_failed()
                now = self._clock()
                if self._inbox and self._inbox[0][0] <= now:
                    return self._inbox.popleft()
                if now >= deadline:
                    return None
                wake_at = min(deadline, self._inbox[0][0]) if self._inbox else deadline
                self._lock.wait(wake_at - now)

    def close(self):
        """Stop the I/O thread (waiting for it up to 5 s); unsent messages are dropped."""
        with self._lock:
            self._closed = True
        try:
            self._waker.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._thread.join(timeout=5)
        self._waker.close(0)

    def _run(self, address):
        sock = wake = None
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
        except Exception as exc:  # noqa: BLE001 - handed to the constructor
            if isinstance(exc, (zmq.ZMQError, ValueError)):
                self._error = ValueError("cannot connect to the State Server at %r: %s" % (address, exc))
            else:
                self._error = TransportError("cannot open the control-plane socket to %r: %s: %s"
                                             % (address, type(exc).__name__, exc))
            for s in (sock, wake):
                if s is not None:
                    s.close(0)
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop(sock, wake)
        except Exception as exc:  # noqa: BLE001 - raised in the training thread instead
            with self._lock:
                self._failure = exc
                self._lock.notify_all()
        finally:
            sock.close(0)
            wake.close(0)

    def _loop(self, sock, wake):
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        while True:
            with self._lock:
                if self._closed:
                    return
                now = self._clock()
                due = []
                while self._outbox and self._outbox[0][0] <= now:
                    due.append(self._outbox.popleft())
                heartbeat = self._heartbeat
            blocked = False
            for i, (_, data) in enumerate(due):
                try:
                    sock.send(data, zmq.NOBLOCK)
                except zmq.Again:   # no peer, or its queue is full: keep the rest, in order
                    with self._lock:
                        self._outbox.extendleft(reversed(due[i:]))
                    blocked = True
                    break
                self._last_sent = now
            timeout = IDLE_POLL
            if heartbeat is not None:
                interval, beat = heartbeat
                if now - self._last_sent >= interval:
                    try:
                        sock.send(beat, zmq.NOBLOCK)  # not delayed: it only says the process is alive
                    except zmq.Again:
                        pass
                    self._last_sent = now
                timeout = min(timeout, self._last_sent + interval - now)
            if blocked:
                poller.modify(sock, zmq.POLLIN | zmq.POLLOUT)
            else:
                poller.modify(sock, zmq.POLLIN)
                with self._lock:
                    if self._outbox:
                        timeout = min(timeout, self._outbox[0][0] - self._clock())
            events = dict(poller.poll(max(1, int(timeout * 1000))))
            if events.get(wake, 0) & zmq.POLLIN:
                while wake.poll(0):
                    wake.recv(zmq.NOBLOCK)
            if events.get(sock, 0) & zmq.POLLIN:
                received = []
                while True:
                    try:
                        received.append(sock.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                if received:
                    with self._lock:
                        arrived = self._clock() + self.delay
                        self._inbox.extend((arrived, data) for data in received)
                        self._lock.notify_all()
