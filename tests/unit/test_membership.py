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


def test_two_deaths_in_one_round_one_before_its_entry_one_after_its_push_leave_the_two_at_the_minimum():
    # rank 2 dies computing (the entry closes without it), rank 1 once it entered and pushed, before its done
    # (the round closes incomplete); 2 left, --min-workers 2: go on
    r = RoundRendezvous(range(4), min_workers=2)
    for rank in range(4):
        r.enter(rank, 2, rank)
    for rank in range(4):
        r.done(rank, 2, rank)
    for rank in (0, 1, 3):
        assert r.enter(rank, 3, rank) == []
    assert answers(r.depart(2, "died")) == {0: Entered(3, 3, 0), 1: Entered(3, 3, 0), 3: Entered(3, 3, 0)}
    assert r.done(0, 3, 0) == [] and r.done(3, 3, 3) == []
    assert answers(r.depart(1, "died")) == {0: Done(3, complete=False), 3: Done(3, complete=False)}
    r.enter(0, 4, 0)
    assert answers(r.enter(3, 4, 3)) == {0: Entered(4, 2, 0), 3: Entered(4, 2, 0)}
    assert [(e["rank"], e["round"]) for e in r.events] == [(2, 3), (1, 4)] and r.failed is None


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


def test_in_async_a_death_found_after_the_others_finished_still_fails_below_the_minimum():
    # no rounds: the survivor ended its own training (and waits at the end) before the heartbeat watch found
    # the death; the job still fell below its minimum, so the waiting survivor is failed
    r = RoundRendezvous(range(2), min_workers=2)
    assert r.finish(1, "f1") == []
    got = answers(r.depart(0, "died"))
    assert isinstance(got[1], TooFewWorkers) and "fewer than the job's minimum of 2" in got[1].message
    # with rounds the rule is as before: once nobody trains, a death fails nothing
    r = RoundRendezvous(range(2), min_workers=2)
    r.enter(0, 0, "a")
    r.enter(1, 0, "b")
    assert r.finish(1, "f1") == []
    assert answers(r.depart(0, "died")) == {1: Finished(chief=1)}   # (rank 1 takes over the chief's end)


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


# -- ESync on the rendezvous: the weighting's counts, Algorithm 2 over the devices present ----------
def test_the_entry_sums_the_members_count_vectors_and_drops_a_departed_ones():
    r = RoundRendezvous(range(3))
    r.enter(0, 0, "a", counts=(2.0, 32.0, 1.0))
    r.enter(2, 0, "c", counts=(9.0, 144.0, 1.0))
    r.depart(2, "died")   # its counts leave with it: the weights are over the members
    got = answers(r.enter(1, 0, "b", counts=(1.0, 16.0, 1.0)))
    assert got == {0: Entered(0, 2, 0, (3.0, 48.0, 2.0)), 1: Entered(0, 2, 0, (3.0, 48.0, 2.0))}
    r.done(0, 0, "a")
    r.done(1, 0, "b")
    # a round whose members sent none answers with none (localsgd)
    r.enter(0, 1, "a1")
    assert answers(r.enter(1, 1, "b1"))[0] == Entered(1, 2, 0, ())


def test_esync_stops_waiting_for_a_slowest_device_that_left_its_loop():
    from mxhet.control import messages as m
    from mxhet.control.server import StateService
    service = StateService(3)
    for rank in range(3):
        service.handle(m.Register(rank=rank, seq=1, slot=rank, signature="", round=0), now=0.0, sender=rank)
    # rank 2 is slow (1 s an iteration) and has not finished its iteration of round 0
    service.handle(m.Query(rank=1, seq=2, round=0, k=0, c=0.1, since_finish=0.0), now=0.0, sender=1)
    service.handle(m.Query(rank=2, seq=2, round=0, k=0, c=1.0, since_finish=0.0), now=0.0, sender=2)
    reply = service.handle(m.Query(rank=0, seq=2, round=0, k=1, c=0.1, since_finish=0.0), now=0.1, sender=0)
    assert not reply.ready and reply.slowest == 2
    # its script leaves the training loop: it waits for the final model, nobody waits for it
    assert service.handle(m.RoundFinish(rank=2, seq=3), now=0.2, sender=2) is None
    reply = service.handle(m.Query(rank=0, seq=3, round=0, k=2, c=0.1, since_finish=0.0), now=0.2, sender=0)
    assert reply.ready and reply.slowest != 2
    # the round closes over the two still training; their counts are summed
    assert service.handle(m.RoundEnter(rank=0, seq=4, round=0, want_stop=False, counts=(2.0, 32.0, 1.0)),
                          now=0.3, sender=0) is None
    reply = service.handle(m.RoundEnter(rank=1, seq=3, round=0, want_stop=False, counts=(3.0, 48.0, 1.0)),
                           now=0.3, sender=1)
    assert (reply.target, tuple(reply.counts)) == (2, (5.0, 80.0, 2.0))
    assert [(r, tuple(late.counts)) for r, late in service.take_released()] == [(0, (5.0, 80.0, 2.0))]


