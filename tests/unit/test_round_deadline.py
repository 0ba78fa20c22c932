"""ESync's round deadline (mxhet.policy.deadline) and its State Server rule (ESyncRule, round_deadline)."""
import math

import pytest

from mxhet.control import messages as m
from mxhet.control.server import StateService
from mxhet.errors import ConfigError
from mxhet.policy.deadline import (RoundBook, check_deadline, check_round_length, min_local_iters, staleness_weight,
                                   training_start, waited)


# -- the pure rule ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0.5, -1, math.inf, math.nan, "2", True])
def test_a_deadline_below_one_or_not_a_number_is_refused_naming_it(bad):
    with pytest.raises(ConfigError, match="round_deadline"):
        check_deadline(bad)


def test_zero_is_off_and_one_or_more_is_a_multiple():
    assert check_deadline(0) == 0.0 and check_deadline(4) == 4.0


def test_a_round_waits_for_the_devices_within_the_multiple_of_the_fastest():
    caps = {0: 0.01, 1: 0.012, 2: 1.17, 3: 0.039}   # 117x: rank 2 is late at D = 4
    assert waited(caps, 4.0) == {0, 1, 3}
    assert waited(caps, 3.0) == {0, 1}
    assert waited(caps, 117.0) == {0, 1, 2, 3}        # a bound above the slowdown: Algorithm 2's rounds
    assert waited(caps, 0.0) == {0, 1, 2, 3}          # off


def test_a_device_not_measured_yet_is_waited_for():
    assert waited({0: 0.01, 1: math.inf, 2: None}, 2.0) == {0, 1, 2}
    assert waited({0: math.inf, 1: math.inf}, 2.0) == {0, 1}


def test_a_test_batch_running_past_the_bound_is_late_before_it_reports():
    caps = {0: 0.01, 1: math.inf}
    assert waited(caps, 4.0, {1: 0.03}) == {0, 1}
    assert waited(caps, 4.0, {1: 0.05}) == {0}


def test_running_time_counts_from_the_first_test_batch_only_when_it_began_long_after_the_server():
    # the simulator: the test batch begins one registration round trip (0.002 s) after the State Server's
    # start and its c (0.01 s + that round trip) includes it: the State Server's start stays the origin
    assert training_start(0.0, 0.001 + 0.012, 0.012) == 0.0
    assert training_start(0.0, 0.024, 0.012) == 0.0            # began exactly one c after: still the origin
    # the cluster: the workers' test batches began 6.6 s after the State Server (start-up, data, PS-LITE)
    assert training_start(0.0, 6.8, 0.2) == pytest.approx(6.6)
    assert training_start(100.0, 106.8, 0.2) == pytest.approx(106.6)


def test_the_staleness_weight_is_one_over_one_plus_the_rounds_missed():
    assert [staleness_weight(s) for s in (0, 1, 3)] == [1.0, 0.5, 0.25]
    with pytest.raises(ValueError, match="staleness"):
        staleness_weight(-1)


def test_a_late_delta_enters_the_open_round_with_its_staleness_and_shares_sum_to_one():
    book = RoundBook()
    assert book.arrive(2, base_round=1, open_round=4) == 4
    closed = book.close(4, on_time=[0, 1])
    assert closed.late == {2: 3} and closed.target == 3
    # a = 1, 1, 1/4: shares 4/9, 4/9, 1/9 of the combined delta
    assert closed.members == pytest.approx({0: 4 / 9, 1: 4 / 9, 2: 1 / 9})
    assert sum(closed.members.values()) == pytest.approx(1.0)
    assert book.due(2) is None


def test_a_late_delta_arriving_after_its_round_closed_enters_the_next():
    book = RoundBook()
    book.close(4, on_time=[0, 1])
    assert book.arrive(2, base_round=3, open_round=4) == 5
    assert book.membership(4).late == {}
    assert book.close(5, on_time=[0, 1]).late == {2: 2}


def test_a_late_delta_is_applied_exactly_once():
    book = RoundBook()
    book.arrive(2, base_round=0, open_round=3)
    with pytest.raises(ValueError, match="already due"):
        book.arrive(2, base_round=0, open_round=3)
    first = book.close(3, on_time=[0])
    assert book.close(3, on_time=[0, 1]) is first          # closing again changes nothing
    assert 2 not in book.close(4, on_time=[0]).members       # not folded in a second time


