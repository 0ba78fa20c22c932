"""Protocol v2: RESET is sent without waiting; the stop decision comes with the next answer.

The State Server side with a real :class:`StateService`; the worker side with
the fake transport and clock of ``test_esync_client_side`` (no sockets).
"""
import orjson
import pytest

from mxhet.control import messages as m
from mxhet.control.client import StateClient
from mxhet.control.server import StateService
from mxhet.errors import ProtocolError

from .test_esync_client_side import FakeClock, FakeTransport, _esync, _iteration, _reply


def _service(n=2):
    svc = StateService(n, now=0.0)
    for r in range(n):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r)
    return svc


def test_the_query_after_a_stop_decision_says_stop_and_never_ready():
    svc = _service()
    assert svc.handle(m.Reset(rank=0, seq=2, round=1, want_stop=True), 1.0, sender=0).ok
    svc.handle(m.Reset(rank=1, seq=2, round=1, want_stop=False), 1.0, sender=1)
    for rank in (0, 1):
        reply = svc.handle(m.Query(rank=rank, seq=3, round=1, k=1, c=0.1, since_finish=0.0), 2.0, sender=rank)
        assert reply.ok and reply.stop and not reply.ready and reply.round == 1


def test_without_a_stop_decision_queries_go_on_as_before():
    svc = _service()
    for rank in (0, 1):
        svc.handle(m.Reset(rank=rank, seq=2, round=1, want_stop=False), 1.0, sender=rank)
    reply = svc.handle(m.Query(rank=0, seq=3, round=1, k=1, c=0.1, since_finish=0.0), 2.0, sender=0)
    assert reply.ok and not reply.stop


def test_version_1_requests_are_still_served_and_others_refused():
    svc = _service(1)
    raw = orjson.dumps({"v": 1, "type": "reset", "rank": 0, "seq": 2, "incarnation": 0, "round": 1,
                        "want_stop": True})
    assert svc.handle(m.decode(raw, m.REQUEST_TYPES), 1.0, sender=0).stop
    with pytest.raises(ProtocolError, match="version"):
        m.decode(raw.replace(b'"v":1', b'"v":9'), m.REQUEST_TYPES)
    assert orjson.loads(m.encode(m.Bye(rank=0, seq=1)))["v"] == m.VERSION == 5


def test_send_reset_returns_at_once_and_its_answer_is_taken_by_poll():
    clock = FakeClock()
    transport = FakeTransport(clock)
    client = StateClient("fake", rank=0, slot=0, clock=clock, transport=transport)
    client.send_reset(1, want_stop=False)
    assert clock() == 0.0 and isinstance(transport.sent[-1], m.Reset)
    transport.deliver(m.ResetReply(seq=transport.sent[-1].seq, round=1, stop=False), at=0.002)
    client.send_query(1, 1, 0.1)
    assert client.max_in_flight == 1          # a RESET in flight is not a query in flight
    clock.advance(0.01)
    assert client.poll() == []                # RESET's answer is not a query's
    assert not client.stop_decided and client.replies == 1


def test_a_stop_in_resets_answer_is_noticed():
    clock = FakeClock()
    transport = FakeTransport(clock)
    client = StateClient("fake", rank=0, slot=0, clock=clock, transport=transport)
    client.send_reset(4, want_stop=True)
    transport.deliver(m.ResetReply(seq=transport.sent[-1].seq, round=4, stop=True))
    assert client.poll() == [] and client.stop_decided


def test_a_refused_reset_raises_at_the_next_poll():
    clock = FakeClock()
    transport = FakeTransport(clock)
    client = StateClient("fake", rank=0, slot=0, clock=clock, transport=transport)
    client.send_reset(2)
    transport.deliver(m.Reply(seq=transport.sent[-1].seq, ok=False, error="reset to round 2 after round 5"))
    with pytest.raises(ProtocolError, match="RESET"):
        client.poll()


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_a_worker_stops_on_the_stop_in_a_querys_answer_without_aggregating(ack):
    clock = FakeClock()
    transport = FakeTransport(clock)
    transport.auto = lambda msg: _reply(msg, False, stop=msg.round >= 1) if isinstance(msg, m.Query) else None
    net, trainer, aggregations = _esync(ack, clock, transport)
    trainer.mode.answers.policy.aggregated()  # round 0 was aggregated; the job decided to stop after it
    _iteration(net, trainer, clock)
    assert trainer.should_stop and aggregations == []
    assert len(transport.queries()) == 1       # no query after the stop came


def test_aggregation_never_waits_for_resets_answer():
    """The real aggregate(): after the push/pull the RESET goes out and
    step() returns with nothing answered (the data plane is faked)."""
    clock = FakeClock()
    transport = FakeTransport(clock)
    transport.auto = lambda msg: _reply(msg, True) if isinstance(msg, m.Query) else None
    net, trainer, _ = _esync("blocking", clock, transport)
    mode = trainer.mode
    del mode._aggregate                       # back to ESync._aggregate
    mode._member_round = lambda effect: (clock(),) * 3   # the round among its members: faked
    _iteration(net, trainer, clock)
    resets = [msg for msg in transport.sent if isinstance(msg, m.Reset)]
    assert len(resets) == 1 and resets[0].round == 1 and mode.round == 1
    assert mode.client._resets == {resets[0].seq}  # sent, not waited for
    assert not trainer.should_stop


class OneMillisecond(FakeTransport):
    """Answers every query 1 ms later: NOT-READY for k = 1, READY from k = 2, naming ``slowest``."""

    def __init__(self, clock, slowest):
        super().__init__(clock)
        self.slowest = slowest

    def send(self, data):
        msg = m.decode(data)
        self.sent.append(msg)
        if isinstance(msg, m.Query):
            self.deliver(_reply(msg, msg.k >= 2, slowest=self.slowest), at=self.clock() + 0.001)


@pytest.mark.parametrize("slowest, aborted", [(0, 0), (1, 1)])
def test_only_the_device_named_slowest_waits_a_round_trip_for_its_answer(slowest, aborted):
    clock = FakeClock()
    transport = OneMillisecond(clock, slowest)
    net, trainer, aggregations = _esync("delayed", clock, transport)
    _iteration(net, trainer, clock)           # k = 1: sent, answered 1 ms later (NOT-READY)
    _iteration(net, trainer, clock)           # k = 2: the answer READY
    if slowest == 0:                          # this device (rank 0) was named: it waited 1 ms, then aggregated
        assert aggregations and aggregations[0][0] == 2 and clock() == pytest.approx(0.201)
    else:                                     # another: it went on, and abandons the next iteration
        assert not aggregations and clock() == pytest.approx(0.2)
        _iteration(net, trainer, clock)
        assert aggregations[0][0] == 2
    assert trainer.stats.aborted == aborted
