"""The record of an elastic job's leaves and joins (mxhet.control.membership's events and
job_events, the State Server's MembershipRecord, the launcher's exit record, the live view)."""
import json

from mxhet.control import membership
from mxhet.control import messages as m
from mxhet.control import wire
from mxhet.control.membership import RoundRendezvous, job_events, rounds_as_ranges
from mxhet.control.server import StateService
from mxhet.launcher.watch import exit_cause
from mxhet.observe.live import build_state, write_events
from tests.unit.test_launcher_watch import job, watch


def _round(r, round_, ranks, ballot=False):
    for rank in ranks:
        r.enter(rank, round_, "e%d" % rank, ballot=ballot and rank == ranks[0])
    for rank in ranks:
        r.done(rank, round_, "d%d" % rank)


def test_the_rendezvous_records_a_death_a_rejoin_and_a_worker_that_left_its_loop_with_their_rounds():
    r = RoundRendezvous(range(3))
    _round(r, 0, [0, 1, 2])
    _round(r, 1, [0, 1, 2])
    r.enter(0, 2, "a")
    r.depart(2, "died (silent for over 5 s)", now=12.5)   # rank 2 was in rounds 0 and 1
    r.enter(1, 2, "b")
    r.done(0, 2, "a"), r.done(1, 2, "b")
    assert r.join(2, now=20.0) == 3
    _round(r, 3, [0, 1, 2])
    r.finish(1, "f1", now=30.0)   # rank 1 leaves its loop: no stop was agreed
    _round(r, 4, [0, 2], ballot=True)   # the job agrees to stop after round 4
    r.finish(0, "f0", now=40.0), r.finish(2, "f2", now=40.0)   # ordinary ends: no leave
    r.depart(0, "bye", now=41.0)   # a goodbye after the end is not a leave either
    events = r.stats()["events"]
    assert events == [
        {"event": "leave", "rank": 2, "cause": "died (silent for over 5 s)", "round": 2, "t": 12.5},
        {"event": "join", "rank": 2, "cause": "restarted", "round": 3, "t": 20.0},
        {"event": "leave", "rank": 1, "cause": "left its loop", "round": 4, "t": 30.0}]
    assert r.stats()["rounds_by_rank"] == {"0": [0, 1, 2, 3, 4], "1": [0, 1, 2, 3], "2": [0, 1, 3, 4]}


def test_job_events_take_the_launchers_cause_for_a_death_it_saw_and_a_heartbeat_timeout_otherwise():
    record = {"slots": {"0": 0, "1": 2, "2": 1},
              "events": [{"event": "leave", "rank": 1, "cause": "died (silent for over 5 s)", "round": 7, "t": 1006.0},
                         {"event": "join", "rank": 1, "cause": "restarted", "round": 12, "t": 1010.0},
                         {"event": "leave", "rank": 2, "cause": "died (silent for over 5 s)", "round": 15,
                          "t": 1020.0},
                         {"event": "leave", "rank": 0, "cause": "left its loop", "round": 20, "t": 1030.0}],
              "rounds_by_rank": {"0": list(range(20)), "1": list(range(7)) + list(range(12, 25)),
                                 "2": list(range(15))}}
    # slot 2 (rank 1) was seen killed 5 s before the State Server counted it; slot 1 died unseen (e.g. remote)
    exits = [{"slot": 2, "cause": "killed by signal 9 (SIGKILL)", "unix": 1001.0}]
    got = job_events(record, exits, origin=1000.0)
    assert got["events"] == [
        {"t_s": 1.0, "event": "leave", "slot": 2, "rank": 1, "round": 7, "cause": "killed by signal 9 (SIGKILL)"},
        {"t_s": 10.0, "event": "join", "slot": 2, "rank": 1, "round": 12, "cause": "restarted"},
        {"t_s": 20.0, "event": "leave", "slot": 1, "rank": 2, "round": 15, "cause": "heartbeat timeout"},
        {"t_s": 30.0, "event": "leave", "slot": 0, "rank": 0, "round": 20, "cause": "left its loop"}]
    assert got["rounds_by_slot"] == {"0": [[0, 19]], "1": [[0, 14]], "2": [[0, 6], [12, 24]]}
    # an exit the State Server never counted (it had finished training) is listed without a round
    late = job_events({"slots": {"0": 0}, "events": []}, [{"slot": 0, "cause": "exit code 3", "unix": 1005.0}], 1000.0)
    assert late["events"] == [{"t_s": 5.0, "event": "leave", "slot": 0, "rank": 0, "round": None,
                               "cause": "exit code 3"}]