def test_a_departed_late_device_is_not_waited_for_in_its_round():
    book = RoundBook()
    book.arrive(2, base_round=0, open_round=1)
    book.forget(2)
    assert book.close(1, on_time=[0, 1]).members == {0: 0.5, 1: 0.5}


# -- the State Server's rule ----------------------------------------------------------------------


def _service(deadline, n=3, **options):
    svc = StateService(n, now=0.0, rules=("esync", "membership"), round_deadline=deadline, epsilon=0.0, **options)
    for r in range(n):
        assert svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    return svc


def _q(svc, rank, seq, round_, k, c, now):
    return svc.handle(m.Query(rank=rank, seq=seq, round=round_, k=k, c=c, since_finish=0.0), now, sender=rank)


def _reset(svc, rank, seq, round_, now):
    return svc.handle(m.Reset(rank=rank, seq=seq, round=round_, want_stop=False, since_finish=0.0), now, sender=rank)


def _test_batches(svc, caps):
    for r, c in caps.items():
        assert not _q(svc, r, 2, 0, 0, c, 0.0).ready


def test_the_rule_refuses_a_bad_deadline():
    with pytest.raises(ConfigError, match="round_deadline"):
        StateService(2, rules=("esync", "membership"), round_deadline=0.5)


def test_fast_devices_close_rounds_without_the_late_one_which_enters_a_later_round():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})   # 117x
    rule = svc.rule("esync")
    assert rule.waited_ranks(0.0) == {0, 1}
    seq = 3
    # the fast devices aggregate round after round; the paper's rule would say NOT-READY (the slowest not ready)
    for t in range(5):
        now = 0.01 * (t + 1)
        a = _q(svc, 0, seq, t, 1, 0.01, now)
        b = _q(svc, 1, seq, t, 1, 0.01, now)
        assert a.ready and b.ready and a.round == b.round == t
        assert a.target == b.target == 2 and a.weight == b.weight == 0.5
        _reset(svc, 0, seq + 1, t + 1, now)
        _reset(svc, 1, seq + 1, t + 1, now)
        seq += 2
    # the late device ends its iteration (from round 0's model) while the others are in round 5: deferred
    assert _q(svc, 2, 3, 0, 1, 1.17, 1.17) is None
    assert rule.book.due(2) == 5
    a = _q(svc, 0, seq, 5, 1, 0.01, 1.18)
    assert a.ready and a.round == 5 and a.target == 3
    # staleness 5: a = 1/6; shares 6/13, 6/13, 1/13
    assert a.weight == pytest.approx(6 / 13)
    (rank, late), = svc.released
    assert rank == 2 and late.ready and late.round == 5 and late.target == 3
    assert late.weight == pytest.approx(1 / 13)
    assert rule.stats()[5]["late"] == {"2": 5}
    # the late device pulls round 5's model and goes on from round 6, as the others do
    svc.released.clear()
    _reset(svc, 2, 4, 6, 1.19)
    assert _q(svc, 2, 5, 6, 1, 1.17, 2.36) is None and rule.book.due(2) == 6


def test_the_first_round_does_not_wait_for_a_test_batch_past_the_bound():
    svc = _service(4.0)
    for r in (0, 1):
        assert not _q(svc, r, 2, 0, 0, 0.01, 0.01).ready
    # rank 2's test batch has run 0.02 s (< 4 x 0.01): waited for; at 0.05 s it is late
    assert not _q(svc, 0, 3, 0, 1, 0.01, 0.02).ready
    assert _q(svc, 0, 4, 0, 2, 0.01, 0.05).ready and _q(svc, 1, 3, 0, 1, 0.01, 0.05).ready


