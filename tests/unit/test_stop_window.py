"""A worker started again while the others' last round is still open (``mxhet-launch --elastic
--max-restarts 1``): the rendezvous gives it the round after that one; once the open round agrees to
stop, its entry of any later round is answered ``over`` (mxhet.control.membership) -- it takes part in
nothing more, pushes nothing, takes the final model at the finish barrier, and the record counts it
late. The same under ESync, whose stop comes through the State Server's RESET (``stopping``)."""
import pytest

from mxhet.control import messages as m
from mxhet.control.membership import Entered, Finished, RoundRendezvous
from mxhet.control.server import StateService

OVER = {"over": True}


def answers(releases):
    return {rank: answer for rank, _, answer in releases}


def _last_round_open_with_rank_2_back():
    """Three ranks take part in round 0; rank 2 dies; rank 0 enters round 1 wanting to stop (the
    job's last round), and rank 2 comes back while round 1 is open: it is given round 2."""
    r = RoundRendezvous(range(3))
    for rank in range(3):
        r.enter(rank, 0, rank)
    for rank in range(3):
        r.done(rank, 0, rank)
    r.depart(2, "died", now=1.0)
    assert r.enter(0, 1, "e0", ballot=True) == []
    assert r.join(2, now=2.0) == 2
    return r


def _events(r):
    return [(e["event"], e["rank"], e["cause"], e["round"], e["t"]) for e in r.stats()["events"]]


def test_an_entry_after_the_agreed_stop_is_answered_over_and_no_round_is_held_for_it():
    r = _last_round_open_with_rank_2_back()
    # round 1 closes over the two that were there, and its ballot stops the job after it
    assert answers(r.enter(1, 1, "e1")) == {0: Entered(1, 2, 1), 1: Entered(1, 2, 1)}
    r.done(0, 1, "d0")
    r.done(1, 1, "d1")
    assert r.finish(0, "f0", now=3.0) == [] and r.finish(1, "f1", now=3.0) == []
    # without the rule its entry of round 2 would close at once with one member (a solo round)
    assert r.enter(2, 2, "e2", now=4.0) == [(2, "e2", Entered(2, 0, 0, **OVER))]
    assert 2 not in r.training and 2 not in r.gone
    # its finish comes next and closes the barrier: every rank takes the same final model
    assert answers(r.finish(2, "f2", now=4.1)) == {rank: Finished(0) for rank in range(3)}
    stats = r.stats()
    assert "2" not in stats["members"] and stats["rounds_by_rank"]["2"] == [0]
    assert _events(r) == [("leave", 2, "died", 1, 1.0), ("join", 2, "restarted", 2, 2.0),
                          ("late", 2, "restarted", None, 4.0)]
    # it trains no more: another entry is a protocol error, never a round
    with pytest.raises(ValueError, match="no longer trains"):
        r.enter(2, 3, "again")


def test_an_entry_made_before_the_last_round_closed_is_answered_over_when_it_closes():
    r = _last_round_open_with_rank_2_back()
    # rank 2 is quick: it enters round 2 before round 1's entry closed; round 2 waits for the others
    assert r.enter(2, 2, "e2", now=2.5) == []
    released = answers(r.enter(1, 1, "e1"))
    assert released == {0: Entered(1, 2, 1), 1: Entered(1, 2, 1), 2: Entered(2, 0, 0, **OVER)}
    assert r.stop_round == 1 and 2 not in r.training and not r.entries
    r.done(0, 1, "d0")
    r.done(1, 1, "d1")
    r.finish(0, "f0")
    r.finish(1, "f1")
    assert answers(r.finish(2, "f2")) == {rank: Finished(0) for rank in range(3)}
    assert "2" not in r.stats()["members"]
    assert _events(r)[-1] == ("late", 2, "restarted", None, None)


