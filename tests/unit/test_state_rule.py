"""Algorithm 2 (QUERY-STATE / RESET) with an injected clock."""
import math

import pytest

from mxhet.control import messages as m
from mxhet.control.server import StateService
from mxhet.control.state_rule import StateTable, find_slowest, rest_time


def table(n=3, eps=0.05):
    return StateTable(range(n), epsilon=eps, now=0.0)


def test_k_zero_is_never_ready():
    t = table()
    # even the slowest device must do one local iteration per round
    for r in range(3):
        t.query(r, 1, 1.0 + r, last_finish=0.0, now=0.0)
    assert t.query(2, 0, 3.0, last_finish=0.0, now=0.0) is False


def test_unreported_device_counts_as_slowest():
    t = table(2)
    # device 1 has not reported a capability yet: device 0 keeps training
    assert t.query(0, 5, 0.01, last_finish=1.0, now=1.0) is False
    assert t.slowest_rank() == 1
    assert math.isinf(t.record(1).capability)


def test_slowest_device_is_ready_after_one_iteration():
    t = table()
    t.query(0, 3, 0.1, 0.0, 0.0)
    t.query(1, 3, 0.1, 0.0, 0.0)
    assert t.query(2, 1, 2.0, last_finish=2.0, now=2.0) is True
    assert t.record(2).ready


def test_fast_device_ready_once_slowest_ready():
    t = table()
    t.query(0, 1, 0.1, 0.0, 0.0)
    t.query(1, 0, 0.1, 0.0, 0.0)  # k == 0 records the capability only
    t.query(2, 1, 2.0, 2.0, 2.0)  # slowest, ready
    assert t.query(0, 7, 0.1, last_finish=2.01, now=2.01) is True


def test_fast_device_continues_while_it_can_finish_an_iteration():
    t = table(2)
    t.query(1, 1, 2.0, last_finish=0.0, now=0.0)  # slow: ready (it is the slowest)
    t.reset(1, 1, finish_time=0.5)
    t.reset(0, 1, finish_time=0.5)
    # slow device expected to finish at 0.5 + 2.0 = 2.5
    assert t.query(0, 1, 0.1, last_finish=0.6, now=0.6) is False   # rest 1.9 s
    assert t.query(0, 10, 0.1, last_finish=2.3, now=2.3) is False  # rest 0.2 > 0.15
    assert t.query(0, 12, 0.1, last_finish=2.4, now=2.4) is True   # rest 0.1 < 0.15


def test_not_ready_while_slowest_has_not_pulled():
    t = table(2)
    t.query(0, 1, 0.1, 0.0, 0.0)
    t.query(1, 1, 2.0, 2.0, 2.0)  # slowest ready in round 0
    t.query(0, 4, 0.1, 2.0, 2.0)
    t.reset(0, 1, finish_time=2.1)  # fast device pulled first
    # the slowest is still in round 0 (its pull has not finished)
    assert t.query(0, 1, 0.1, last_finish=2.2, now=2.2) is False
    assert t.query(0, 1, 0.1, last_finish=5.0, now=5.0) is False


def test_two_equally_slow_devices_do_not_stall_the_round():
    # Section 4.1: A and B equally slow; the one that reports first must not
    # continue while the later one aggregates.
    t = table(3)
    t.query(0, 5, 0.05, 0.0, 0.0)
    t.query(2, 0, 2.0, 0.0, 0.0)  # B's capability is known from an earlier round
    a_ready = t.query(1, 1, 2.0, last_finish=2.0, now=2.0)
    b_ready = t.query(2, 1, 2.0, last_finish=2.001, now=2.001)
    assert a_ready and b_ready


@pytest.mark.parametrize("first", [1, 2])
def test_equal_stragglers_after_their_test_batches_both_aggregate_after_one_iteration(first):
    # Algorithm 1 line 3: every device reports its test batch with k = 0
    # (NOT-READY, c recorded), so whichever straggler asks first after its
    # first iteration knows the other's capability.
    t = table(3, eps=0.01)
    assert t.query(0, 0, 0.05, last_finish=0.05, now=0.05) is False
    assert t.query(1, 0, 2.0, last_finish=2.0, now=2.0) is False
    assert t.query(2, 0, 2.0, last_finish=2.001, now=2.001) is False
    second = 3 - first
    assert t.query(first, 1, 2.0, last_finish=4.0 + first / 1000, now=4.0 + first / 1000) is True
    assert t.query(second, 1, 2.0, last_finish=4.0 + second / 1000, now=4.0 + second / 1000) is True


def test_two_almost_equally_slow_devices_epsilon_breaks_tie():
    t = table(3, eps=0.05)
    t.query(0, 5, 0.05, 0.0, 0.0)
    t.query(2, 1, 2.02, last_finish=0.0, now=0.0)  # B reported earlier and is a bit slower
    t.reset(2, 0, 0.0)
    # A finishes at the same time B is expected to (2.02 s): A must aggregate
    assert t.query(1, 1, 2.0, last_finish=2.0, now=2.0) is True