def test_a_test_batch_reported_a_moment_after_another_is_not_late_when_workers_start_after_the_server():
    """The cluster: the State Server starts 6.6 s before the workers (their start-up); their test batches
    begin together. Rank 1's is reported 0.3 s after rank 0's: it is waited for, while rank 2 (16x) is
    late once its test batch has run past D x 0.2 s since then."""
    svc = _service(4.0)
    assert not _q(svc, 0, 2, 0, 0, 0.2, 6.8).ready
    rule = svc.rule("esync")
    assert rule.waited_ranks(7.0) == {0, 1, 2}           # 0.4 s into the test batches: within 4 x 0.2
    assert not _q(svc, 0, 3, 0, 1, 0.2, 7.0).ready       # rank 1 not measured yet: the slowest, waited for
    assert not _q(svc, 1, 2, 0, 0, 0.2, 7.1).ready
    assert rule.waited_ranks(7.2) == {0, 1, 2}
    assert rule.waited_ranks(7.5) == {0, 1}               # rank 2's test batch has run 0.9 s > 0.8
    a, b = _q(svc, 0, 4, 0, 2, 0.2, 7.5), _q(svc, 1, 3, 0, 1, 0.2, 7.5)
    assert a.ready and b.ready and a.target == b.target == 2   # round 0 of the two fast devices, both on time


def test_without_a_deadline_the_rule_is_algorithm_2():
    svc = _service(0.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    a = _q(svc, 0, 3, 0, 1, 0.01, 0.01)
    assert not a.ready and a.slowest == 2 and a.target == 0 and a.weight == 0.0
    assert svc.rule("esync").book is None


def test_a_deadline_above_the_slowdown_waits_for_everyone():
    svc = _service(200.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    assert svc.rule("esync").waited_ranks(0.0) == {0, 1, 2}
    assert not _q(svc, 0, 3, 0, 1, 0.01, 0.01).ready


def test_a_late_device_is_told_to_stop_once_the_job_stopped_after_a_later_round():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    assert _q(svc, 0, 3, 0, 1, 0.01, 0.01).ready and _q(svc, 1, 3, 0, 1, 0.01, 0.01).ready
    svc.handle(m.Reset(rank=0, seq=4, round=1, want_stop=True, since_finish=0.0), 0.02, sender=0)
    reply = _q(svc, 2, 3, 0, 1, 1.17, 1.17)
    assert reply.stop and not reply.ready and svc.rule("esync").book.due(2) is None


def test_a_late_device_waiting_for_its_round_is_told_to_stop_when_the_job_stops():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    assert _q(svc, 0, 3, 0, 1, 0.01, 0.01).ready and _q(svc, 1, 3, 0, 1, 0.01, 0.01).ready
    assert _q(svc, 2, 3, 0, 1, 1.17, 1.17) is None   # deferred: its delta is due in round 1
    assert svc.rule("esync").book.due(2) == 1
    # the job agrees to stop after round 0: round 1 never closes, the deferred query is answered
    svc.handle(m.Reset(rank=0, seq=4, round=1, want_stop=True, since_finish=0.0), 1.18, sender=0)
    (rank, reply), = [(r, x) for r, x in svc.released if isinstance(x, m.QueryReply)]
    assert rank == 2 and reply.stop and not reply.ready and reply.seq == 3
    assert svc.rule("esync").book.due(2) is None


def _enter(svc, rank, seq, round_, now):
    return svc.handle(m.RoundEnter(rank=rank, seq=seq, round=round_, want_stop=False), now, sender=rank)


def test_the_round_rendezvous_waits_for_exactly_the_members_the_book_named():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    # round 0 of the on-time devices: its entry closes without the late rank 2, which still trains
    assert _q(svc, 0, 3, 0, 1, 0.01, 0.01).ready and _q(svc, 1, 3, 0, 1, 0.01, 0.01).ready
    assert _enter(svc, 0, 4, 0, 0.01) is None
    entered = _enter(svc, 1, 4, 0, 0.01)
    assert entered.target == 2 and [r for r, _ in svc.released] == [0]
    svc.released.clear()
    _reset(svc, 0, 5, 1, 0.02)
    _reset(svc, 1, 5, 1, 0.02)
    # rank 2's delta enters round 1: its entry waits for the three named members, rank 2 included
    assert _q(svc, 2, 3, 0, 1, 1.17, 1.17) is None
    a = _q(svc, 0, 6, 1, 1, 0.01, 1.18)
    assert a.ready and a.target == 3
    assert _enter(svc, 0, 7, 1, 1.18) is None
    assert _q(svc, 1, 6, 1, 1, 0.01, 1.18).ready and _enter(svc, 1, 7, 1, 1.18) is None
    assert svc.rule("membership").rendezvous.named[1] == {0, 1, 2}
    assert _enter(svc, 2, 4, 1, 1.19).target == 3
    assert 1 not in svc.rule("membership").rendezvous.named


def test_a_named_member_that_dies_does_not_hold_its_round():
    from mxhet.control.membership import Entered, RoundRendezvous
    rv = RoundRendezvous(range(3))
    rv.name(4, {0, 2})
    assert rv.enter(0, 4, "a") == []
    releases = rv.depart(2, "died")
    assert releases == [(0, "a", Entered(4, 1, 0))]


def test_a_named_round_waits_for_no_other_rank_and_cannot_be_renamed():
    from mxhet.control.membership import RoundRendezvous
    rv = RoundRendezvous(range(3))
    rv.name(0, {0, 1})
    rv.name(0, [1, 0])   # again, the same ranks: nothing changes
    assert rv.enter(0, 0, "a") == []
    assert [r for r, _, _ in rv.enter(1, 0, "b")] == [0, 1]
    with pytest.raises(ValueError, match="round 1 was named"):
        rv.name(1, {0})
        rv.name(1, {0, 2})
    with pytest.raises(ValueError, match="after its entry closed"):
        rv.name(0, {0, 1, 2})
    with pytest.raises(ValueError, match="not all of the job's"):
        rv.name(2, {5})


def test_a_device_named_when_its_round_closed_aggregates_there_though_it_is_past_the_bound_since():
    svc = _service(2.0)
    _test_batches(svc, {0: 0.1, 1: 0.1, 2: 0.15})    # all within 2 x 0.1: round 0 waits for the three
    assert _q(svc, 0, 3, 0, 1, 0.1, 0.2).ready       # round 0 closes with ranks 0, 1, 2
    assert svc.rule("esync").book.membership(0).members == pytest.approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})
    _q(svc, 1, 3, 0, 1, 0.01, 0.2)                   # the fast devices speed up: rank 2 is past the bound now
    reply = _q(svc, 2, 3, 0, 1, 0.15, 0.25)
    assert reply.ready and reply.round == 0 and reply.target == 3 and reply.weight == pytest.approx(1 / 3)


