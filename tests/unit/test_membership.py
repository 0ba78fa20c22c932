"""The round rendezvous (mxhet.control.membership): who takes part in each
synchronous round when workers leave their loop or die."""
import pytest

from mxhet.control.membership import Done, Entered, Finished, RoundRendezvous, TooFewWorkers


def answers(releases):
    return {rank: answer for rank, _, answer in releases}


def test_a_round_closes_once_every_training_worker_entered():
    r = RoundRendezvous(range(3))
    assert r.enter(0, 0, "a") == []
    assert r.enter(1, 0, "b", ballot=True) == []
    got = r.enter(2, 0, "c")
    assert [(rank, token) for rank, token, _ in got] == [(0, "a"), (1, "b"), (2, "c")]
    assert set(answers(got).values()) == {Entered(0, 3, 1)}
    assert r.done(0, 0, "a") == [] and r.done(1, 0, "b") == []
    assert set(answers(r.done(2, 0, "c")).values()) == {Done(0, complete=True)}


def test_a_worker_that_left_its_loop_is_not_waited_for_and_gets_the_final_model_last():
    r = RoundRendezvous(range(3))
    r.enter(0, 0, "a")
    r.enter(1, 0, "b")
    # rank 2's script stopped calling step(): it finishes instead of entering round 0
    got = r.finish(2, "f2")
    assert answers(got) == {0: Entered(0, 2, 0), 1: Entered(0, 2, 0)}
    r.done(0, 0, "a")
    assert answers(r.done(1, 0, "b")) == {0: Done(0, True), 1: Done(0, True)}
    assert r.enter(0, 1, "a1") == []
    assert answers(r.enter(1, 1, "b1", ballot=True)) == {0: Entered(1, 2, 1), 1: Entered(1, 2, 1)}
    r.done(0, 1, "a1")
    r.done(1, 1, "b1")
    assert r.finish(0, "f0") == []
    # the last worker to stop training releases everyone waiting for the final model
    assert answers(r.finish(1, "f1")) == {0: Finished(), 1: Finished(), 2: Finished()}


def test_a_member_that_dies_after_the_entry_makes_the_round_incomplete_but_not_stuck():
    r = RoundRendezvous(range(3))
    for rank in range(3):
        r.enter(rank, 0, rank)
    r.done(0, 0, 0)
    r.done(1, 0, 1)
    got = r.depart(2, "died")
    assert answers(got) == {0: Done(0, complete=False), 1: Done(0, complete=False)}
    # the next round has two members
    r.enter(0, 1, 0)
    assert answers(r.enter(1, 1, 1)) == {0: Entered(1, 2, 0), 1: Entered(1, 2, 0)}
    assert r.stats()["departures"] == [{"rank": 2, "cause": "died", "round": None}]


def test_a_worker_dying_while_others_wait_at_the_entry_releases_them():
    r = RoundRendezvous(range(3))
    r.enter(0, 4, 0)
    r.enter(1, 4, 1)
    assert answers(r.depart(2, "died")) == {0: Entered(4, 2, 0), 1: Entered(4, 2, 0)}
    assert r.stats()["departures"][0]["round"] == 4


def test_falling_below_the_minimum_fails_every_waiting_worker_and_every_later_request():
    r = RoundRendezvous(range(3), min_workers=2)
    r.enter(0, 0, "a")
    got = r.depart(1, "died")
    assert got == []   # two still train: enough
    got = r.depart(2, "died")
    assert [rank for rank, _, _ in got] == [0]
    failure = got[0][2]
    assert isinstance(failure, TooFewWorkers) and "fewer than the job's minimum of 2" in failure.message
    assert answers(r.enter(0, 1, "again")) == {0: failure}


def test_goodbyes_and_finishing_never_count_against_the_minimum():
    r = RoundRendezvous(range(2), min_workers=2)
    assert r.finish(0, "f0") == []
    assert answers(r.finish(1, "f1")) == {0: Finished(), 1: Finished()}
    r2 = RoundRendezvous(range(2), min_workers=2)
    assert r2.depart(0, "bye") == []
    assert r2.failed is None


def test_a_second_finish_is_a_barrier_over_the_workers_still_in_the_job():
    r = RoundRendezvous(range(3))
    r.finish(0, 1)
    r.finish(1, 1)
    assert len(r.finish(2, 1)) == 3
    assert r.finish(0, 2) == []
    assert r.finish(1, 2) == []
    assert answers(r.depart(2, "died")) == {0: Finished(), 1: Finished()}


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_min_workers_is_checked(bad):
    with pytest.raises(ValueError, match="min_workers"):
        RoundRendezvous(range(2), min_workers=bad)


def test_protocol_errors_are_refused():
    r = RoundRendezvous(range(2))
    r.enter(0, 0, "a")
    with pytest.raises(ValueError, match="twice"):
        r.enter(0, 0, "a")
    with pytest.raises(ValueError, match="not a member"):
        r.done(1, 0, "b")
    r.finish(1, "f")
    with pytest.raises(ValueError, match="no longer trains"):
        r.enter(1, 1, "b")
