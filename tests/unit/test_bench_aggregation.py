"""``mxhet-bench aggregation``'s plan: its simulator runs are ESync with an option and the references on the
paper-sim profile; finished runs with the same command elsewhere (``--reuse``) are taken, not run again (no
process is started here)."""
import argparse
import json
import os
import signal
import threading
import time

import pytest

from bench import aggregation, presets, profiles, runner, suite


def _paper_sim_command(model, mode, dist, out):
    preset = presets.get("paper-sim-lr0.1")
    record = {"base_iteration_s": preset.iteration_s[model], "input_size": preset.input_sizes[model]}
    spec = suite.job_spec(suite.RunKey(model, mode, dist), preset, profiles.BUILTIN["paper-sim"], record,
                          preset.time_budget, 0, engine="sim")
    return spec.launch_argv(out)


def _command(model, variant, dist, out):
    return aggregation.job_spec("sim", model, profiles.BUILTIN["paper-sim"], dist, variant).launch_argv(out)


def _fake_run(directory, command, summary=None):
    directory.mkdir(parents=True)
    doc = {"time_to_target_s": None, "final_accuracy": 0.43, "train_time_s": 200.0, "num_workers": 2,
           "workers": [{"local_iters": [1, 1], "iterations": 2}, {"local_iters": [100, 140], "iterations": 240}],
           "sim": {"command": ["python"] + command[1:], "max_iterations": 6000, "stopped_at_target_s": None,
                   "wall_s": 1.0}}
    doc.update(summary or {})
    (directory / "summary.json").write_text(json.dumps(doc))


def test_the_references_share_the_paper_sim_bench_s_settings_but_the_non_iid_cap(tmp_path):
    """Plain ESync, Sync and standalone are the paper-sim bench's runs but for what that bench trims to fit its
    time (the non-i.i.d. cap, the snapshot gate): this experiment keeps 6,000 iterations on either split."""
    runs = dict(aggregation.plan("sim", ["resnet18_v1"], ["paper-sim"], ["non-iid"],
                                 ["esync", "esync-nesterov", "sync", "local"]))
    for variant, mode, dist in (("esync", "esync", "non-iid"), ("sync", "sync", "non-iid"), ("local", "local", "iid")):
        name = aggregation.run_name("resnet18_v1", "paper-sim", "non-iid", variant)
        mine = runs[name].launch_argv(str(tmp_path / "a" / name))
        theirs = _paper_sim_command("resnet18_v1", mode, dist, str(tmp_path / "b"))
        assert mine[mine.index("--max-iterations") + 1] == "6000"
        assert theirs[theirs.index("--max-iterations") + 1] == ("1500" if dist == "non-iid" else "6000")
        assert "--eval-min-iterations" not in mine and theirs[theirs.index("--eval-min-iterations") + 1] == "20"
        for argv in (mine, theirs):
            for flag in ("--max-iterations", "--eval-min-iterations"):
                if flag in argv:
                    del argv[argv.index(flag):argv.index(flag) + 2]
        assert aggregation.canonical(mine) == aggregation.canonical(theirs)
    nesterov = runs["resnet18_v1-paper-sim-non-iid-esync-nesterov"].launch_argv("x")
    assert nesterov[-2:] == ["--outer-optimizer", "nesterov"]
    assert "--max-iterations" in nesterov and "--stop-at-target" in nesterov


def test_reuse_index_matches_commands_wherever_they_wrote(tmp_path):
    command = _command("resnet18_v1", "esync", "non-iid", "elsewhere/run")
    _fake_run(tmp_path / "ref" / "resnet18_v1-esync-non-iid", command)
    index = aggregation.reuse_index([str(tmp_path / "ref"), str(tmp_path / "missing")])
    runs = dict(aggregation.plan("sim", ["resnet18_v1"], ["paper-sim"], ["non-iid"], ["esync", "esync-weighted"]))
    plain = aggregation.canonical(runs["resnet18_v1-paper-sim-non-iid-esync"].launch_argv("mine"))
    weighted = aggregation.canonical(runs["resnet18_v1-paper-sim-non-iid-esync-weighted"].launch_argv("mine"))
    assert index[plain].endswith("resnet18_v1-esync-non-iid")
    assert weighted not in index


def test_a_run_stopped_by_its_compute_cap_is_reported_as_such(tmp_path):
    command = _paper_sim_command("resnet18_v1", "esync", "non-iid", "x")
    _fake_run(tmp_path / "runs" / "resnet18_v1-paper-sim-non-iid-esync", command)
    _fake_run(tmp_path / "runs" / "resnet18_v1-paper-sim-non-iid-esync-nesterov", command,
              {"time_to_target_s": 80.0, "final_accuracy": 0.81})
    rows = {r["variant"]: r for r in aggregation.collect(str(tmp_path))}
    assert rows["esync"]["capped"] and rows["esync"]["n_i"] == [1.0, 120.0] and rows["esync"]["iterations"] == 242
    assert not rows["esync-nesterov"]["capped"]
    text = aggregation.report(list(rows.values()), "mxhet-bench aggregation")
    assert "not reached (cap)" in text and "80 s" in text
    assert "no Sync run to compare" in text