def test_a_device_on_time_again_after_its_round_closed_without_it_enters_a_later_round():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    for r in (0, 1):
        assert _q(svc, r, 3, 0, 1, 0.01, 0.01).ready and _reset(svc, r, 4, 1, 0.02).round == 1
    # rank 2's iteration took 0.03 s (within 4 x 0.01), but round 0 closed without it: never READY for round 0
    assert _q(svc, 2, 3, 0, 1, 0.03, 0.05) is None
    assert svc.rule("esync").book.due(2) == 1
    # its delta waits for round 1, so round 1 does not wait for its next query (a deadlock): it closes with it
    a = _q(svc, 0, 5, 1, 1, 0.01, 0.06)
    assert a.ready and a.target == 3
    (rank, late), = svc.released
    assert rank == 2 and late.round == 1 and late.weight == pytest.approx(1 / 5)   # staleness 1: 1/2 of 1, 1


def test_a_late_device_left_alone_closes_its_rounds_alone():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    for r in (0, 1):
        assert _q(svc, r, 3, 0, 1, 0.01, 0.01).ready
    for r in (0, 1):   # the fast devices leave (died, or said goodbye)
        svc.handle(m.Bye(rank=r, seq=9), 0.5, sender=r)
    reply = _q(svc, 2, 3, 0, 1, 1.17, 1.17)
    assert reply.ready and reply.round == 1 and reply.target == 1 and reply.weight == 1.0


def test_a_device_that_left_its_loop_is_not_waited_for():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 0.02})
    svc.handle(m.RoundFinish(rank=2, seq=3), 0.01, sender=2)   # it stopped training, still connected
    assert svc.rule("esync").waited_ranks(0.02) == {0, 1}


def test_a_late_device_that_dies_while_its_delta_waits_is_released_from_its_round():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    for r in (0, 1):
        assert _q(svc, r, 3, 0, 1, 0.01, 0.01).ready and _reset(svc, r, 4, 1, 0.02).round == 1
    assert _q(svc, 2, 3, 0, 1, 1.17, 1.17) is None   # its delta waits for round 1
    svc.depart(2, "died")
    a = _q(svc, 0, 5, 1, 1, 0.01, 1.2)
    assert a.ready and a.target == 2 and a.weight == 0.5 and not svc.released
    # the round's rendezvous waits for the two on-time members only
    assert _enter(svc, 0, 6, 1, 1.2) is None
    assert _q(svc, 1, 5, 1, 1, 0.01, 1.2).ready and _enter(svc, 1, 6, 1, 1.2).target == 2