def test_a_restarted_state_server_takes_every_worker_still_training_for_the_members_of_the_round_it_never_saw():
    # the workers entered round 4 and pushed; the State Server died before all were done,
    # and its successor gets their resent `done` first
    r = RoundRendezvous(range(3))
    assert r.done(1, 4, "b") == []
    assert r.done(0, 4, "a") == []
    assert answers(r.done(2, 4, "c")) == {0: Done(4, True), 1: Done(4, True), 2: Done(4, True)}
    with pytest.raises(ValueError, match="not a member"):   # only then: a later stray done is an error
        r.done(0, 7, "x")


def test_a_state_server_restarted_while_workers_wait_in_the_rendezvous_lets_the_last_one_aggregate():
    from mxhet.control import messages as m
    from mxhet.control.server import StateService
    # The fresh State Server after a restart mid-round 3: ranks 0 and 1 had been told READY and wait in the
    # round's rendezvous; they register again and re-enter. Rank 2, the slow one, goes on querying.
    service = StateService(3)
    for rank in range(3):
        service.handle(m.Register(rank=rank, seq=1, slot=rank, signature="", round=3), now=0.0, sender=rank)
    for rank in (0, 1):
        assert service.handle(m.RoundEnter(rank=rank, seq=2, round=3, want_stop=False), now=0.0, sender=rank) is None
    # ranks 0 and 1 never query again in round 3 (they report no capability): rank 2 must not wait for them
    reply = service.handle(m.Query(rank=2, seq=2, round=3, k=1, c=0.4, since_finish=0.0), now=0.4, sender=2)
    assert reply.ready
    reply = service.handle(m.RoundEnter(rank=2, seq=3, round=3, want_stop=False), now=0.5, sender=2)
    assert reply.target == 3


def test_a_worker_that_rejoins_takes_part_from_the_next_round_boundary_and_blocks_no_round_under_way():
    r = RoundRendezvous(range(3))
    for rank in range(3):
        r.enter(rank, 0, rank)
    r.depart(2, "died")
    r.done(0, 0, 0)
    r.done(1, 0, 1)
    r.enter(0, 1, 0)                 # round 1 is under way when rank 2 comes back ...
    assert r.join(2) == 2            # ... so it takes part from round 2
    with pytest.raises(ValueError, match="rejoined from round 2"):
        r.enter(2, 1, "late")
    # round 1 closes over the two that were there: it never waits for the one that came back
    assert answers(r.enter(1, 1, 1)) == {0: Entered(1, 2, 0), 1: Entered(1, 2, 0)}
    r.done(0, 1, 0)
    r.done(1, 1, 1)
    # round 2 waits for it as for any member
    r.enter(0, 2, 0)
    assert r.enter(1, 2, 1) == []
    assert answers(r.enter(2, 2, 2)) == {rank: Entered(2, 3, 0) for rank in range(3)}
    stats = r.stats()
    assert stats["joins"] == [{"rank": 2, "cause": "restarted", "round": 2}]
    assert stats["members"] == {"0": [0, 1, 2], "1": [0, 1], "2": [0, 1, 2]}


def test_a_rejoined_worker_is_waited_for_at_the_end_and_can_die_again():
    r = RoundRendezvous(range(2))
    r.depart(1, "died")
    assert r.join(1) == 0            # no round entered yet: it takes part from the first
    r.enter(0, 0, 0)
    assert answers(r.depart(1, "died")) == {0: Entered(0, 1, 0)}
    assert r.join(1) == 1
    assert r.finish(0, "f0") == []   # the job's final model waits for the worker back in training
    assert answers(r.finish(1, "f1")) == {0: Finished(), 1: Finished()}


def test_only_a_worker_that_left_can_rejoin():
    r = RoundRendezvous(range(2))
    with pytest.raises(ValueError, match="never left"):
        r.join(0)
    with pytest.raises(ValueError, match="not one of the job's ranks"):
        r.join(5)


def test_a_rejoining_worker_is_never_sent_back_to_a_round_its_record_has_passed():
    """The State Server passes the round the rank's Algorithm 2 record is at: with no
    round entered yet (an esync job between RESETs), the next boundary is that round,
    not round 0 (a reset backwards was refused half-way through a registration)."""
    r = RoundRendezvous(range(2))
    r.depart(1, "bye")
    assert r.join(1, not_before=3) == 3
    r.depart(1, "died")
    r.enter(0, 4, 0)
    assert r.join(1, not_before=3) == 5   # the boundary after the round under way wins when later