def test_a_finish_after_a_stop_agreed_elsewhere_is_no_leave():
    # ESync's rounds carry no ballot: its RESET decides the stop, the State Server's rule says so
    r = RoundRendezvous(range(2))
    _round(r, 0, [0, 1])
    r.finish(0, "f0", now=1.0, stopping=True)
    r.finish(1, "f1", now=1.0, stopping=True)
    assert r.stats()["events"] == []


def test_rounds_as_ranges():
    assert rounds_as_ranges([5, 0, 1, 2, 6, 9]) == [[0, 2], [5, 6], [9, 9]]
    assert rounds_as_ranges([]) == []


def test_the_state_server_sends_the_membership_record_in_pages_with_the_slots(monkeypatch):
    svc = StateService(2, now=0.0, rules=("membership",))
    for rank, slot in ((0, 1), (1, 0)):
        assert svc.handle(m.Register(rank=rank, seq=1, slot=slot), 0.0, sender=rank).ok
    svc.rule("membership").wall_clock = lambda: 123.0
    svc.depart(1, "died (silent for over 5 s)")
    monkeypatch.setattr(wire, "RECORD_PAGE", 40)
    text, seq = "", 2
    while True:
        reply = svc.handle(m.MembershipRecord(rank=0, seq=seq, start=len(text)), 1.0, sender=0)
        assert reply.ok
        text += reply.payload
        seq += 1
        if len(text) >= reply.total:
            break
    record = json.loads(text)
    assert record["slots"] == {"0": 1, "1": 0}
    assert record["events"] == [{"event": "leave", "rank": 1, "cause": "died (silent for over 5 s)",
                                 "round": None, "t": 123.0, "slot": 0}]   # no round entered yet


def test_the_watch_records_each_departure_once_and_a_death_restarted_at_once():
    w = watch(elastic=True)
    w.decide(job(None, -9, None), 4.0)
    w.decide(job(None, -9, None), 5.0)
    assert w.departures == [(4, 4.0)]   # index 4: after the scheduler, the server and the State Server
    r = watch(elastic=True, worker_restarts=1, worker_restart_delay=0.0)
    assert r.decide(job(None, -9, None), 7.0).action == "restart"
    assert r.departures == [(4, 7.0)]
    assert exit_cause(-9) == "killed by signal 9 (SIGKILL)" and exit_cause(3) == "exit code 3"


def test_the_live_view_shows_who_left_and_who_came_back(tmp_path):
    devices = [{"slot": s, "host": "127.0.0.1", "context": "cpu", "slowdown": 1.0} for s in range(3)]
    write_events(str(tmp_path), [{"t_s": 3.0, "event": "leave", "slot": 1, "cause": "killed by signal 9 (SIGKILL)"},
                                 {"t_s": 4.0, "event": "leave", "slot": 2, "cause": "exit code 1"},
                                 {"t_s": 9.0, "event": "join", "slot": 1, "cause": "restarted"}])
    state = build_state(devices, str(tmp_path))
    assert state["job"]["present"] == 2 and len(state["job"]["events"]) == 3
    by_slot = {d["slot"]: d for d in state["devices"]}
    assert by_slot[1]["present"] and (by_slot[1]["left"], by_slot[1]["joined"]) == (1, 1)
    assert not by_slot[2]["present"] and by_slot[2]["phase"] == "left (exit code 1)"
    assert build_state(devices, "")["job"]["events"] == []


def test_a_goodbye_while_training_before_the_stop_is_a_worker_that_left_its_loop():
    r = RoundRendezvous(range(2))
    _round(r, 0, [0, 1])
    r.depart(1, "bye", now=2.0)        # e.g. the simulator's SLOT:leave@T
    r.depart(0, "bye", now=3.0, stopping=True)   # the job's end
    assert r.stats()["events"] == [{"event": "leave", "rank": 1, "cause": "left its loop", "round": 1, "t": 2.0}]


