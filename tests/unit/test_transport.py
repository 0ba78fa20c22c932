"""The worker's control-plane transport over real ZeroMQ sockets, and the
client's non-blocking re-registration in poll() (with a fake transport)."""
import socket
import threading
import time

import pytest
import zmq

from mxhet.control import messages as m
from mxhet.control.client import StateClient
from mxhet.control.transport import Transport
from mxhet.errors import ProtocolError, TransportError

RETURNS_WITHIN = 5.0
"""Seconds a call that must not block gets before the test calls it blocked."""


def _returns(call, seconds=RETURNS_WITHIN):
    """``call()``'s result; fails the test if it has not returned within ``seconds``."""
    outcome = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "%r did not return within %.1f s" % (call, seconds)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _reserved_tcp_port():
    """A plain socket bound to a free port on 127.0.0.1, not listening: connections
    to it are refused until it is closed (a zmq socket would close asynchronously)."""
    reserved = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reserved.bind(("127.0.0.1", 0))
    return reserved


def _unused_tcp_address():
    with _reserved_tcp_port() as reserved:
        return "tcp://127.0.0.1:%d" % reserved.getsockname()[1]


@pytest.mark.timeout(60)
def test_an_absent_state_server_never_blocks_the_training_thread():
    reserved = _reserved_tcp_port()
    address = "tcp://127.0.0.1:%d" % reserved.getsockname()[1]
    transport = Transport(address)
    count = 3000  # more than the socket's send high-water mark (1000 messages)
    try:
        def train():  # a query per iteration, a look for answers every 100
            for i in range(count):
                transport.send(b"%d" % i)
                if i % 100 == 99:
                    assert transport.recv(timeout=0.01) is None
        _returns(train)
        assert _returns(lambda: transport.recv(timeout=0.2)) is None
        _returns(lambda: transport.set_heartbeat(b"beat", 0.05))
        time.sleep(0.2)
        _returns(lambda: transport.send(b"%d" % count))
        assert _returns(lambda: transport.recv(timeout=0.2)) is None
        # the State Server comes (back): everything arrives, in order
        reserved.close()
        server = zmq.Context.instance().socket(zmq.ROUTER)
        server.setsockopt(zmq.LINGER, 0)
        server.bind(address)
        try:
            got, deadline = [], time.monotonic() + 20
            while len(got) <= count and time.monotonic() < deadline:
                if server.poll(100):
                    data = server.recv_multipart()[1]
                    if data != b"beat":
                        got.append(int(data))
            assert got == list(range(count + 1))
        finally:
            server.close(0)
    finally:
        _returns(transport.close, 10.0)
        reserved.close()


class _FailingRecvSocket(zmq.Socket):
    """A socket whose DEALER side fails on receiving (to break the I/O thread)."""

    def recv(self, flags=0, copy=True, track=False):
        if self.socket_type == zmq.DEALER:
            raise RuntimeError("injected receive failure")
        return super().recv(flags, copy=copy, track=track)


class _FailingRecvContext(zmq.Context):
    _socket_class = _FailingRecvSocket


@pytest.mark.timeout(60)
def test_an_io_thread_failure_is_raised_in_the_training_thread():
    ctx = _FailingRecvContext()
    server = ctx.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    transport = Transport("tcp://127.0.0.1:%d" % port, context=ctx)
    try:
        transport.send(b"hello")
        assert server.poll(5000)
        sender, data = server.recv_multipart()
        assert data == b"hello"
        server.send_multipart([sender, b"reply"])   # the I/O thread fails on receiving it
        with pytest.raises(TransportError, match="RuntimeError: injected receive failure"):
            _returns(lambda: transport.recv(timeout=30.0))
        with pytest.raises(TransportError, match="injected receive failure"):
            _returns(lambda: transport.send(b"more"))
        with pytest.raises(TransportError, match="injected receive failure"):
            _returns(lambda: transport.set_heartbeat(b"beat", 1.0))
    finally:
        _returns(transport.close, 10.0)
        server.close(0)
        _returns(ctx.term, 10.0)