def test_a_late_device_started_again_enters_a_round_from_its_first_one_on():
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    svc.depart(2, "died")
    for r in (0, 1):
        assert _q(svc, r, 3, 0, 1, 0.01, 0.01).ready
    assert _enter(svc, 0, 4, 0, 0.01) is None and _enter(svc, 1, 4, 0, 0.01).target == 2
    # --max-restarts: rank 2 registers again while round 0 is under way; it takes part from round 1
    registered = svc.handle(m.Register(rank=2, seq=1, slot=2, incarnation=2), 0.5, sender="again")
    assert registered.ok and registered.round == 1
    assert not svc.handle(m.Query(rank=2, seq=2, round=1, k=0, c=1.17, since_finish=0.0, incarnation=2), 1.7,
                          sender="again").ready   # its test batch
    assert svc.handle(m.Query(rank=2, seq=3, round=1, k=1, c=1.17, since_finish=0.0, incarnation=2), 2.9,
                      sender="again") is None
    assert svc.rule("esync").book.due(2) == 1
    svc.released.clear()
    for r in (0, 1):
        _reset(svc, r, 5, 1, 3.0)
    a = _q(svc, 0, 6, 1, 1, 0.01, 3.01)
    assert a.ready and a.target == 3 and a.weight == pytest.approx(1 / 3)   # it trained from round 0's model
    (rank, late), = [(r, x) for r, x in svc.released if isinstance(x, m.QueryReply)]
    assert rank == 2 and late.round == 1 and late.weight == pytest.approx(1 / 3)


def test_the_cluster_engine_refuses_the_deadline_with_the_outer_momentum():
    from mxhet.config import WorkerConfig
    from mxhet.modes import get_mode
    with pytest.raises(ConfigError, match="round_deadline.*outer_optimizer"):
        get_mode("esync")(trainer=None, config=WorkerConfig(), round_deadline=4, outer_optimizer="nesterov")


# -- --round-length L -------------------------------------------------------------------------------


def test_the_fewest_local_iterations_are_l_times_the_fastest_over_ones_own_time():
    assert min_local_iters(4.0, 0.01, 0.01) == 4            # the fastest: L
    assert min_local_iters(4.0, 0.02, 0.01) == 2            # twice as slow: L / 2
    assert min_local_iters(4.0, 0.03, 0.01) == 1            # 4 / 3 rounds to 1
    assert min_local_iters(4.0, 0.1, 0.01) == 1             # slower than a round: its one iteration
    assert min_local_iters(8.0, 0.3, 0.1) == 3              # 8 x 0.1 / 0.3 = 2.67: the nearest count
    assert min_local_iters(4.0, 0.0101, 0.01) == 4          # a hair slower than the fastest: L too, not L - 1
    assert min_local_iters(4.0, 0.0115, 0.01) == 3          # 3.48
    assert min_local_iters(3.0, 0.5, 0.25) == 2             # 1.5: halves round up
    assert min_local_iters(4.5, 0.01, 0.01) == 5
    assert min_local_iters(0.0, 0.01, 0.01) == 1            # off
    assert min_local_iters(4.0, math.inf, 0.01) == 1        # not measured yet
    assert min_local_iters(4.0, 0.01, math.inf) == 1        # nobody measured yet


@pytest.mark.parametrize("bad", [0.5, -1, math.inf, math.nan, "2", True])
def test_a_round_length_below_one_or_not_a_number_is_refused_naming_it(bad):
    with pytest.raises(ConfigError, match="round_length"):
        check_round_length(bad, 4.0)


def test_a_round_length_without_a_deadline_is_refused_naming_both_flags():
    assert check_round_length(0, 0.0) == 0.0 and check_round_length(4, 4.0) == 4.0
    with pytest.raises(ConfigError, match="--round-length.*--round-deadline"):
        check_round_length(4, 0.0)
    with pytest.raises(ConfigError, match="--round-length.*--round-deadline"):
        StateService(3, rules=("esync", "membership"), round_length=4.0)
    from mxhet.protocol.programs import check_esync
    from mxhet.policy import specs
    opts = specs.ESYNC.resolve({"round_length": 4.0})
    with pytest.raises(ConfigError, match="--round-length.*--round-deadline"):
        check_esync(opts)
    check_esync(specs.ESYNC.resolve({"round_length": 4.0, "round_deadline": 4.0}))


