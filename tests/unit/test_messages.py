"""Wire format of the control plane and the State Server's request handling."""
import json

import pytest

from mxhet.control import messages as m
from mxhet.control.server import StateService
from mxhet.errors import ProtocolError


def test_round_trip():
    q = m.Query(rank=1, seq=3, round=2, k=4, c=0.5, since_finish=0.001)
    assert m.decode(m.encode(q)) == q


@pytest.mark.parametrize("raw", [
    b"\xff\xfe", b"[1,2]", b"{}", b'{"v":3,"type":"bye","rank":0,"seq":1}',
    b'{"v":1,"type":"nope","rank":0,"seq":1}',
    b'{"v":1,"type":"bye","rank":0}',
    b'{"v":1,"type":"bye","rank":0,"seq":1,"extra":1}',
    b'{"v":1,"type":"bye","rank":-1,"seq":1}',
    b'{"v":1,"type":"bye","rank":true,"seq":1}',
    b'{"v":1,"type":"query","rank":0,"seq":1,"round":0,"k":1,"c":"fast","since_finish":0}',
    b'{"v":1,"type":"query","rank":0,"seq":1,"round":0,"k":1,"c":-1,"since_finish":0}',
    b'{"v":1,"type":"reset","rank":0,"seq":1,"round":1,"want_stop":1}',
])
def test_malformed_messages_are_refused(raw):
    with pytest.raises(ProtocolError):
        m.decode(raw, m.REQUEST_TYPES)


def test_oversized_message_refused():
    body = {"v": 1, "type": "bye", "rank": 0, "seq": 1, "pad": "x" * m.MAX_MESSAGE_BYTES}
    with pytest.raises(ProtocolError, match="cap"):
        m.decode(json.dumps(body).encode())


def test_reply_not_accepted_as_request():
    with pytest.raises(ProtocolError):
        m.decode(m.encode(m.Reply(seq=1)), m.REQUEST_TYPES)


def register_all(svc, n):
    for r in range(n):
        assert svc.handle(m.Register(rank=r, seq=1, slot=n - 1 - r), 0.0).ok


def test_service_refuses_unregistered_and_out_of_range():
    svc = StateService(2)
    reply = svc.handle(m.Query(rank=0, seq=1, round=0, k=1, c=0.1, since_finish=0.0), 0.0)
    assert not reply.ok and "registered" in reply.error
    reply = svc.handle(m.Register(rank=5, seq=1, slot=0), 0.0)
    assert not reply.ok
    register_all(svc, 2)
    reply = svc.handle(m.Register(rank=0, seq=2, slot=0), 0.0)  # rank 0 is slot 1
    assert not reply.ok and "already registered" in reply.error


def test_service_one_stop_decision_per_round():
    svc = StateService(2)
    register_all(svc, 2)
    for r in range(2):
        svc.handle(m.Query(rank=r, seq=2, round=0, k=1, c=0.1 * (r + 1), since_finish=0.0), 1.0)
    first = svc.handle(m.Reset(rank=0, seq=3, round=1, want_stop=False), 1.0)
    second = svc.handle(m.Reset(rank=1, seq=3, round=1, want_stop=True), 1.0)
    assert first.stop is False and second.stop is False  # decided by the first reset of the round
    for r in range(2):
        svc.handle(m.Query(rank=r, seq=4, round=1, k=1, c=0.1 * (r + 1), since_finish=0.0), 2.0)
    assert svc.handle(m.Reset(rank=1, seq=5, round=2, want_stop=True), 2.0).stop
    assert svc.handle(m.Reset(rank=0, seq=5, round=2, want_stop=False), 2.0).stop


def test_service_converts_durations_to_server_clock():
    svc = StateService(2, epsilon=0.0)
    register_all(svc, 2)
    svc.handle(m.Query(rank=1, seq=2, round=0, k=1, c=1.0, since_finish=0.0), 10.0)  # slowest ready
    svc.handle(m.Reset(rank=1, seq=3, round=1, want_stop=False), 10.0)
    svc.handle(m.Reset(rank=0, seq=3, round=1, want_stop=False), 10.0)
    # worker 0 finished 0.3 s before the query reached the server
    svc.handle(m.Query(rank=0, seq=4, round=1, k=1, c=0.1, since_finish=0.3), 10.5)
    assert svc.table.record(0).last_finish == pytest.approx(10.2)


def test_service_records_rounds_and_finishes():
    svc = StateService(2)
    register_all(svc, 2)
    svc.handle(m.Query(rank=0, seq=2, round=0, k=1, c=0.1, since_finish=0.0), 0.0)
    assert svc.handle(m.Query(rank=1, seq=2, round=0, k=1, c=1.0, since_finish=0.0), 1.0).ready
    assert svc.handle(m.Query(rank=0, seq=3, round=0, k=9, c=0.1, since_finish=0.0), 1.0).ready
    stats = svc.stats()
    assert stats["rounds"][0] == {"round": 0, "slowest": 1, "local_iters": {"0": 9, "1": 1}}
    assert not svc.finished
    svc.handle(m.Bye(rank=0, seq=4), 2.0)
    svc.handle(m.Bye(rank=1, seq=4), 2.0)
    assert svc.finished