def test_esyncs_stop_from_reset_refuses_an_open_later_entry_and_every_later_one():
    # ESync's rounds carry no ballot: the stop is agreed by RESET, which the caller passes as ``stopping``
    r = RoundRendezvous(range(3))
    for rank in range(3):
        r.enter(rank, 0, rank)
    for rank in range(3):
        r.done(rank, 0, rank)
    r.depart(2, "died")
    r.enter(0, 1, "e0")
    assert r.join(2) == 2
    assert r.enter(2, 2, "e2") == []       # waits for the others, still training
    assert answers(r.enter(1, 1, "e1")) == {0: Entered(1, 2, 0), 1: Entered(1, 2, 0)}
    r.done(0, 1, "d0")
    r.done(1, 1, "d1")
    # round 1's RESET stopped the job: the first finish after it answers the open entry of round 2 over,
    # where without the rule round 2 would have closed with rank 2 alone once both others finished
    assert answers(r.finish(0, "f0", stopping=True)) == {2: Entered(2, 0, 0, **OVER)}
    assert r.finish(1, "f1", stopping=True) == []
    assert answers(r.finish(2, "f2")) == {rank: Finished(0) for rank in range(3)}
    assert [e["event"] for e in r.stats()["events"]] == ["leave", "join", "late"]   # no "left its loop"
    assert "2" not in r.stats()["members"]


def test_an_esync_entry_after_the_stop_is_answered_over_at_once():
    r = RoundRendezvous(range(2))
    r.enter(0, 0, "a")
    r.enter(1, 0, "b")
    r.depart(1, "died")
    assert r.join(1) == 1
    assert r.enter(1, 1, "late", stopping=True) == [(1, "late", Entered(1, 0, 0, **OVER))]
    assert r.over() and answers(r.finish(0, "f0")) == {}
    assert answers(r.finish(1, "f1")) == {0: Finished(0), 1: Finished(0)}


def test_a_stop_never_refuses_the_stop_round_itself():
    r = RoundRendezvous(range(3))
    r.enter(0, 0, "a", ballot=True)
    r.enter(1, 0, "b")
    assert answers(r.enter(2, 0, "c")) == {rank: Entered(0, 3, 1) for rank in range(3)}
    assert not [e for e in r.stats()["events"] if e["event"] == "late"]


def _register(service, rank, seq=1, round_=0):
    return service.handle(m.Register(rank=rank, seq=seq, slot=rank, signature="", round=round_, incarnation=seq),
                          now=0.0, sender=(rank, seq))


def test_the_state_server_answers_over_to_a_restarted_esync_worker_after_resets_stop():
    service = StateService(3, rules=("esync", "membership"))
    for rank in range(3):
        _register(service, rank)
    for rank in range(3):
        service.handle(m.RoundEnter(rank=rank, seq=2, incarnation=1, round=0, want_stop=False), now=0.5,
                       sender=(rank, 1))
    service.depart(2, "died (silent for over 3 s)")
    # rank 0 enters round 1, the job's last; rank 2 is started again meanwhile: it is given round 2
    assert service.handle(m.RoundEnter(rank=0, seq=3, incarnation=1, round=1, want_stop=False), now=1.0,
                          sender=(0, 1)) is None
    reply = _register(service, 2, seq=7)
    assert reply.ok and not reply.over and reply.round == 2
    service.handle(m.RoundEnter(rank=1, seq=3, incarnation=1, round=1, want_stop=False), now=1.1, sender=(1, 1))
    # round 1's RESET agrees to stop (ESync's rule); the restarted worker's entry of round 2 is refused
    stop = service.handle(m.Reset(rank=0, seq=4, incarnation=1, round=2, want_stop=True, since_finish=0.0),
                          now=1.2, sender=(0, 1))
    assert stop.stop
    entered = service.handle(m.RoundEnter(rank=2, seq=8, incarnation=7, round=2, want_stop=False), now=1.3,
                             sender=(2, 7))
    assert isinstance(entered, m.EnteredReply) and entered.over and entered.target == 0
    # its query of that round says stop too: it never pushes
    query = service.handle(m.Query(rank=2, seq=9, incarnation=7, round=2, k=1, c=0.1, since_finish=0.0), now=1.4,
                           sender=(2, 7))
    assert query.stop and not query.ready
    rendezvous = service.rule("membership").rendezvous
    assert [e["event"] for e in rendezvous.events] == ["leave", "join", "late"]
    assert rendezvous.events[-1]["slot"] == 2


# -- the worker programs (both engines run them): a refused round is never taken part in ------------------

def test_localsgd_stops_on_a_refused_round_without_counting_it():
    import types
    from mxhet.protocol import Exchange, Session, WantsStop, programs
    from mxhet.protocol.effects import JOB_OVER
    stats = types.SimpleNamespace(rounds=2, local_iters=[], rejoined_at_round=2)   # rejoined at round 2
    session = Session(programs.localsgd({"local_steps": 2}, stats))
    effect, exchanges = session.advance(), []
    while effect is not None:
        if isinstance(effect, Exchange):
            exchanges.append(effect)
            effect = session.advance(JOB_OVER)
        else:
            effect = session.advance(False if isinstance(effect, WantsStop) else None)
    assert [x.round for x in exchanges] == [2]
    assert stats.rounds == 2 and stats.local_iters == []


