"""The live view of an elastic job's leaves and joins (mxhet.observe.live, the launcher's record of them):
each event's round, the chief's feed once rank 0 left, and how a restarted worker ended."""
import json
import types

from mxhet.launcher.supervisor import Supervisor
from mxhet.observe.live import FEED_FORMAT, build_state, feed_path, read_events

DEVICES = [{"slot": s, "host": "127.0.0.1", "context": "cpu", "slowdown": 1.0} for s in range(3)]


def _feed(live, slot, **fields):
    record = dict({"format": FEED_FORMAT, "slot": slot, "phase": "training", "rounds": 0}, **fields)
    with open(feed_path(str(live), slot), "w") as f:
        json.dump(record, f)


def _supervisor(tmp_path, live, children):
    plan = types.SimpleNamespace(elastic=True, worker_restarts=1, worker_restart_delay=0.0, live_dir=str(live))
    sup = Supervisor(plan)
    sup.progress_dir = str(tmp_path)
    sup.children = children
    return sup


def _worker(slot, returncode):
    spec = types.SimpleNamespace(slot=slot, role="worker", remote=False, name="worker %d" % slot)
    return types.SimpleNamespace(spec=spec, popen=types.SimpleNamespace(returncode=returncode))


def test_a_leave_carries_the_rounds_of_the_workers_last_report_and_a_join_its_first_round(tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    _feed(live, 2, rank=2, rounds=14)
    dead = _worker(2, -9)
    sup = _supervisor(tmp_path, live, [dead])
    sup.watch.departures.append((0, sup._t0 + 4.0))
    sup._note_exits()   # read when the process ended, before the restarted worker overwrites the feed
    sup.worker_restarts.append({"slot": 2, "cause": "x", "died_s": 4.0, "restarted_s": 9.0})
    sup._feed_events()
    assert [(e["event"], e["slot"], e["round"]) for e in read_events(str(live))] == [("leave", 2, 14),
                                                                                    ("join", 2, None)]
    # the restarted worker reports: its first round is the join's
    _feed(live, 2, rank=2, rounds=17, rejoined_at_round=17)
    events = build_state(DEVICES, str(live))["job"]["events"]
    assert [(e["event"], e["round"], e["cause"]) for e in events] == [
        ("leave", 14, "killed by signal 9 (SIGKILL)"), ("join", 17, "restarted")]
    # without a live view the launcher records no round
    sup = _supervisor(tmp_path, "", [dead])
    sup.watch.departures.append((0, sup._t0 + 4.0))
    sup._note_exits()
    assert sup._exit_rounds == [None]


def test_once_the_chief_left_the_jobs_accuracy_comes_from_the_lowest_rank_present(tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    _feed(live, 0, rank=1, phase="evaluating", accuracy=[[0.0, 0.1], [9.0, 0.7]], samples_per_s=10.0)
    _feed(live, 1, rank=0, phase="training", accuracy=[[0.0, 0.1]], samples_per_s=100.0)
    _feed(live, 2, rank=2, phase="done", samples_per_s=1.0)
    state = build_state(DEVICES, str(live))
    assert state["job"]["accuracy"] == 0.1 and state["job"]["phase"] == "training"   # rank 0 is there
    with open(str(live / "launcher-events.json"), "w") as f:
        json.dump({"events": [{"t_s": 3.0, "event": "leave", "slot": 1, "cause": "killed by signal 9 (SIGKILL)"}]}, f)
    state = build_state(DEVICES, str(live))
    assert state["job"]["accuracy"] == 0.7 and state["job"]["phase"] == "evaluating"
    assert [d["present"] for d in state["devices"]] == [True, False, True] and state["job"]["present"] == 2
    assert state["job"]["samples_per_s"] == 11.0   # the last rate of the device that left is not the job's


def test_the_job_file_says_how_a_restarted_worker_ended_and_whether_it_came_too_late(tmp_path):
    first, late = _worker(1, 0), _worker(2, 0)
    sup = _supervisor(tmp_path, "", [first, late])
    sup.worker_restarts += [{"slot": 1, "cause": "x", "died_s": 1.0, "restarted_s": 6.0},
                            {"slot": 2, "cause": "x", "died_s": 2.0, "restarted_s": 7.0}]
    (tmp_path / "worker-2").write_text("late")   # its progress note (mxhet.modes.rounds.leave_too_late)
    (tmp_path / "worker-1").write_text("batch")
    said = []
    sup.console = types.SimpleNamespace(say=said.append)
    assert sup._note_restart_ends() and not sup._note_restart_ends()   # recorded once
    assert [(r["ended"], r["too_late"]) for r in sup.worker_restarts] == [("exit code 0", False),
                                                                         ("exit code 0", True)]
    assert said == ["worker 2, started again, came after the job's end and left (exit 0)"]