def _length_service(deadline, length, n=3):
    svc = StateService(n, now=0.0, rules=("esync", "membership"), round_deadline=deadline, round_length=length,
                       epsilon=0.0)
    for r in range(n):
        assert svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    return svc


def test_fast_devices_do_l_local_iterations_a_round_and_the_late_delta_still_enters_with_its_share():
    svc = _length_service(4.0, 4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 0.1})   # 10x: rank 2 is late at D = 4
    rule, table = svc.rule("esync"), svc.table
    seq = 3
    for t in range(2):                                # rounds 0 and 1, each of 4 fast iterations
        start = 0.04 * t
        for k in (1, 2, 3):
            now = start + 0.01 * k
            a, b = _q(svc, 0, seq, t, k, 0.01, now), _q(svc, 1, seq, t, k, 0.01, now)
            assert not a.ready and not b.ready, (t, k)
            assert not table.records[0].ready and not table.records[1].ready
            seq += 1
        now = start + 0.04
        a, b = _q(svc, 0, seq, t, 4, 0.01, now), _q(svc, 1, seq, t, 4, 0.01, now)
        assert a.ready and b.ready and a.round == b.round == t and a.target == b.target == 2
        assert a.weight == b.weight == 0.5
        _reset(svc, 0, seq + 1, t + 1, now)
        _reset(svc, 1, seq + 1, t + 1, now)
        seq += 2
    # round 2 from 0.08: the late device ends its iteration (from round 0's model) at 0.1, deferred
    assert not _q(svc, 0, seq, 2, 1, 0.01, 0.09).ready
    assert _q(svc, 2, 3, 0, 1, 0.1, 0.1) is None and rule.book.due(2) == 2
    for k in (2, 3):
        assert not _q(svc, 0, seq + k, 2, k, 0.01, 0.08 + 0.01 * k).ready
    a = _q(svc, 0, seq + 4, 2, 4, 0.01, 0.12)
    # staleness 2: a = 1/3; shares 3/7, 3/7, 1/7
    assert a.ready and a.target == 3 and a.weight == pytest.approx(3 / 7)
    (rank, late), = svc.released
    assert rank == 2 and late.ready and late.round == 2 and late.weight == pytest.approx(1 / 7)
    assert [s["local_iters"] for s in rule.stats()] == [{"0": 4, "1": 4}, {"0": 4, "1": 4}, {"0": 4, "2": 1}]


def test_a_waited_device_of_twice_the_fastest_time_is_ready_after_half_the_iterations():
    svc = _length_service(4.0, 4.0)
    _test_batches(svc, {0: 0.01, 1: 0.02, 2: 0.1})
    assert svc.rule("esync").waited_ranks(0.0) == {0, 1}
    assert not _q(svc, 0, 3, 0, 1, 0.01, 0.01).ready
    assert not _q(svc, 1, 3, 0, 1, 0.02, 0.02).ready   # the slowest waited, 1 of its 2 iterations
    assert not svc.table.records[1].ready
    assert not _q(svc, 0, 4, 0, 2, 0.01, 0.02).ready
    assert not _q(svc, 0, 5, 0, 3, 0.01, 0.03).ready
    assert _q(svc, 1, 4, 0, 2, 0.02, 0.04).ready
    assert _q(svc, 0, 6, 0, 4, 0.01, 0.04).ready


