"""``mxhet-bench faults``' pure parts: the fault times, the victim, the classic recovery's curve in both
engines, the kill hook (on real processes of its own) and the report from a fixture result."""
import os
import signal
import subprocess
import sys
import types

import pytest

from bench import faults
from mxhet.errors import ConfigError


def test_fault_times_are_shares_of_the_budget_and_the_restart_delay_lies_between():
    assert faults.fault_times(100.0, 0.3, 0.6) == {"kill_s": 30.0, "restart_s": 60.0, "restart_delay_s": 30.0}


@pytest.mark.parametrize("budget, kill, back", [(100, 0.6, 0.3), (100, 0, 0.5), (100, 0.3, 1.0), (0, 0.3, 0.6),
                                                (float("inf"), 0.3, 0.6)])
def test_bad_fault_times_are_refused(budget, kill, back):
    with pytest.raises(ConfigError):
        faults.fault_times(budget, kill, back)


def test_the_victim_is_never_the_chief():
    assert faults.victim_slot((10, 10, 1, 1), "fast") == 3
    assert faults.victim_slot((10, 10, 1, 1), "slow") == 1
    assert faults.victim_slot((1, 10, 1), "fast") == 2
    with pytest.raises(ConfigError, match="no slow device besides slot 0"):
        faults.victim_slot((10, 1, 1), "slow")
    with pytest.raises(ConfigError, match="victim must be one of"):
        faults.victim_slot((10, 1), "medium")


def test_checkpoint_time_is_the_newest_period_before_the_kill():
    assert faults.checkpoint_time(30.0, 0.5, 10) == 30.0      # a checkpoint exactly at the kill
    assert faults.checkpoint_time(29.9, 0.5, 10) == 25.0
    assert faults.checkpoint_time(4.0, 0.5, 10) == 0.0        # none yet: from the start
    with pytest.raises(ConfigError):
        faults.checkpoint_time(30.0, 0.0, 10)


def test_sim_classic_curve_repeats_the_points_after_the_checkpoint_lost_seconds_later():
    curve = [[0, 0.1], [10, 0.5], [20, 0.6], [30, 0.7], [40, 0.8]]
    points, sources = faults.sim_classic_curve(curve, kill_s=25, checkpoint_s=15, lost_s=40)
    assert points == [[0, 0.1], [10, 0.5], [20, 0.6], [60, 0.6], [70, 0.7], [80, 0.8]]
    assert sources == [0, 1, 2, 2, 3, 4]
    assert faults.first_crossing(points, 0.8) == 80 and faults.first_crossing(curve, 0.8) == 40


def test_cluster_classic_curve_places_the_resumed_launch_after_the_kill_and_the_relaunch():
    before = [[0, 0.1], [10, 0.5], [20, 0.6]]
    resumed = [[0, 0.55], [10, 0.7], [30, 0.82]]
    assert faults.cluster_classic_curve(before, resumed, 45.5) == before + [[45.5, 0.55], [55.5, 0.7],
                                                                           [75.5, 0.82]]


def _child(tmp_path, slot):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    spec = types.SimpleNamespace(role="worker", slot=slot, name="worker %d" % slot)
    return proc, types.SimpleNamespace(pid=proc.pid, spec=spec)


@pytest.mark.parametrize("slot", [1, None])
def test_the_hook_kills_at_its_time_after_the_first_snapshot(tmp_path, slot):
    procs = [_child(tmp_path, s) for s in range(2)]
    supervisor = types.SimpleNamespace(children=[c for _, c in procs])
    now = [100.0]
    snapshot = tmp_path / "000000.params"
    hook = faults.FaultHook(str(snapshot), 5.0, slot=slot, clock=lambda: now[0])
    try:
        hook.started(None, supervisor)
        now[0] = 103.0
        hook.polled(supervisor)            # no snapshot yet: training has not started
        assert hook.train_start_unix is None
        snapshot.write_bytes(b"")
        hook.polled(supervisor)
        now[0] = 107.9
        hook.polled(supervisor)
        assert hook.kill_unix is None and all(p.poll() is None for p, _ in procs)
        now[0] = 108.0
        hook.polled(supervisor)
        codes = [p.wait(timeout=30) if slot in (None, i) else p.poll() for i, (p, _) in enumerate(procs)]
        assert codes == ([-signal.SIGKILL] * 2 if slot is None else [None, -signal.SIGKILL])
        record = hook.record()
        assert record["startup_s"] == 3.0 and record["kill_s"] == 5.0
        assert [k["name"] for k in record["killed"]] == (["worker 0", "worker 1"] if slot is None else ["worker 1"])
        now[0] = 200.0
        hook.polled(supervisor)            # one kill only
        assert len(hook.record()["killed"]) == (2 if slot is None else 1)
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _args(**changes):
    parser = faults.add_parser(__import__("argparse").ArgumentParser().add_subparsers())
    args = parser.parse_args([])
    for k, v in changes.items():
        setattr(args, k, v)
    return args