class _SlowDealerContext(zmq.Context):
    """Opens DEALER sockets only after ``stall`` seconds (an I/O thread that does not start)."""

    stall = 1.0

    def socket(self, socket_type, **kwargs):
        if socket_type == zmq.DEALER:
            time.sleep(self.stall)
        return super().socket(socket_type, **kwargs)


@pytest.mark.timeout(60)
def test_startup_timeout_raises():
    ctx = _SlowDealerContext()
    try:
        with pytest.raises(TransportError, match="within 0.1 s"):
            _returns(lambda: Transport(_unused_tcp_address(), context=ctx, startup_timeout=0.1))
        with pytest.raises(ValueError, match="startup_timeout"):
            Transport(_unused_tcp_address(), context=ctx, startup_timeout=0)
    finally:
        _returns(ctx.term, 10.0)  # also waits for the late I/O thread to close its sockets


class FakeClock:
    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now


class FakeTransport:
    """Keeps sent messages; hands over scripted replies, advancing the fake clock while it waits."""

    def __init__(self, clock):
        self.clock = clock
        self.sent = []
        self.inbox = []  # (deliver_at, bytes)

    def send(self, data):
        self.sent.append(m.decode(data))

    def deliver(self, reply):
        self.inbox.append((self.clock(), m.encode(reply)))

    def recv(self, timeout=0.0):
        if self.inbox:
            return self.inbox.pop(0)
        self.clock.now += timeout
        return None

    def of_type(self, cls):
        return [msg for msg in self.sent if isinstance(msg, cls)]


def _forgotten(request):
    return m.Reply(seq=request.seq, ok=False, error="rank 0 has not registered", code="not_registered")


@pytest.mark.timeout(30)
def test_poll_registers_again_without_waiting():
    clock = FakeClock()
    transport = FakeTransport(clock)
    client = StateClient("fake", rank=0, slot=2, clock=clock, transport=transport, timeout=60)
    client.send_query(4, 1, 0.1)
    client.send_query(4, 2, 0.2)
    first, second = transport.of_type(m.Query)
    transport.deliver(_forgotten(first))          # the State Server was restarted
    assert client.poll(timeout=0.05) == []
    assert clock() <= 0.05                        # the Register is never answered here
    [register] = transport.of_type(m.Register)
    assert (register.round, register.slot) == (4, 2) and client.reregistrations == 1
    transport.deliver(_forgotten(second))         # sent before the Register: no second one
    assert client.poll() == [] and len(transport.of_type(m.Register)) == 1
    transport.deliver(m.Registered(seq=register.seq, round=4))
    client.send_query(4, 3, 0.3)
    third = transport.of_type(m.Query)[-1]
    transport.deliver(m.QueryReply(seq=third.seq, round=4, ready=True))
    assert [r.seq for r in client.poll()] == [third.seq]  # the Register's answer is not a query's
    assert client.reregistrations == 1
    client.send_query(4, 4, 0.4)                  # restarted again: a query after the Register forgotten
    transport.deliver(_forgotten(transport.of_type(m.Query)[-1]))
    assert client.poll() == [] and len(transport.of_type(m.Register)) == 2
    assert client.reregistrations == 2


@pytest.mark.timeout(30)
def test_a_refused_registration_from_poll_raises():
    clock = FakeClock()
    transport = FakeTransport(clock)
    client = StateClient("fake", rank=0, slot=0, clock=clock, transport=transport)
    client.send_query(1, 1, 0.1)
    transport.deliver(_forgotten(transport.of_type(m.Query)[0]))
    assert client.poll() == []
    [register] = transport.of_type(m.Register)
    transport.deliver(m.Reply(seq=register.seq, ok=False, error="the model differs"))
    with pytest.raises(ProtocolError, match="registration: the model differs"):
        client.poll()