def test_reset_clears_ready_and_iterations():
    t = table(2)
    t.query(1, 1, 1.0, 0.0, 0.0)
    t.reset(1, 1, finish_time=1.0)
    rec = t.record(1)
    assert (rec.ready, rec.local_iters, rec.round, rec.last_finish) == (False, 0, 1, 1.0)
    with pytest.raises(ValueError):
        t.reset(1, 0, 2.0)


def test_bad_arguments():
    with pytest.raises(ValueError):
        StateTable([])
    with pytest.raises(ValueError):
        StateTable([0, 0])
    with pytest.raises(ValueError):
        StateTable([0], epsilon=-1)
    t = table(2)
    with pytest.raises(KeyError):
        t.query(7, 1, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        t.query(0, -1, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        t.query(0, 1, float("nan"), 0.0, 0.0)


def test_find_slowest_tie_goes_to_lowest_rank():
    t = table(3)
    for r in range(3):
        t.query(r, 1, 1.0, 0.0, 0.0)
    assert find_slowest(t.records.values()).rank == 0


def test_devices_absent_from_a_restarted_state_server_are_not_waited_for():
    # After a restart only rank 1 (the slow one) registered again; ranks 0 and 2
    # are blocked in an aggregation that needs rank 1's push.
    t = table(3)
    assert t.query(1, 1, 2.0, last_finish=5.0, now=5.0) is False            # all count: 0, 2 unknown
    assert t.query(1, 2, 2.0, last_finish=7.0, now=7.0, among={1}) is True  # only the present count


# A timeline on the State Server's clock: every device pulls the global model at
# PULL and sends RESET at once; a message crosses a link one way in D seconds.
D, PULL = 0.02, 1.0
RTT = 2 * D


def test_the_slowest_devices_prediction_is_its_next_querys_arrival_not_a_round_trip_later():
    """The slowest device starts its iteration when it sends RESET (it does not wait
    for the answer) and reports that round trip; t_e + c is then its next query's
    arrival at the State Server, PULL + compute + D."""
    slow_compute, eps = 0.3, 0.01
    svc = StateService(2, epsilon=eps, now=0.0)
    for r in range(2):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r)
    svc.handle(m.Query(rank=1, seq=2, round=0, k=0, c=slow_compute + RTT, since_finish=0.0), 0.5, sender=1)
    svc.handle(m.Reset(rank=1, seq=3, round=1, want_stop=False, since_finish=RTT), PULL + D, sender=1)
    arrival = PULL + slow_compute + D
    assert rest_time(svc.table.record(1), PULL + D) == pytest.approx(arrival - (PULL + D))


def test_a_blocking_fast_device_stops_when_its_next_query_would_arrive_after_the_slowests():
    """With blocking queries a fast device's next query arrives c = compute + RTT
    after this one. It gets READY at the last query after which another iteration
    would end after the slowest device is ready; before, the slowest's finish was
    predicted one round trip late and the fast device ran one more iteration that
    the slowest then waited for."""
    slow_compute, fast_compute, eps = 0.3, 0.03, 0.01
    svc = StateService(2, epsilon=eps, now=0.0)
    for r in range(2):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r)
    svc.handle(m.Query(rank=1, seq=2, round=0, k=0, c=slow_compute + RTT, since_finish=0.0), 0.5, sender=1)
    for r in range(2):
        svc.handle(m.Reset(rank=r, seq=3, round=1, want_stop=False, since_finish=RTT), PULL + D, sender=r)
    slowest_ready = PULL + slow_compute + D
    c = fast_compute + RTT
    k, now = 0, PULL + fast_compute + D     # the first query's arrival
    while True:
        k += 1
        reply = svc.handle(m.Query(rank=0, seq=3 + k, round=1, k=k, c=c, since_finish=0.0), now, sender=0)
        if reply.ready:
            break
        now += c                            # the answer, the next iteration, the next query
    assert k == 4 and now < slowest_ready - eps < now + c   # a 5th iteration's query would come after the slowest's


def test_a_delayed_ack_device_counts_only_the_compute_it_has_left():
    """With delayed ACKs the querying device is already computing its next
    iteration: it reports the round trip it does not wait, so its own t_e + c is
    its next query's arrival and it keeps training while that comes before the
    slowest's (before, it was compared with c = compute + RTT and stopped one
    round trip early)."""
    slow_compute, fast_compute, eps = 1.0, 0.1, 0.01
    t = StateTable(range(2), epsilon=eps, now=0.0)
    t.query(1, 0, slow_compute + RTT, last_finish=0.5, now=0.5)
    t.reset(1, 1, finish_time=PULL + D - RTT)            # RESET received at PULL + D
    slowest_ready = PULL + slow_compute + D               # 2.02
    for now, ready in ((1.88, False), (1.92, True)):      # next queries at 1.98 and 2.02
        assert (now + fast_compute > slowest_ready - eps) is ready
        assert t.query(0, 5, fast_compute + RTT, last_finish=now - RTT, now=now) is ready
