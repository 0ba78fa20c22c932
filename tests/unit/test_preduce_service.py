"""Partial Reduce behind the State Server's request handling (no sockets, no MXNet)."""
import pytest

from mxhet.control import messages as m
from mxhet.control.server import StateService

JOIN = dict(group_size=2, dynamic=True, alpha=0.5, avoid_frozen=True, window=0)


class Worker:
    def __init__(self, service, rank):
        self.service, self.rank, self.seq = service, rank, 0

    def send(self, cls, **fields):
        self.seq += 1
        return self.service.handle(cls(rank=self.rank, seq=self.seq, incarnation=1, **fields), 0.0, sender=self.rank)


@pytest.fixture
def job():
    service = StateService(4)
    workers = [Worker(service, r) for r in range(4)]
    for w in workers:
        assert w.send(m.Register, slot=w.rank).ok
        assert w.send(m.ReduceJoin, **JOIN).ok
    return service, workers


def test_ready_is_answered_when_the_group_forms_and_pushed_when_all_pushed(job):
    service, (w0, w1, w2, w3) = job
    assert w2.send(m.ReduceReady, k=10, want_stop=False) is None        # waits for a partner
    reply = w0.send(m.ReduceReady, k=7, want_stop=False)
    assert reply.ok and reply.k == 10 and reply.weight == pytest.approx(7 / 15)
    (rank, late), = service.take_released()
    assert rank == 2 and late.seq == 1 + 2 and late.round == reply.round and late.group_slot == reply.group_slot
    assert late.weight == pytest.approx(8 / 15)
    # the "all pushed" barrier
    assert w0.send(m.ReducePushed, group=reply.round) is None
    assert service.take_released() == []
    assert w2.send(m.ReducePushed, group=reply.round).ok
    (rank, late), = service.take_released()
    assert rank == 0 and late.ok and type(late) is m.PushedReply and not late.released   # every push is in
    assert not w1.send(m.ReducePushed, group=reply.round).ok          # not a member
    record = service.stats()["preduce"]
    assert record["groups"] == 1 and record["group_size"] == 2


def test_a_stop_wish_ends_the_job_once_everyone_has_been_in_a_group(job):
    service, (w0, w1, w2, w3) = job
    assert w1.send(m.ReduceReady, k=1, want_stop=False) is None
    first = w3.send(m.ReduceReady, k=1, want_stop=True)      # ranks 0 and 2 never reduced: go on
    assert first.ok and not first.stop and first.weight == 0.5
    service.take_released()
    for w in (w1, w3):
        w.send(m.ReducePushed, group=first.round)
    service.take_released()
    assert w0.send(m.ReduceReady, k=1, want_stop=False) is None
    second = w2.send(m.ReduceReady, k=1, want_stop=False)      # now everyone has reduced once: stop
    assert second.ok and not second.stop                        # (this group still reduces)
    service.take_released()
    assert w1.send(m.ReduceReady, k=2, want_stop=False).stop
    assert w3.send(m.ReduceReady, k=2, want_stop=False).stop


def test_a_stop_wish_releases_the_waiting(job):
    service, (w0, w1, w2, w3) = job
    for a, b in ((w0, w1), (w2, w3)):                           # everyone reduces once
        a.send(m.ReduceReady, k=1, want_stop=False)
        group = b.send(m.ReduceReady, k=1, want_stop=False).round
        a.send(m.ReducePushed, group=group)
        b.send(m.ReducePushed, group=group)
    service.take_released()
    assert w1.send(m.ReduceReady, k=2, want_stop=False) is None
    stop = w3.send(m.ReduceReady, k=2, want_stop=True)
    assert stop.ok and stop.stop
    (rank, late), = service.take_released()
    assert rank == 1 and late.stop
    assert w0.send(m.ReduceReady, k=2, want_stop=False).stop


def test_settings_must_agree_and_ready_needs_a_join():
    service = StateService(3)
    w0, w1 = Worker(service, 0), Worker(service, 1)
    w0.send(m.Register, slot=0)
    w1.send(m.Register, slot=1)
    assert not w0.send(m.ReduceReady, k=1, want_stop=False).ok
    assert w0.send(m.ReduceJoin, **JOIN).ok
    reply = w1.send(m.ReduceJoin, **dict(JOIN, group_size=3))
    assert not reply.ok and "group_size" not in reply.error and "joins Partial Reduce" in reply.error


def test_messages_round_trip():
    for message in (m.ReduceJoin(rank=1, seq=2, **JOIN), m.ReduceReady(rank=0, seq=1, k=5, want_stop=True),
                    m.ReducePushed(rank=3, seq=9, group=4),
                    m.GroupedReply(seq=3, round=2, group_slot=1, weight=0.25, k=7, target=1), m.Reply(seq=4)):
        assert m.decode(m.encode(message)) == message
    with pytest.raises(Exception, match="alpha"):
        m.decode(m.encode(m.ReduceJoin(rank=1, seq=2, **dict(JOIN, alpha=1.5))))


def test_goodbyes_leave_the_last_worker_reducing_alone_with_a_filler_push(job):
    service, (w0, w1, w2, w3) = job
    for w in (w0, w1):
        assert w.send(m.Bye).ok
    assert w2.send(m.ReduceReady, k=3, want_stop=False) is None        # rank 3 is still live: waits
    assert w3.send(m.Bye).ok                                            # ... until it leaves too
    (rank, alone), = service.take_released()
    assert rank == 2 and alone.ok and not alone.stop and alone.weight == 1.0 and alone.k == 3
    assert alone.target == 1          # P = 2: one zero push makes the slot count two
    assert w2.send(m.ReducePushed, group=alone.round).ok               # its own push completes the group
    assert w2.send(m.ReduceReady, k=4, want_stop=True).stop             # it has been in a group: the stop holds