def test_a_rank_belongs_to_the_connection_that_registered_it():
    svc = StateService(2)
    assert svc.handle(m.Register(rank=0, seq=1, slot=0), 0.0, sender=b"a").ok
    hijack = svc.handle(m.Query(rank=0, seq=2, round=0, k=1, c=0.1, since_finish=0.0), 0.0, sender=b"b")
    assert not hijack.ok and "another connection" in hijack.error
    assert not svc.handle(m.Register(rank=0, seq=3, slot=0), 0.0, sender=b"b").ok
    assert svc.table.record(0).local_iters == 0            # the hijack changed nothing
    assert svc.handle(m.Bye(rank=0, seq=4), 0.0, sender=b"a").ok
    assert svc.handle(m.Register(rank=0, seq=1, slot=0, incarnation=7), 0.0, sender=b"b").ok  # a new worker


@pytest.mark.parametrize("kind", ['["query"]', '{"a": 1}', "7", "null"])
def test_non_string_type_is_refused(kind):
    raw = ('{"v":1,"type":%s,"rank":0,"seq":1}' % kind).encode()
    with pytest.raises(ProtocolError):
        m.decode(raw, m.REQUEST_TYPES)


def test_replayed_requests_change_state_once_and_get_the_same_answer():
    svc = StateService(2, epsilon=0.0)
    for r in range(2):
        svc.handle(m.Register(rank=r, seq=1, slot=r, incarnation=11), 0.0)
    svc.handle(m.Query(rank=1, seq=2, round=0, k=1, c=1.0, since_finish=0.0, incarnation=11), 1.0)
    reset = m.Reset(rank=1, seq=3, round=1, want_stop=True, incarnation=11)
    first = svc.handle(reset, 1.0)
    again = svc.handle(reset, 5.0)                         # the same bytes, later
    assert again == first and first.stop
    assert svc.table.record(1).last_finish == 1.0         # the replay did not move the round start
    stale = svc.handle(m.Query(rank=1, seq=2, round=1, k=1, c=1.0, since_finish=0.0, incarnation=11), 6.0)
    assert not stale.ok and "stale" in stale.error


def test_a_live_rank_cannot_be_taken_by_another_incarnation():
    svc = StateService(1)
    assert svc.handle(m.Register(rank=0, seq=1, slot=0, incarnation=1), 0.0).ok
    intruder = svc.handle(m.Register(rank=0, seq=1, slot=0, incarnation=2), 0.0)
    assert not intruder.ok and "another incarnation" in intruder.error
    late = svc.handle(m.Query(rank=0, seq=5, round=0, k=1, c=0.1, since_finish=0.0, incarnation=2), 0.0)
    assert not late.ok


def test_message_round_trip_keeps_the_incarnation():
    q = m.Query(rank=1, seq=3, round=2, k=4, c=0.5, since_finish=0.001, incarnation=2 ** 52)
    assert m.decode(m.encode(q)) == q
    with pytest.raises(ProtocolError):
        m.decode(m.encode(m.Bye(rank=0, seq=1, incarnation=2 ** 53)))


def test_a_worker_with_another_model_is_refused():
    svc = StateService(2)
    assert svc.handle(m.Register(rank=0, seq=1, slot=0, signature="abc", incarnation=1), 0.0).ok
    other = svc.handle(m.Register(rank=1, seq=1, slot=1, signature="xyz", incarnation=2), 0.0)
    assert not other.ok and "differs" in other.error
    assert svc.handle(m.Register(rank=1, seq=2, slot=1, signature="abc", incarnation=2), 0.0).ok


def test_reset_carries_since_finish_from_version_3_on():
    body = {"type": "reset", "rank": 0, "seq": 2, "incarnation": 0, "round": 1, "want_stop": False}
    for version in (1, 2):   # older workers: t_e is the RESET's receipt, as before
        assert m.decode(json.dumps(dict(body, v=version)).encode(), m.REQUEST_TYPES).since_finish == 0.0
    with pytest.raises(ProtocolError, match="missing fields \\['since_finish'\\]"):
        m.decode(json.dumps(dict(body, v=3)).encode(), m.REQUEST_TYPES)
    with pytest.raises(ProtocolError, match="since_finish"):
        m.decode(json.dumps(dict(body, v=3, since_finish=-0.1)).encode(), m.REQUEST_TYPES)
    reset = m.Reset(rank=0, seq=2, round=1, want_stop=False, since_finish=0.004)
    assert m.decode(m.encode(reset)) == reset
    svc = StateService(1, now=0.0)
    svc.handle(m.Register(rank=0, seq=1, slot=0), 0.0)
    svc.handle(reset, 1.0)
    assert svc.table.record(0).last_finish == pytest.approx(0.996)