def test_two_workers_restarted_at_once_may_swap_ranks_and_each_keeps_its_slot():
    # PS-LITE gives each replacement the first dead id it finds: slot 1's process may come back as
    # rank 2 and slot 2's as rank 1. The State Server takes a rank that left back for another slot.
    svc = StateService(3, now=0.0, rules=("membership",))
    for rank in range(3):
        assert svc.handle(m.Register(rank=rank, seq=1, slot=rank, incarnation=1), 0.0, sender=rank).ok
    svc.depart(1, "died (silent for over 5 s)")
    svc.depart(2, "died (silent for over 5 s)")
    assert svc.handle(m.Register(rank=2, seq=1, slot=1, incarnation=7), 1.0, sender="b").ok
    # a live rank's slot cannot be taken, and a live rank cannot change slots
    assert "slot 0 is already held" in svc.handle(m.Register(rank=1, seq=1, slot=0, incarnation=8), 1.0,
                                                  sender="c").error
    assert svc.handle(m.Register(rank=1, seq=2, slot=2, incarnation=8), 1.0, sender="c").ok
    assert "already registered for slot 0" in svc.handle(m.Register(rank=0, seq=2, slot=2, incarnation=1),
                                                         1.0, sender=0).error
    assert svc.slots == {0: 0, 1: 2, 2: 1}
    record = dict(svc.rule("membership").stats(), slots={str(r): s for r, s in svc.slots.items()})
    got = job_events(record)
    assert [(e["event"], e["rank"], e["slot"]) for e in got["events"]] == [
        ("leave", 1, 1), ("leave", 2, 2), ("join", 2, 1), ("join", 1, 2)]
    # the rounds of a rank before its join belong to the slot it had, from its join on to the new one
    swapped = {"slots": {"0": 0, "1": 2, "2": 1},
               "events": [{"event": "leave", "rank": 1, "slot": 1, "round": 2, "cause": "died", "t": 1.0},
                          {"event": "leave", "rank": 2, "slot": 2, "round": 2, "cause": "died", "t": 1.0},
                          {"event": "join", "rank": 2, "slot": 1, "round": 5, "cause": "restarted", "t": 2.0},
                          {"event": "join", "rank": 1, "slot": 2, "round": 6, "cause": "restarted", "t": 2.0}],
               "rounds_by_rank": {"0": list(range(9)), "1": [0, 1, 6, 7, 8], "2": [0, 1, 5, 6, 7, 8]}}
    assert job_events(swapped)["rounds_by_slot"] == {"0": [[0, 8]], "1": [[0, 1], [5, 8]], "2": [[0, 1], [6, 8]]}


def test_elastic_async_loads_the_round_rendezvous_and_other_modes_are_refused_by_name():
    import pytest
    from mxhet import launcher
    from mxhet.errors import ConfigError
    plan = launcher.plan(["-n", "3", "-s", "1", "--sync", "async", "--elastic", "--", "python", "train.py"])
    [state] = [p for p in plan.processes if p.role == "state-server"]
    assert state.argv[state.argv.index("--rules") + 1].split(",")[-1] == "membership"
    plain = launcher.plan(["-n", "3", "-s", "1", "--sync", "async", "--", "python", "train.py"])
    [state] = [p for p in plain.processes if p.role == "state-server"]
    assert "membership" not in state.argv[state.argv.index("--rules") + 1]
    elastic_nodelay = launcher.plan(["-n", "3", "-s", "1", "--sync", "nodelay", "--elastic", "--max-restarts", "1",
                                     "--", "python", "train.py"])
    [state] = [p for p in elastic_nodelay.processes if p.role == "state-server"]
    assert set(state.argv[state.argv.index("--rules") + 1].split(",")) >= {"nodelay", "membership"}
    for mode in ("ssp", "dcasgd"):
        with pytest.raises(ConfigError, match="--elastic works in modes localsgd, esync, sync, nodelay, async, "
                                              "preduce, gcada, cada, not '%s'" % mode):
            launcher.plan(["-n", "3", "--sync", mode, "--elastic", "--", "python", "train.py"])


def test_without_rounds_async_workers_end_on_their_own_and_only_a_death_is_recorded():
    r = RoundRendezvous(range(3))
    r.depart(1, "died (silent for over 3 s)", now=5.0)
    r.finish(0, "f0", now=9.0)
    r.finish(2, "f2", now=9.5)
    assert [(e["event"], e["rank"], e["round"]) for e in r.stats()["events"]] == [("leave", 1, None)]