def test_check_refuses_bad_settings_naming_them():
    with pytest.raises(ConfigError, match="--mode must be an elastic mode"):
        faults.check(_args(mode="sync"))
    with pytest.raises(ConfigError, match="async cannot be checkpointed"):
        faults.check(_args(mode="async"))
    with pytest.raises(ConfigError, match="--engines: unknown gpu"):
        faults.check(_args(engines="gpu"))
    engines, scenarios, seeds, profile, times, victim = faults.check(_args(engines="sim,cluster", seeds="0,1"))
    assert engines == ["cluster", "sim"] and seeds == [0, 1] and victim == 3 and times["kill_s"] == 30.0


def _result():
    rows = []
    for seed, (none, restart, classic) in enumerate([(40.0, 55.0, 90.0), (44.0, None, 96.0)]):
        for scenario, t, acc in (("none", none, 0.86), ("restart", restart, 0.84), ("classic", classic, 0.82)):
            rows.append({"engine": "cluster", "scenario": scenario, "seed": seed, "mode": "esync",
                         "time_to_target_s": t, "confirmed": True, "final_accuracy": acc, "train_time_s": 100.0,
                         "curve": [[0, 0.1], [50, 0.8], [100, acc]], "digests": 1, "workers": 4,
                         "lost_s": 20.0 + seed if scenario == "classic" else None,
                         "checkpoint_round": 50, "checkpoint_s": 15.0, "relaunch_s": 12.0,
                         "elastic": {"events": [{"event": "leave", "round": 90}, {"event": "join", "round": 180}]}
                         if scenario == "restart" else None})
    settings = {"mode": "esync", "profile": "cpu", "slowdowns": [10, 10, 1, 1], "base_iter": 0.115,
                "model": "resnet18_v1", "input_size": 32, "batch_size": 64, "lr": 0.1, "seeds": "0,1",
                "budget": 100.0, "target_accuracy": 0.8, "eval_samples": 1000, "victim_slot": 3, "victim": "fast",
                "kill_s": 30.0, "restart_s": 60.0, "restart_delay_s": 30.0, "checkpoint_every": 50}
    return {"command": ["mxhet-bench", "faults"], "settings": settings, "runs": rows,
            "summary": faults.summarise(rows), "failures": [{"label": "x", "error": "boom\nmore"}],
            "machine": {"cpu": "test cpu", "cores": 2}, "restart_cost": {"seconds": 12.0, "source": "measured"},
            "provenance": {"commit": "abc", "dirty": False, "date": "2026-11-27", "load_before": [1, 2, 3],
                           "load_after": [2, 2, 2]}}


def test_the_report_from_a_fixture_result():
    report = faults.format_report(_result())
    assert "| cluster | no fault | 0,1 | 42.0 [" in report                    # mean of 40 and 44, interval
    assert "| cluster | one device killed, restarted | 0,1 | > 77.5 [" in report and "(1/2 reached)" in report
    assert "| cluster | whole job killed, resumed from its checkpoint | 0,1 | 93.0 [" in report
    assert "| 20.5 |" in report                                             # mean lost time of the classic runs
    assert "leave round 90, join round 180" in report and "1 digest(s) over 4 workers" in report
    assert "load average 1.0/2.0/3.0 before" in report
    assert "* x: boom" in report and "more" not in report.split("## Failed runs")[1]


def test_the_figure_from_a_fixture_result(tmp_path):
    pytest.importorskip("matplotlib")
    path = faults.plot(_result(), str(tmp_path / "faults.png"))
    assert os.path.getsize(path) > 1000