def test_esync_stops_on_a_refused_round_and_sends_no_reset():
    from mxhet.protocol import Session, programs
    from mxhet.protocol import effects as e
    from tests.unit.test_protocol import _esync_opts, _esync_stats, _EsyncScript
    stats = _esync_stats()
    script = _EsyncScript(stats, ready_at=2)
    trace = []
    session = Session(programs.esync(_esync_opts(ack="blocking"), stats), trace)
    effect = session.advance()
    while effect is not None:
        effect = session.advance(e.JOB_OVER if isinstance(effect, e.AggregateDeltas) else script(effect))
    effects = [effect for effect, _ in trace]
    assert [a.round for a in effects if isinstance(a, e.AggregateDeltas)] == [0]
    assert not any(isinstance(a, (e.SendReset, e.ResetOptimizer)) for a in effects)
    assert isinstance(effects[-1], e.AggregateDeltas) and stats.rounds == 0 and stats.local_iters == []


def test_an_esync_worker_back_whose_first_query_says_stop_is_recorded_late():
    service = StateService(2, rules=("esync", "membership"))
    for rank in range(2):
        _register(service, rank)
    for rank in range(2):
        service.handle(m.RoundEnter(rank=rank, seq=2, incarnation=1, round=0, want_stop=False), now=0.5,
                       sender=(rank, 1))
    service.depart(1, "died (silent for over 3 s)")
    reply = _register(service, 1, seq=7)
    assert reply.ok and not reply.over and reply.round == 1
    assert service.handle(m.Reset(rank=0, seq=3, incarnation=1, round=1, want_stop=True, since_finish=0.0),
                          now=1.0, sender=(0, 1)).stop
    query = service.handle(m.Query(rank=1, seq=8, incarnation=7, round=1, k=0, c=0.1, since_finish=0.0), now=1.1,
                           sender=(1, 7))
    assert query.stop and not query.ready
    rendezvous = service.rule("membership").rendezvous
    assert [e["event"] for e in rendezvous.events] == ["leave", "join", "late"] and 1 not in rendezvous.training
    # rank 0, which took part in the rounds, is told the same without being counted late
    query = service.handle(m.Query(rank=0, seq=4, incarnation=1, round=1, k=1, c=0.1, since_finish=0.0), now=1.2,
                           sender=(0, 1))
    assert query.stop and [e["event"] for e in rendezvous.events][-1] == "late" and len(rendezvous.events) == 3


# -- the cluster worker's side (mxhet.modes.rounds, mxhet.modes.program): nothing pushed on ``over`` ------------

class _RefusingClient:
    """A State Server client whose round entries are answered ``over`` (as StateClient sets job_over)."""
    job_over = False

    def round_enter(self, round_, want_stop=False, timeout=None):
        self.job_over = True
        return 0, 0


def test_the_cluster_worker_pushes_nothing_on_a_refused_round_and_notes_late(tmp_path):
    import types
    from mxhet.modes.liveness import PROGRESS_LATE
    from mxhet.modes.program import ProgramMode
    from mxhet.modes.rounds import RoundMembers
    from mxhet.protocol import Exchange, Payload
    from mxhet.protocol.effects import JOB_OVER

    class _NoDataPlane:
        def __getattr__(self, name):
            raise AssertionError("a refused round touched the data plane (%s)" % name)
    progress = tmp_path / "progress"
    mode = types.SimpleNamespace(client=_RefusingClient(), clock=lambda: 1.0, stats=types.SimpleNamespace(query_s=0.0),
                                 channel=types.SimpleNamespace(rank=2, push=_NoDataPlane()),
                                 config=types.SimpleNamespace(slot=2, progress_file=str(progress), test_kill_computing=""),
                                 aggregated=False, stopping=types.SimpleNamespace(ballot=lambda vote: ()))
    mode.exchange_deltas = lambda *a: RoundMembers.exchange_deltas(mode, *a)
    assert ProgramMode.carry_out(mode, Exchange(Payload.DELTAS, 5, 1.0)) is JOB_OVER
    assert mode.late_restart and not mode.aggregated and progress.read_text() == PROGRESS_LATE