def test_an_async_worker_started_again_is_taken_back_and_its_join_and_leave_name_no_round():
    # async holds no round: the rendezvous names none for a leave or a join, the restarted rank's own
    # second death included; the State Server says "rejoined", which async cannot read from the round
    r = RoundRendezvous(range(3))
    r.depart(1, "died (silent for over 3 s)", now=5.0)
    assert r.join(1, now=12.0) == 0 and 1 in r.training
    r.depart(1, "died (silent for over 3 s)", now=20.0)
    assert [(e["event"], e["rank"], e["round"]) for e in r.stats()["events"]] == [
        ("leave", 1, None), ("join", 1, None), ("leave", 1, None)]
    svc = StateService(3, now=0.0, rules=("membership",))
    first = [svc.handle(m.Register(rank=rank, seq=1, slot=rank, incarnation=1), 0.0, sender=rank)
             for rank in range(3)]
    assert not any(reply.rejoined for reply in first)
    svc.depart(1, "died (silent for over 3 s)")
    back = svc.handle(m.Register(rank=1, seq=1, slot=1, incarnation=9), 8.0, sender="b")
    assert back.ok and back.rejoined and not back.over and back.round == 0
    assert m.decode(m.encode(back)).rejoined
    # a rank that never left is no rejoin (a worker registering again with a restarted State Server)
    again = svc.handle(m.Register(rank=2, seq=2, slot=2, incarnation=1), 9.0, sender=2)
    assert again.ok and not again.rejoined
    # every other rank done training: a worker back now is too late
    for rank, sender in ((0, 0), (1, "b"), (2, 2)):
        svc.handle(membership.RoundFinish(rank=rank, seq=3, incarnation=9 if rank == 1 else 1), 10.0, sender=sender)
    svc.depart(2, "died (silent for over 3 s)")
    late = svc.handle(m.Register(rank=2, seq=1, slot=2, incarnation=4), 11.0, sender="c")
    assert late.over and not late.rejoined
    # rounds held: a join still names its round
    held = RoundRendezvous(range(2))
    _round(held, 0, [0, 1])
    held.depart(1, "died", now=1.0)
    assert held.join(1, now=2.0) == 1 and held.stats()["events"][-1]["round"] == 1
    # a join that named no round (none was held yet) holds every round that came after it
    early = {"slots": {"0": 0, "1": 1}, "rounds_by_rank": {"0": [0, 1], "1": [0, 1]},
             "events": [{"event": "join", "rank": 1, "slot": 1, "round": None, "cause": "restarted", "t": 1.0}]}
    assert job_events(early)["rounds_by_slot"] == {"0": [[0, 1]], "1": [[0, 1]]}


def test_restarts_are_taken_in_async_and_refused_in_modes_that_cannot_take_a_worker_back():
    import pytest
    from mxhet import launcher
    from mxhet.errors import ConfigError
    plan = launcher.plan(["-n", "3", "--sync", "async", "--elastic", "--max-restarts", "1", "--", "python", "t.py"])
    [state] = [p for p in plan.processes if p.role == "state-server"]
    assert "--until-stopped" in state.argv and state.argv[state.argv.index("--rules") + 1] == "membership"
    with pytest.raises(ConfigError, match="--max-restarts works in modes localsgd, esync, sync, nodelay, async, "
                                          "preduce, gcada, cada, not 'dcasgd'"):
        launcher.plan(["-n", "3", "--sync", "dcasgd", "--elastic", "--max-restarts", "1", "--", "python", "t.py"])


def test_the_supervisor_records_each_exit_for_the_job_file_the_chief_and_the_live_view(tmp_path):
    import types
    from mxhet.launcher.supervisor import Supervisor
    from mxhet.observe.live import read_events
    live = tmp_path / "live"
    live.mkdir()
    plan = types.SimpleNamespace(elastic=True, worker_restarts=1, worker_restart_delay=0.0, live_dir=str(live))
    sup = Supervisor(plan)
    sup.progress_dir = str(tmp_path)
    worker = types.SimpleNamespace(spec=types.SimpleNamespace(slot=2, role="worker", remote=False),
                                   popen=types.SimpleNamespace(returncode=-9))
    sup.children = [worker]
    sup.watch.departures.append((0, sup._t0 + 4.0))
    sup._note_exits()
    [exit_] = sup.worker_exits
    assert (exit_["slot"], exit_["cause"], exit_["died_s"]) == (2, "killed by signal 9 (SIGKILL)", 4.0)
    assert abs(exit_["unix"] - (sup.started + 4.0)) < 1e-3
    assert json.loads((tmp_path / "exits.json").read_text()) == sup.worker_exits
    assert sup._progress_env(worker.spec)["MXHET_EXITS_FILE"] == str(tmp_path / "exits.json")
    sup.worker_restarts.append({"slot": 2, "cause": "x", "died_s": 4.0, "restarted_s": 9.0})
    sup._feed_events()
    assert [(e["event"], e["slot"], e["t_s"]) for e in read_events(str(live))] == [("leave", 2, 4.0), ("join", 2, 9.0)]