def test_every_finish_barrier_names_the_lowest_rank_still_in_the_job_for_the_chiefs_duties():
    from mxhet.control.membership import summary_rank
    r = RoundRendezvous(range(3))
    for rank in range(3):
        r.enter(rank, 0, rank)
    # the chief (rank 0) dies in round 0's exchange; the survivors finish the round and the job
    r.done(1, 0, "b")
    r.done(2, 0, "c")
    assert answers(r.depart(0, "died")) == {1: Done(0, False), 2: Done(0, False)}
    r.finish(1, "f1")
    assert answers(r.finish(2, "f2")) == {1: Finished(1), 2: Finished(1)}
    # the second barrier (after the worker files) names rank 1 again, on every survivor
    r.finish(2, "g2")
    assert answers(r.finish(1, "g1")) == {1: Finished(1), 2: Finished(1)}
    assert summary_rank(range(3), set()) == 0 and summary_rank(range(3), {0, 1}) == 2
    assert summary_rank(range(2), {0, 1}) is None


def test_a_chief_that_dies_at_the_last_barrier_is_replaced_before_anyone_is_released():
    r = RoundRendezvous(range(3))
    for rank in range(3):
        assert r.finish(rank, rank) == [] or rank == 2
    # the second barrier: ranks 1 and 2 wait for the chief, which dies before it gets there
    assert r.finish(2, "g2") == [] and r.finish(1, "g1") == []
    assert answers(r.depart(0, "died")) == {1: Finished(1), 2: Finished(1)}


def test_the_state_server_names_the_chief_in_the_finish_reply():
    from mxhet.control import messages as m
    from mxhet.control.server import StateService
    service = StateService(2, rules=("membership",))
    for rank in range(2):
        service.handle(m.Register(rank=rank, seq=1, slot=rank, signature="", round=0), now=0.0, sender=rank)
    service.handle(m.Bye(rank=0, seq=2), now=0.1, sender=0)   # rank 0 is gone (a goodbye, as good as a death)
    reply = service.handle(m.RoundFinish(rank=1, seq=2), now=0.2, sender=1)
    assert isinstance(reply, m.FinishedReply) and reply.chief == 1


def test_a_non_member_waiting_for_a_round_is_answered_once_every_member_is_done():
    # ESync's --late-memory keeper that was no member of the round a late delta entered waits for it
    r = RoundRendezvous(range(3))
    r.name(0, {0, 1})
    r.enter(0, 0, "a")
    r.enter(1, 0, "b")
    assert r.wait(2, 0, "w") == []          # entry closed, no push in yet
    assert r.done(0, 0, "a") == []
    got = r.done(1, 0, "b")
    assert [(rank, token) for rank, token, _ in got] == [(0, "a"), (1, "b"), (2, "w")]
    assert set(answers(got).values()) == {Done(0, complete=True)}
    # a round that is over, or one this rendezvous never saw (a State Server restarted since), is answered at once
    assert r.wait(2, 0, "w2") == [(2, "w2", Done(0, complete=True))]
    assert r.wait(2, 7, "w3") == [(2, "w3", Done(7, complete=True))]


def test_a_wait_for_a_round_whose_member_died_says_it_is_incomplete():
    r = RoundRendezvous(range(3))
    r.name(0, {0, 1})
    r.enter(0, 0, "a")
    r.enter(1, 0, "b")
    r.done(0, 0, "a")
    assert r.wait(2, 0, "w") == []
    got = r.depart(1, "died")
    assert answers(got) == {0: Done(0, complete=False), 2: Done(0, complete=False)}
    assert r.wait(0, 0, "x") == [(0, "x", Done(0, complete=False))]


def test_a_wait_for_a_round_nobody_pushed_to_before_every_member_died_is_answered_at_once():
    r = RoundRendezvous(range(3), min_workers=1)
    r.name(0, {1})
    r.enter(1, 0, "b")
    r.depart(1, "died")
    assert r.wait(0, 0, "w") == [(0, "w", Done(0, complete=False))]


def test_a_failed_job_fails_the_waiters_too():
    r = RoundRendezvous(range(2), min_workers=2)
    r.name(0, {0})
    r.enter(0, 0, "a")
    assert r.wait(1, 0, "w") == []
    got = r.depart(0, "died")
    assert {rank for rank, _, answer in got if isinstance(answer, TooFewWorkers)} == {1}