def test_a_stopped_aggregation_bench_ends_its_running_jobs_and_starts_no_other(tmp_path, monkeypatch):
    """SIGTERM reaches the bench's main thread while two simulator jobs run on its worker threads: both
    are told to end (as runner.run_job ends its process) and the queued ones never start."""
    started, ended = [], []
    main = threading.main_thread().ident
    both = threading.Barrier(2)

    class Stopped(Exception):
        pass

    def on_signal(signum, frame):   # as the bench's own SIGTERM handler
        runner.interrupt(Stopped("signal %d" % signum))

    def fake_run_job(spec, out_dir, progress=None):
        if runner.STOP.is_set():               # as run_job: a job not started when the bench stops never starts
            raise runner.Interrupted("not started")
        started.append(os.path.basename(out_dir))
        if both.wait(180) == 0:                   # the signal comes once two jobs run
            signal.pthread_kill(main, signal.SIGUSR1)
        # a long run, as a simulator job polls its process. Its end is bounded by the clock, not by a count of
        # polls, and far beyond the signal's delivery: a job that ended on its own on a loaded machine would
        # free its thread for a third job before the signal's handler ran.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if runner.STOP.wait(0.05):
                ended.append(os.path.basename(out_dir))
                raise runner.Interrupted("ended")
        raise AssertionError("the job was never told to end")

    monkeypatch.setattr(runner, "run_job", fake_run_job)
    monkeypatch.setattr(aggregation, "write", lambda out, command: None)
    monkeypatch.setattr(os, "environ", dict(os.environ))   # --jobs 2 sets the jobs' variables: not the tests'
    parser = argparse.ArgumentParser()
    aggregation.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["aggregation", "--models", "resnet18_v1", "--profiles", "paper-sim", "--dists", "iid",
                              "--variants", "esync,esync-nesterov,esync-weighted,sync", "--reuse", "",
                              "--jobs", "2", "--out", str(tmp_path)])
    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        with pytest.raises(Stopped):
            aggregation.run(args)
        assert len(started) == 2 and sorted(ended) == sorted(started)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        runner.STOP.clear()


def test_group_norm_runs_are_named_apart_and_never_reuse_batchnorm_runs(tmp_path):
    runs = dict(aggregation.plan("sim", ["resnet18_v1"], ["paper-sim"], ["non-iid"], ["esync", "sync"],
                                 norm="group"))
    assert sorted(runs) == ["resnet18_v1_gn-paper-sim-non-iid-esync", "resnet18_v1_gn-paper-sim-non-iid-sync"]
    mine = runs["resnet18_v1_gn-paper-sim-non-iid-sync"].launch_argv(str(tmp_path / "a"))
    assert mine[mine.index("--norm") + 1] == "group"
    theirs = _paper_sim_command("resnet18_v1", "sync", "non-iid", str(tmp_path / "b"))
    assert aggregation.canonical(mine) != aggregation.canonical(theirs)
    assert aggregation.parse_name("resnet18_v1_gn-paper-sim-non-iid-esync-nesterov") == (
        "resnet18_v1_gn", "paper-sim", "non-iid", "esync-nesterov")


def test_the_lower_outer_learning_rate_variant_passes_it_and_parses_back():
    runs = dict(aggregation.plan("cluster", ["alexnet"], ["cpu"], ["iid"], ["esync-nesterov-lr0.35"]))
    argv = runs["alexnet-cpu-iid-esync-nesterov-lr0.35"].launch_argv("x")
    assert argv[argv.index("--outer-optimizer") + 1] == "nesterov" and argv[argv.index("--outer-lr") + 1] == "0.35"
    assert aggregation.parse_name("alexnet-cpu-iid-esync-nesterov-lr0.35") == (
        "alexnet", "cpu", "iid", "esync-nesterov-lr0.35")


def test_the_local_step_cap_variant_passes_it_on_both_engines():
    for engine in ("sim", "cluster"):
        runs = dict(aggregation.plan(engine, ["resnet18_v1"], ["paper-sim"], ["non-iid"], ["esync-max10"],
                                     norm="group"))
        argv = runs["resnet18_v1_gn-paper-sim-non-iid-esync-max10"].launch_argv("x")
        assert argv[argv.index("--max-local-steps") + 1] == "10" and argv[argv.index("--norm") + 1] == "group"
    assert aggregation.parse_name("resnet18_v1_gn-paper-sim-non-iid-esync-max10") == (
        "resnet18_v1_gn", "paper-sim", "non-iid", "esync-max10")


def test_group_norm_on_a_model_without_batchnorm_is_an_error_message(capsys):
    from bench import cli
    assert cli.main(["aggregation", "--models", "alexnet", "--norm", "group", "--dry-run", "--out", "x"]) == 2
    assert "alexnet has no BatchNorm layers" in capsys.readouterr().err


def test_a_capped_esync_before_syncs_time_to_target_is_undecided_and_shows_sync_then(tmp_path):
    """ESync stopped by its compute cap at 200 virtual s cannot be said to lose to a Sync that reached the target
    at 4,000 s: the goal line says so and gives Sync's accuracy at 200 s; a Sync that reached it earlier wins."""
    command = _paper_sim_command("resnet18_v1", "esync", "non-iid", "x")
    for top, sync_reached, sync_curve in (("late", 4000.0, [[0, 0.1], [150, 0.115], [250, 0.2], [4000, 0.8]]),
                                          ("early", 150.0, [[0, 0.1], [150, 0.8]])):
        _fake_run(tmp_path / top / "runs" / "resnet18_v1-paper-sim-non-iid-esync", command,
                  {"curve": [[0, 0.1], [200, 0.6]]})
        _fake_run(tmp_path / top / "runs" / "resnet18_v1-paper-sim-non-iid-sync", command,
                  {"time_to_target_s": sync_reached, "train_time_s": sync_reached, "curve": sync_curve,
                   "sim": {"stopped_at_target_s": sync_reached}})
    late = "\n".join(aggregation.goals(aggregation.collect(str(tmp_path / "late"))))
    assert "undecided: stopped by its cap at 200 s, where Sync was at 0.115" in late
    early = "\n".join(aggregation.goals(aggregation.collect(str(tmp_path / "early"))))
    assert "does not reach 0.80" in early and "undecided" not in early