def test_the_slowest_device_short_of_its_count_does_not_end_the_round_for_the_others():
    """The slowest device on time, short of its local iterations, is NOT-READY and not marked ready,
    and it is expected READY only after the iterations it still has to do: a device that has done its
    count goes on while it could finish another iteration before then."""
    svc = _length_service(4.0, 4.0, n=2)
    _test_batches(svc, {0: 0.01, 1: 0.01})   # rank 0 is the slowest (ties go to the lowest rank)
    # rank 1 began its round at 0.005, rank 0 at 0.02
    assert not _q(svc, 1, 3, 0, 1, 0.01, 0.015).ready
    assert not _q(svc, 1, 4, 0, 2, 0.01, 0.025).ready
    assert not _q(svc, 0, 3, 0, 1, 0.01, 0.03).ready
    assert not svc.table.records[0].ready
    assert not _q(svc, 1, 5, 0, 3, 0.01, 0.035).ready
    assert not _q(svc, 0, 4, 0, 2, 0.01, 0.04).ready
    # rank 1 has done its 4; rank 0 is READY after two more iterations (0.06), rank 1's next query is at 0.055
    assert not _q(svc, 1, 6, 0, 4, 0.01, 0.045).ready
    assert not _q(svc, 0, 5, 0, 3, 0.01, 0.05).ready
    assert _q(svc, 1, 7, 0, 5, 0.01, 0.055).ready      # its next query (0.065) would be after rank 0's READY
    assert _q(svc, 0, 6, 0, 4, 0.01, 0.06).ready


def test_a_member_of_a_closed_round_short_of_its_iterations_goes_on_to_its_count():
    svc = _length_service(4.0, 4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 0.1})
    for k in (1, 2, 3):
        assert not _q(svc, 0, 2 + k, 0, k, 0.01, 0.01 * k).ready
    assert _q(svc, 0, 6, 0, 4, 0.01, 0.04).ready                  # closes round 0 with ranks 0 and 1
    assert not _q(svc, 1, 3, 0, 3, 0.01, 0.045).ready             # rank 1 started late: 3 of its 4
    reply = _q(svc, 1, 4, 0, 4, 0.01, 0.055)
    assert reply.ready and reply.target == 2 and reply.weight == 0.5


def _script(svc):
    """A scripted job under D = 4: two fast devices, one 10x, queries at fixed times; every answer."""
    answers = []
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 0.1})
    seq = {0: 3, 1: 3, 2: 3}
    rounds, ks = {0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 0}
    for step in range(1, 13):
        now = 0.01 * step
        for r in (0, 1, 2):
            if r == 2 and step % 10:
                continue
            ks[r] += 1
            reply = _q(svc, r, seq[r], rounds[r], ks[r], 0.1 if r == 2 else 0.01, now)
            seq[r] += 1
            answers.append(None if reply is None else (reply.ready, reply.round, reply.target, reply.weight))
            if reply is not None and reply.ready and r != 2:
                rounds[r] = reply.round + 1
                ks[r] = 0
                _reset(svc, r, seq[r], rounds[r], now)
                seq[r] += 1
    answers.append(sorted((r, x.ready, x.round, x.weight) for r, x in svc.released))
    answers.append(svc.rule("esync").stats())
    return answers


@pytest.mark.parametrize("length", [0.0, 1.0])
def test_a_round_length_of_zero_or_one_answers_as_the_deadline_alone(length):
    plain = _script(_service(4.0))
    assert _script(_length_service(4.0, length)) == plain
    assert sum(1 for a in plain[:-2] if a is not None and a[0]) == 24   # the fast devices: READY every iteration


def test_a_device_no_member_of_a_round_can_wait_for_its_pushes_through_the_state_server():
    # --late-memory: a keeper that was no member of the round a late delta entered waits for that round
    # before it pulls the memory (pushed before the late device says done)
    svc = _service(4.0)
    _test_batches(svc, {0: 0.01, 1: 0.01, 2: 1.17})
    assert _q(svc, 0, 3, 0, 1, 0.01, 0.01).ready and _q(svc, 1, 3, 0, 1, 0.01, 0.01).ready
    enter = [svc.handle(m.RoundEnter(rank=r, seq=4, round=0, want_stop=False), 0.02, sender=r) for r in (0, 1)]
    assert enter[0] is None and enter[1].target == 2
    svc.released.clear()
    assert svc.handle(m.RoundWait(rank=2, seq=4, round=0), 0.03, sender=2) is None
    assert svc.handle(m.RoundDone(rank=0, seq=5, round=0), 0.04, sender=0) is None
    own = svc.handle(m.RoundDone(rank=1, seq=5, round=0), 0.05, sender=1)
    assert own.ready and own.round == 0
    released = {rank: reply for rank, reply in svc.released}
    assert set(released) == {0, 2} and released[2].ready and released[2].seq == 4
    # the round is over: a later wait is answered at once
    assert svc.handle(m.RoundWait(rank=2, seq=5, round=0), 0.06, sender=2).ready
