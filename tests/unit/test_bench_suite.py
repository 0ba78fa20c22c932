"""The paper-reproduction bench without processes: profiles, calibration arithmetic,
planning, failure handling, derived numbers, and the whole pipeline on
synthetic job summaries (JSON keys, report, figures)."""
import dataclasses
import json
import os
import shutil

import pytest

from bench import calibrate, cli, presets, profiles, report, suite
from bench.runner import JobFailed
from mxhet.errors import ConfigError

RUN_KEYS = {"model", "mode", "dist", "time_to_target_s", "final_accuracy", "samples_per_s", "bytes_per_s",
            "compute_ratio", "local_iters_mean", "curve"}
TOP_KEYS = {"experiment", "preset", "command", "machine", "profile", "target_accuracy", "runs"}


# -- profiles -------------------------------------------------------------------

def test_builtin_profiles_match_the_paper_and_the_cpu_shape():
    paper = profiles.load("paper")
    assert paper.slowdowns == (117.0, 117.0, 1.0, 1.0, 1.0, 1.0)
    assert paper.contexts[:2] == ("cpu", "cpu") and all(c.startswith("gpu") for c in paper.contexts[2:])
    assert profiles.load("cpu").slowdowns == (10.0, 10.0, 1.0, 1.0)
    assert profiles.load("cpu").fastest().slowdown == 1.0


def test_custom_profile_file(tmp_path):
    path = tmp_path / "lab.json"
    path.write_text(json.dumps({"name": "lab", "devices": [{"context": "cpu", "slowdown": 20, "label": "laptop"},
                                                           {"context": "gpu(1)", "slowdown": 1.5}]}))
    p = profiles.load(str(path))
    assert p.name == "lab" and p.contexts == ("cpu", "gpu(1)") and p.slowdowns == (20.0, 1.5)
    assert p.fastest().context == "gpu(1)"


@pytest.mark.parametrize("content, message", [
    ({"devices": []}, "non-empty list"),
    ({"devices": [{"context": "tpu", "slowdown": 1}]}, "device 0"),
    ({"devices": [{"context": "cpu", "slowdown": 0.5}]}, "slowdown"),
    ({"devices": [{"context": "cpu", "speed": 2}]}, "unknown keys"),
    ("not json {", "cannot read"),
])
def test_bad_profiles_are_refused_with_a_reason(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ConfigError, match=message):
        profiles.load(str(path))


def test_unknown_profile_name():
    with pytest.raises(ConfigError, match="neither a built-in"):
        profiles.load("no-such-profile")


# -- calibration ----------------------------------------------------------------

def test_base_iteration_fits_the_devices_into_the_cores():
    devices = [("cpu", 10.0)] * 2 + [("cpu", 1.0)] * 4
    base, limit = calibrate.base_iteration(devices, {"cpu": 1.0}, cpu_cores=2, utilization=0.75)
    assert base == pytest.approx((4 + 2 / 10) / (2 * 0.75))
    assert limit.startswith("cpu")
    # a machine with cores to spare: the device's own iteration time is the floor
    base, limit = calibrate.base_iteration(devices, {"cpu": 1.0}, cpu_cores=64, utilization=0.75)
    assert base == 1.0 and "own" in limit


def test_base_iteration_shares_one_gpu_between_its_devices():
    devices = [("cpu", 117.0)] * 2 + [("gpu(0)", 1.0)] * 4
    base, limit = calibrate.base_iteration(devices, {"cpu": 3.0, "gpu(0)": 0.03}, cpu_cores=16, utilization=0.5)
    assert base == pytest.approx(4 * 0.03 / 0.5)
    assert limit.startswith("gpu(0)")
    with pytest.raises(ValueError):
        calibrate.base_iteration(devices, {"cpu": 1, "gpu(0)": 1}, 2, utilization=0)


def test_calibration_skips_models_with_too_few_fast_iterations_and_says_why():
    preset = presets.get("cpu")
    times = {"resnet18_v1": 0.5, "resnet50_v1": 1.1}
    cal, skipped = suite.calibrate_models(preset, profiles.load("cpu"), ["resnet18_v1", "resnet50_v1"], 200,
                                          measure=lambda m, s, b, c: times[m], cores=2, log=lambda *_: None)
    assert list(cal) == ["resnet18_v1"]
    assert cal["resnet18_v1"]["base_iteration_s"] == pytest.approx(0.5 * 2.2 / 1.5)
    assert [s["model"] for s in skipped] == ["resnet50_v1"]
    assert "1.10 s on cpu" in skipped[0]["reason"] and "at least 150" in skipped[0]["reason"]


def test_a_failed_calibration_is_a_skip_with_the_error():
    def broken(*_):
        raise RuntimeError("out of memory")
    cal, skipped = suite.calibrate_models(presets.get("smoke"), profiles.load("smoke"), ["smallcnn"], 5,
                                          measure=broken, cores=2, log=lambda *_: None)
    assert cal == {} and "out of memory" in skipped[0]["reason"]


# -- planning -------------------------------------------------------------------

def test_all_plans_each_run_once_and_shares_runs_between_experiments():
    preset = presets.get("cpu")
    planned = suite.plan(suite.EXPERIMENTS, ["alexnet", "resnet18_v1"], "resnet18_v1", preset)
    assert suite.RunKey("alexnet", "local", "iid") in planned["table1"]
    assert suite.RunKey("resnet18_v1", "esync", "non-iid") in planned["curves"]
    assert suite.RunKey("resnet18_v1", "local", "non-iid") not in planned["curves"]
    assert planned["throughput"] == planned["compute-ratio"]
    assert {k.mode for k in planned["throughput"]} == set(presets.ALL_MODES)
    keys = suite.unique_runs(planned)
    assert len(keys) == len(set(keys))
    # resnet18 iid sync/esync/local feed Table 1 and Figure 3; sync/async/esync iid also Figures 4-5
    assert len(keys) == 3 * 2 + 3 + (len(presets.ALL_MODES) - 2)


def test_modes_option_replaces_each_experiments_modes():
    planned = suite.plan(("table1", "throughput"), ["smallcnn"], "smallcnn", presets.get("smoke"),
                         modes=("esync", "sync"))
    assert [k.mode for k in planned["table1"]] == ["esync", "sync"]
    assert [k.mode for k in planned["throughput"]] == ["esync", "sync"]


def test_cli_refuses_unknown_models_and_modes(capsys):
    assert cli.main(["table1", "--preset", "smoke", "--models", "vgg99"]) == 2
    assert "--models: unknown vgg99" in capsys.readouterr().err
    assert cli.main(["curves", "--preset", "smoke", "--modes", "esync,turbo"]) == 2
    assert "--modes: unknown turbo" in capsys.readouterr().err


def test_a_profile_naming_missing_gpus_is_refused_before_any_run(tmp_path):
    import mxnet as mx
    if mx.context.num_gpus() > 0:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="MXNet sees 0 GPU"):
        suite.check_contexts(profiles.load("paper"))


# -- derived numbers ------------------------------------------------------------

def _rec(mode, ttt, train=100.0):
    return {"mode": mode, "time_to_target_s": ttt, "train_time_s": train}


@pytest.mark.parametrize("es, sy, value, kind, text", [
    (_rec("esync", 10.0), _rec("sync", 70.0), 7.0, "measured", "7.0×"),
    (_rec("esync", 10.0), _rec("sync", None, train=200.0), 20.0, "lower_bound", "> 20.0×"),
    (_rec("esync", None, train=50.0), _rec("sync", 25.0), 0.5, "upper_bound", "< 0.5×"),
    (_rec("esync", None), _rec("sync", None), None, "not_reached", "neither reached"),
    (_rec("esync", 1.0), None, None, "missing", "—"),
])
def test_speedup_is_never_extrapolated(es, sy, value, kind, text):
    v, k = report.speedup(es, sy)
    assert k == kind and (v == pytest.approx(value) if value is not None else v is None)
    assert report.format_speedup(v, k) == text


# -- the pipeline on synthetic summaries ------------------------------------------

def _fake_summary(spec):
    n = len(spec.slowdowns)
    fast = spec.mode in ("esync", "async", "local")
    ttt = {"esync": 20.0, "async": 15.0, "local": 40.0}.get(spec.mode)
    workers = [{"slot": i, "rank": i, "samples": 640 * (10 if fast else 1), "local_iters": [3, 4],
                "iterations": 7, "compute_ratio": 0.9 if fast else 0.2, "bytes_pushed": 1000, "bytes_pulled": 1000,
                "slowdown": spec.slowdowns[i], "rounds": 2, "context": spec.contexts[min(i, len(spec.contexts) - 1)],
                "overruns": 0} for i in range(n)]
    return {"model": spec.model, "mode": spec.mode, "dist": spec.dist, "time_to_target_s": ttt,
            "final_accuracy": 0.85 if fast else 0.7, "train_time_s": spec.time_budget,
            "curve": [[0.0, 0.1], [spec.time_budget, 0.85 if fast else 0.7]], "workers": workers,
            "evaluation": {"batchnorm": "precise", "bn_layers": 20, "bn_batches": 10, "bn_batch_size": 64,
                           "final_samples": 10000, "curve_samples": 1000, "seconds": 1.0}}


def test_whole_pipeline_writes_every_key_report_and_figure(tmp_path):
    calls = []

    def fake_run(spec, run_dir, desc, position, leave):
        calls.append((spec.model, spec.mode, spec.dist))
        assert "--base-iter" in spec.launcher_args
        if spec.mode == "ssp":
            raise JobFailed("ssp exited with code 1; last lines: boom")
        return _fake_summary(spec)

    out = str(tmp_path / "out")
    result = suite.run_suite(suite.EXPERIMENTS, presets.get("cpu"), profiles.load("cpu"), out,
                             models=("resnet18_v1", "resnet50_v1"), command=["mxhet-bench", "all"],
                             measure=lambda m, s, b, c: {"resnet18_v1": 0.5, "resnet50_v1": 2.0}[m],
                             run=fake_run, log=lambda *_: None)
    assert len(calls) == len(set(calls))  # each run once although four experiments use them
    assert ("resnet50_v1", "esync", "iid") not in calls  # skipped by calibration
    assert result.failures == 1
    for name in suite.EXPERIMENTS:
        with open(os.path.join(out, "%s.json" % name)) as f:
            data = json.load(f)
        assert TOP_KEYS <= set(data)
        assert data["skipped"][0]["model"] == "resnet50_v1"
        for run in data["runs"]:
            assert RUN_KEYS <= set(run), run.keys()
            assert len(run["compute_ratio"]) == len(run["local_iters_mean"]) == (1 if run["mode"] == "local" else 4)
    throughput = json.load(open(os.path.join(out, "throughput.json")))
    assert throughput["failures"][0]["mode"] == "ssp" and "boom" in throughput["failures"][0]["error"]
    assert throughput["ratios"]["samples_esync_over_sync"] == pytest.approx(10.0)
    table = json.load(open(os.path.join(out, "table1.json")))
    assert table["rows"][0]["speedup_kind"] == "lower_bound"  # fake Sync never reaches the target
    text = open(os.path.join(out, "report.md")).read()
    assert "| ResNet-18-v1 | > 10.0× | 7× |" in text  # 200 s of Sync over 20 s
    assert "recomputed on 10 fixed training batches of 64 images (precise BN)" in text
    assert all(run["evaluation"]["batchnorm"] == "precise" for run in table["runs"])
    assert "ResNet-50-v1 | skipped" in text and "ssp-iid` failed" in text
    for png in ("table1.png", "fig3-curves.png", "fig4-throughput.png", "fig5-compute-ratio.png"):
        with open(os.path.join(out, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_resume_keeps_only_a_simulator_run_finished_with_the_same_command(tmp_path):
    import json as _json

    from bench.runner import JobSpec
    from bench.suite import finished_run

    spec = JobSpec(mode="esync", slowdowns=(117, 1), engine="sim", sim_args=("--max-iterations", "6000"))
    run_dir = str(tmp_path / "run")
    assert finished_run(spec, run_dir) is None                      # nothing there yet
    (tmp_path / "run").mkdir()
    argv = spec.launch_argv(run_dir)
    summary = {"final_accuracy": 0.8, "sim": {"wall_s": 12.5, "command": ["python", "-m", "mxhet.sim"] + argv[3:]}}
    (tmp_path / "run" / "summary.json").write_text(_json.dumps(summary))
    kept = finished_run(spec, run_dir)
    assert kept["resumed"] and kept["wall_s"] == 12.5 and kept["command"] == argv
    other = JobSpec(mode="esync", slowdowns=(117, 1), engine="sim", sim_args=("--max-iterations", "3000"))
    assert finished_run(other, run_dir) is None                     # another command: run again
    cluster = JobSpec(mode="esync", slowdowns=(117, 1))
    assert finished_run(cluster, run_dir) is None                   # the cluster's runs are never reused
    import shutil
    shutil.copytree(run_dir, str(tmp_path / "elsewhere" / "run"))    # a results directory copied into a new --out
    assert finished_run(spec, str(tmp_path / "elsewhere" / "run"))["resumed"]


def test_a_run_that_ended_before_its_budget_is_the_same_run_under_a_longer_budget(tmp_path):
    import json as _json

    from bench.runner import JobSpec
    from bench.suite import finished_run

    def finished(budget, ended_at):
        spec = JobSpec(mode="sync", slowdowns=(117, 1), engine="sim", time_budget=budget)
        run_dir = str(tmp_path / ("run-%g-%g" % (budget, ended_at)))
        os.makedirs(run_dir)
        argv = spec.launch_argv(run_dir)
        summary = {"train_time_s": ended_at, "sim": {"wall_s": 1.0, "command": ["python", "-m", "mxhet.sim"] + argv[3:]}}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            _json.dump(summary, f)
        return run_dir

    def wanted(budget):
        return JobSpec(mode="sync", slowdowns=(117, 1), engine="sim", time_budget=budget)

    reached = finished(7200, 6311.0)                        # stopped at the target (or the cap) before 7200 s
    assert finished_run(wanted(21600), reached) is not None  # a longer budget would have gone the same
    assert finished_run(wanted(6000), reached) is None       # a shorter one would have stopped it earlier
    out_of_time = finished(7200, 7223.9)                    # ran until its budget: a longer one goes further
    assert finished_run(wanted(21600), out_of_time) is None
    assert finished_run(wanted(7200), out_of_time) is not None
    other_seed = JobSpec(mode="sync", slowdowns=(117, 1), engine="sim", time_budget=21600, seed=3)
    assert finished_run(other_seed, reached) is None         # anything else differs: run again


def test_a_model_can_have_its_own_budget():
    from bench import presets

    preset = presets.get("paper-sim")
    assert preset.budget_for("inceptionv3") > preset.time_budget
    assert preset.budget_for("resnet18_v1") == preset.time_budget


def test_a_stopped_parallel_bench_ends_its_running_jobs_and_starts_no_more(tmp_path):
    import signal
    import threading

    from bench import runner
    from bench.suite import RunKey, execute

    keys = [RunKey("smallcnn", mode, "iid") for mode in ("sync", "esync", "async")]
    started, ended = [], []
    main = threading.main_thread().ident

    class Stopped(Exception):
        pass

    def on_signal(signum, frame):   # as the bench's own SIGTERM handler
        runner.interrupt(Stopped("signal %d" % signum))

    def run(spec, run_dir, desc, position, leave):
        started.append(spec.mode)
        if spec.mode == "esync":               # the bench is stopped (a signal in its main thread) while both run
            signal.pthread_kill(main, signal.SIGUSR1)
        for _ in range(600):                     # a long run (30 s), as a simulator job polls its process
            if runner.STOP.wait(0.05):
                ended.append(spec.mode)
                raise runner.Interrupted("ended")
        return {}

    def spec_for(key):
        return runner.JobSpec(mode=key.mode, slowdowns=(1,), engine="sim")

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        with pytest.raises(Stopped):
            execute(keys, spec_for, str(tmp_path), run=run, jobs=2)
        assert "sync" in ended                   # the job running when the signal came was told to end, and did
        assert "async" not in started            # the queued one never started
    finally:
        signal.signal(signal.SIGUSR1, previous)
        runner.STOP.clear()


def test_runs_that_share_the_cores_compute_on_one_thread_and_on_cpus_without_the_threaded_engine():
    from bench.runner import share_cores, usable_cores
    # one run at a time computes on every core (MXNet's own default is half of them), or as the caller said
    assert share_cores(1, ("cpu",), {}) == {"OMP_NUM_THREADS": str(usable_cores())}
    assert share_cores(1, ("cpu",), {"OMP_NUM_THREADS": "1"}) == {"OMP_NUM_THREADS": "1"}
    assert share_cores(2, ("cpu", "cpu"), {}) == {"OMP_NUM_THREADS": "1", "MXNET_ENGINE_TYPE": "NaiveEngine"}
    assert share_cores(2, ("cpu", "gpu(0)"), {"OMP_NUM_THREADS": "4"}) == {"OMP_NUM_THREADS": "1"}
    mine = {"MXNET_ENGINE_TYPE": "ThreadedEngine"}             # the user's choice stays
    assert share_cores(3, ("cpu",), mine)["MXNET_ENGINE_TYPE"] == "ThreadedEngine"


def test_the_threads_recorded_are_those_mxnet_computes_with(monkeypatch):
    import bench.runner as runner
    monkeypatch.setattr(runner, "usable_cores", lambda: 8)
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    assert runner.compute_threads({}) == 4                      # MXNet's default on x86: half the processors
    assert runner.compute_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert runner.compute_threads({"OMP_NUM_THREADS": "3", "MXNET_OMP_MAX_THREADS": "2"}) == 2
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert runner.compute_threads({}) == 8
    assert runner.compute_threads({"OMP_NUM_THREADS": "junk"}) == 8


def test_a_run_that_reached_the_target_before_its_cap_is_the_same_run_under_a_larger_cap(tmp_path):
    import json as _json

    from bench.runner import JobSpec
    from bench.suite import finished_run

    def spec(cap):
        return JobSpec(mode="esync", slowdowns=(117, 1), engine="sim", time_budget=7200,
                       sim_args=("--stop-at-target", "--max-iterations", str(cap)))

    def finished(cap, ended_at, at_target):
        run_dir = str(tmp_path / ("run-%d-%s" % (cap, at_target)))
        os.makedirs(run_dir)
        argv = spec(cap).launch_argv(run_dir)
        sim = {"wall_s": 1.0, "command": ["python", "-m", "mxhet.sim"] + argv[3:],
               "stopped_at_target_s": ended_at if at_target else None,
               "stopped_at_cap_s": None if at_target else ended_at}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            _json.dump({"train_time_s": ended_at, "sim": sim}, f)
        return run_dir

    reached = finished(6000, 196.8, True)
    assert finished_run(spec(9000), reached) is not None   # a larger cap would have gone the same
    assert finished_run(spec(3000), reached) is None       # a smaller one might have stopped it
    capped = finished(6000, 823.3, False)
    assert finished_run(spec(9000), capped) is None        # stopped by its cap: a larger one goes further
    assert finished_run(spec(6000), capped) is not None


def test_a_simulator_run_reports_its_virtual_seconds_from_its_own_progress_bar(tmp_path):
    from bench.runner import _virtual_seconds
    log = tmp_path / "job.log"
    assert _virtual_seconds(str(log)) == 0.0                       # not written yet
    log.write_bytes(b"$ python -m mxhet.sim\nINFO registered\n")
    assert _virtual_seconds(str(log)) == 0.0
    log.write_bytes(b"x" * 2000 + b"esync inceptionv3:   1%|  | 252.7/21600.0 [35:48<67:43:42, 11.42s/virtual s]"
                    b"\resync inceptionv3:   1%|  | 284.3/21600.0 [38:06<54:33:44,  9.22s/virtual s]")
    assert _virtual_seconds(str(log)) == 284.3


def test_the_report_says_how_long_the_bench_took_or_that_it_ran_nothing():
    from bench import report

    runs = [{"time_to_target_s": 10.0, "train_time_s": 20.0, "wall_s": 60.0}, {"time_to_target_s": None,
                                                                             "train_time_s": 20.0, "wall_s": 60.0}]
    result = {"engine": "cluster", "runs": runs, "time_budget_s": 20.0, "suite_wall_s": 150.0, "jobs": 2}
    assert "took 2 min of wall time (2 run(s) at once)" in report._stopping_line(result)
    partly = report._stopping_line(dict(result, resumed_runs=["a"]))
    assert "keeping 1 finished run(s) (a)" in partly and "took 2 min" in partly
    kept = report._stopping_line(dict(result, resumed_runs=["a", "b"], suite_wall_s=3.0))
    assert "Every run was kept" in kept and "took" not in kept.split("This experiment")[0]


def _seeded_summary(spec):
    """A finished simulator run whose time to target depends on the variant and the seed."""
    n = len(spec.slowdowns) if spec.mode != "local" else 1
    ttt = {"esync": 100.0, "local": 60.0, "sync": 5000.0}.get(spec.mode if n != 4 else "sync-fast", 150.0)
    ttt *= 1 + 0.1 * spec.seed
    curve = [[0.0, 0.1], [ttt, 0.81], [spec.time_budget, 0.9]]
    workers = [{"slot": i, "rank": i, "samples": 64, "local_iters": [1], "iterations": 10, "compute_ratio": 0.5,
                "bytes_pushed": 1, "bytes_pulled": 1, "slowdown": spec.slowdowns[i], "rounds": 1, "context": "cpu",
                "overruns": 0} for i in range(n)]
    return {"model": spec.model, "mode": spec.mode, "dist": spec.dist, "time_to_target_s": ttt,
            "final_accuracy": 0.9 if spec.mode != "esync" else 0.88, "train_time_s": spec.time_budget,
            "curve": curve, "workers": workers, "target_accuracy": spec.target_accuracy}


def test_closed_division_runs_every_variant_on_every_seed_and_reports_intervals(tmp_path):
    from bench import confirm

    specs = {}

    def fake_run(spec, run_dir, desc, position, leave):
        specs[os.path.basename(run_dir)] = spec
        return _seeded_summary(spec)

    def fake_confirm(run_dir, summary):   # every candidate holds on the whole test set
        return confirm.confirm(summary, lambda i: summary["curve"][i][1])

    out = str(tmp_path / "closed")
    suite.run_suite(("table1",), presets.get("paper-sim"), profiles.load("paper-sim"), out,
                    models=("resnet18_v1", "mobilenet1.0"), measure=lambda m, s, b, c: 0.1, run=fake_run,
                    log=lambda *_: None, command=["mxhet-bench", "table1"], confirm_fn=fake_confirm)
    assert {"resnet18_v1-esync-iid", "resnet18_v1-esync-iid-seed2", "mobilenet1.0-sync-fast-iid-seed1",
            "resnet18_v1-adsp-iid-seed1"} <= set(specs)
    assert "mobilenet1.0-adsp-iid" not in specs          # the extra baselines on ResNet-18 and AlexNet only
    fast = specs["resnet18_v1-sync-fast-iid"]
    assert fast.mode == "sync" and fast.slowdowns == (1.0,) * 4 and fast.lr == 0.001
    assert "--stop-at-target" not in fast.sim_args and fast.time_budget == specs["resnet18_v1-local-iid"].time_budget
    assert specs["resnet18_v1-sync-iid"].time_budget == presets.SYNC_BUDGET_FACTOR * fast.time_budget
    table = json.load(open(os.path.join(out, "table1.json")))
    prov = table["provenance"]
    assert prov["seeds"] == [0, 1, 2] and prov["command"] == ["mxhet-bench", "table1"] and prov["date"]
    assert {"cpu", "cores", "memory_bytes", "mxnet", "python"} <= set(prov["machine"])
    assert table["division"] == "closed" and table["confirmed"]
    row = next(r for r in table["rows"] if r["model"] == "resnet18_v1")
    assert row["best_alternative"] == "local" and row["variants"]["esync"]["time_to_target"]["n"] == 3
    assert row["speedup_over_best"]["value"] == pytest.approx(0.6) and row["speedup_over_best"]["high"] < 1
    assert row["speedup_over_sync"]["value"] == pytest.approx(50.0)
    assert any(x["variant"] == "local" and x["significant"] for x in row["esync_loses_to"])
    text = open(os.path.join(out, "report.md")).read()
    assert "vs best alternative" in text and "standalone (fastest device) on time to target" in text
    assert "Division: **closed**" in text and "Provenance: commit" in text


def test_a_loss_says_whether_the_interval_holds_it_or_a_side_has_one_seed():
    from bench import report

    def sp(value, high):
        return {"value": value, "low": None if high is None else value / 2, "high": high, "kind": "measured"}

    row = {"esync_loses_to": [
        {"variant": "local", "on": "time to target", "speedup": sp(0.45, 0.78), "significant": True},
        {"variant": "sync-fast", "on": "time to target", "speedup": sp(0.9, 1.2), "significant": False},
        {"variant": "async", "on": "time to target", "speedup": sp(0.27, None), "significant": False},
        {"variant": "async", "on": "final accuracy", "difference": [None, None], "significant": False},
        {"variant": "local", "on": "final accuracy", "difference": [-0.02, 0.01], "significant": False}]}
    assert report._losses(row) == (
        "standalone (fastest device) on time to target; Sync, fast devices only on time to target (within the 95% "
        "interval); Async on time to target (no interval: a side has one seed); Async on final accuracy (no "
        "interval: a side has one seed); standalone (fastest device) on final accuracy (within the 95% interval)")
    assert report._losses({"esync_loses_to": []}) == "nowhere measured"


def test_open_division_takes_each_variants_best_learning_rate_from_its_sweep(tmp_path):
    from bench import confirm

    out = str(tmp_path / "open")
    preset = presets.get("paper-sim-open")
    with pytest.raises(ConfigError, match="mxhet-bench sweep"):
        suite.run_suite(("table1",), preset, profiles.load("paper-sim"), out, models=("resnet18_v1",),
                        measure=lambda m, s, b, c: 0.1, run=None, log=lambda *_: None)
    lrs = []

    def fake_run(spec, run_dir, desc, position, leave):
        lrs.append((spec.mode, len(spec.slowdowns), spec.lr))
        summary = _seeded_summary(spec)
        if spec.lr != 0.03:   # 0.03 is every variant's best: the others never reach the target
            summary.update(time_to_target_s=None, curve=[[0.0, 0.1], [spec.time_budget, 0.5]], final_accuracy=0.5)
        return summary

    def fake_confirm(run_dir, summary):
        return confirm.confirm(summary, lambda i: summary["curve"][i][1])
    suite.run_suite((suite.SWEEP,), preset, profiles.load("paper-sim"), out, measure=lambda m, s, b, c: 0.1,
                    run=fake_run, log=lambda *_: None, command=["mxhet-bench", "sweep"], confirm_fn=fake_confirm)
    assert len(lrs) == 4 * 3 and {lr for _, _, lr in lrs} == {0.01, 0.03, 0.1}
    sweep = json.load(open(os.path.join(out, "sweep.json")))
    assert sweep["best_lrs"] == {"esync": 0.03, "local": 0.03, "sync-fast": 0.03, "async": 0.03}
    assert "Learning-rate sweep" in open(os.path.join(out, "report.md")).read()
    lrs.clear()
    suite.run_suite(("table1",), preset, profiles.load("paper-sim"), out, models=("resnet18_v1",), seeds=(0,),
                    measure=lambda m, s, b, c: 0.1, run=fake_run, log=lambda *_: None, confirm_fn=fake_confirm)
    assert {(mode, n): lr for mode, n, lr in lrs}[("esync", 6)] == 0.03
    assert {(mode, n): lr for mode, n, lr in lrs}[("dcasgd", 6)] == 0.1   # not swept: the preset's rate


def test_figure_3_averages_the_seeds_of_a_variant_on_their_common_times():
    from bench import plots
    t, mean, low, high = plots.mean_curve([[[0, 0.1], [10, 0.5], [20, 0.9]], [[0, 0.3], [5, 0.5], [15, 0.7]]])
    assert list(t) == [0, 5, 10, 15]                      # up to the shorter run's end
    assert list(mean) == pytest.approx([0.2, 0.4, 0.55, 0.7]) and list(low) == pytest.approx([0.1, 0.3, 0.5, 0.7])
    assert list(high) == pytest.approx([0.3, 0.5, 0.6, 0.7])


def _finished(spec, run_dir, desc=None, position=None, leave=None):
    """A simulator run as it leaves its directory (its summary, with the command bench.runner records)."""
    os.makedirs(run_dir, exist_ok=True)
    summary = dict(_seeded_summary(spec), sim={"wall_s": 1.0, "command": ["python", "-m", "mxhet.sim"]
                                               + spec.launch_argv(run_dir)[3:]})
    summary["command"] = spec.launch_argv(run_dir)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f)
    return summary


def _confirmed(run_dir, summary):
    """Every candidate holds on the whole test set; the record is written beside the run."""
    from bench import confirm
    record = confirm.confirm(summary, lambda i: summary["curve"][i][1])
    confirm._write(os.path.join(run_dir, confirm.FILE), record)
    return record


def test_report_only_writes_the_table_from_the_finished_runs_and_names_the_others(tmp_path, capsys, monkeypatch):
    """A bench that goes on over sessions is committed part-way with ``--report-only``: the finished and
    confirmed runs make the table, the others are listed by their run names (seeds included), none starts."""
    from bench import confirm

    out = str(tmp_path / "closed")
    suite.run_suite(("table1",), presets.get("paper-sim"), profiles.load("paper-sim"), out, models=("resnet18_v1",),
                    modes=("esync", "local"), seeds=(0,), run=_finished, confirm_fn=_confirmed, log=lambda *_: None)
    os.remove(os.path.join(out, "runs", "resnet18_v1-local-iid", confirm.FILE))   # finished, not confirmed
    monkeypatch.setattr(suite, "run_with_bar", lambda *a, **k: pytest.fail("--report-only started a run"))
    assert cli.main(["table1", "--preset", "paper-sim", "--models", "resnet18_v1", "--modes", "esync,local",
                     "--seeds", "0,1", "--report-only", "--out", out]) == 0
    assert "3 run(s) not finished" in capsys.readouterr().err   # both seed-1 runs, the unconfirmed one
    table = json.load(open(os.path.join(out, "table1.json")))
    assert [(r["mode"], r["seed"]) for r in table["runs"]] == [("esync", 0)]
    assert table["provenance"]["command"][-3:] == ["--report-only", "--out", out]
    text = open(os.path.join(out, "report.md")).read()
    assert "`resnet18_v1-esync-iid-seed1` failed: JobFailed: not finished yet" in text
    assert "`resnet18_v1-local-iid` failed: ConfigError:" in text and "not confirmed yet" in text
    assert "Machine (that wrote these results; it ran none of the runs):" in text
    assert cli.main(["table1", "--preset", "cpu", "--report-only", "--out", out]) == 2   # cluster runs are not kept
    assert "--report-only reports simulator runs" in capsys.readouterr().err


def test_a_run_whose_directory_is_gone_is_kept_from_the_experiment_json_if_its_command_is_the_same(
        tmp_path, capsys, monkeypatch):
    """A fresh clone has the committed table1.json but not every run directory: a re-render keeps those runs'
    records instead of dropping them, a resumed bench does not run them again, and a record made with
    another command is not taken for the run asked for."""
    out = str(tmp_path / "closed")
    args = dict(models=("resnet18_v1",), modes=("esync", "local"), seeds=(0, 1), confirm_fn=_confirmed,
                log=lambda *_: None)
    suite.run_suite(("table1",), presets.get("paper-sim"), profiles.load("paper-sim"), out, run=_finished, **args)
    before = json.load(open(os.path.join(out, "table1.json")))
    shutil.rmtree(os.path.join(out, "runs", "resnet18_v1-esync-iid-seed1"))   # never committed
    monkeypatch.setattr(suite, "run_with_bar", lambda *a, **k: pytest.fail("--report-only started a run"))
    assert cli.main(["table1", "--preset", "paper-sim", "--models", "resnet18_v1", "--modes", "esync,local",
                     "--seeds", "0,1", "--report-only", "--out", out]) == 0
    table = json.load(open(os.path.join(out, "table1.json")))
    kept = next(r for r in table["runs"] if r["key"] == "resnet18_v1-esync-iid-seed1")
    old = next(r for r in before["runs"] if r["key"] == "resnet18_v1-esync-iid-seed1")
    assert kept["kept_from"] == "table1.json" and kept["time_to_target_s"] == old["time_to_target_s"]
    assert kept["final_accuracy"] == old["final_accuracy"] and kept["curve"] == old["curve"]
    assert len(table["runs"]) == 4 and not table["failures"]
    assert "resnet18_v1-esync-iid-seed1" in table["resumed_runs"]
    row = next(r for r in table["rows"] if r["model"] == "resnet18_v1")
    assert row["variants"]["esync"]["time_to_target"]["n"] == 2

    # another bench reusing this one (--reuse) takes the record too, and the other runs from their directories
    reused = str(tmp_path / "curves")
    suite.run_suite(("table1",), presets.get("paper-sim"), profiles.load("paper-sim"), reused, resume=True,
                    reuse=(out,), run=lambda *a: pytest.fail("ran a run the reused bench has"), **args)
    table = json.load(open(os.path.join(reused, "table1.json")))
    kept = next(r for r in table["runs"] if r["key"] == "resnet18_v1-esync-iid-seed1")
    assert kept["kept_from"] == os.path.join(out, "table1.json") and kept["curve"] == old["curve"]
    assert len(table["runs"]) == 4 and not table["failures"]

    # resumed: runs nothing, the record is kept again (from the file just written)
    suite.run_suite(("table1",), presets.get("paper-sim"), profiles.load("paper-sim"), out, resume=True,
                    run=lambda *a: pytest.fail("a kept run ran again"), **args)
    assert len(json.load(open(os.path.join(out, "table1.json")))["runs"]) == 4

    # another budget is another run: the record is not it, and it is run
    ran = []

    def rerun(spec, run_dir, *rest):
        ran.append(os.path.basename(run_dir))
        return _finished(spec, run_dir, *rest)
    suite.run_suite(("table1",), presets.get("paper-sim"), profiles.load("paper-sim"), out, resume=True,
                    budget=500.0, run=rerun, **args)
    assert "resnet18_v1-esync-iid-seed1" in ran


def test_a_finished_run_records_its_provenance_and_a_kept_one_is_left_as_it_was(tmp_path):
    from bench.runner import JobSpec

    spec = JobSpec(mode="esync", slowdowns=(10, 1), engine="sim", seed=2)
    key = suite.RunKey("resnet18_v1", "esync", "iid", 2)
    out = str(tmp_path)

    def finished(spec_, run_dir, desc, position, leave):
        os.makedirs(run_dir, exist_ok=True)
        summary = {"final_accuracy": 0.8, "time_to_target_s": None, "train_time_s": 1.0,
                   "sim": {"wall_s": 1.0, "command": ["python", "-m", "mxhet.sim"] + spec_.launch_argv(run_dir)[3:]}}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f)
        return dict(summary, command=["not", "in", "the", "file"])

    records, failures = suite.execute([key], lambda k: spec, out, run=finished, name=lambda k: "run")
    assert not failures
    written = json.load(open(os.path.join(out, "runs", "run", "summary.json")))
    prov = written["provenance"]
    assert prov["seeds"] == [2] and prov["command"] == spec.launch_argv(os.path.join(out, "runs", "run"))
    assert prov["date"] and {"cpu", "cores", "mxnet", "python"} <= set(prov["machine"])
    assert "command" not in written and records[key][0]["provenance"] == prov   # the file keeps its own keys
    del written["provenance"]
    with open(os.path.join(out, "runs", "run", "summary.json"), "w") as f:
        json.dump(written, f)
    records, _ = suite.execute([key], lambda k: spec, out, run=finished, resume=True, name=lambda k: "run")
    assert records[key][0]["resumed"] and "provenance" not in json.load(open(os.path.join(out, "runs", "run",
                                                                                        "summary.json")))


def test_a_run_records_the_commit_its_process_started_on_and_the_one_it_was_written_on(tmp_path, monkeypatch):
    """A run lasts hours and the checkout may move on meanwhile: the provenance names the code the run's
    process loaded, and ``written_on`` the checkout the record was written from, where they differ."""
    from bench import provenance as prov_module
    from bench.runner import JobSpec

    checkout = {"state": ("a" * 40, False)}
    monkeypatch.setattr(prov_module, "git_state", lambda root=None: checkout["state"])
    spec = JobSpec(mode="esync", slowdowns=(10, 1), engine="sim", seed=0)

    def finished(spec_, run_dir, desc, position, leave):
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump({"final_accuracy": 0.8, "time_to_target_s": None}, f)
        checkout["state"] = next_state   # a commit while the run computes
        return {"final_accuracy": 0.8, "time_to_target_s": None}

    for index, next_state in enumerate([("b" * 40, False), ("b" * 40, False)]):
        key = suite.RunKey("resnet18_v1", "esync", "iid", index)
        records, failures = suite.execute([key], lambda k: spec, str(tmp_path), run=finished,
                                          name=lambda k: "run%d" % index)
        assert not failures
        prov = json.load(open(os.path.join(str(tmp_path), "runs", "run%d" % index, "summary.json")))["provenance"]
        if index == 0:   # started on a..., written from b...
            assert prov["commit"] == "a" * 40 and prov["written_on"] == {"commit": "b" * 40, "dirty": False}
        else:            # started and written on b...
            assert prov["commit"] == "b" * 40 and "written_on" not in prov
        assert records[key][0]["provenance"] == prov


def test_the_heterogeneity_benchs_117x_runs_are_the_open_divisions_and_reuse_takes_them(tmp_path):
    """Both benches run the open division's preset on the paper's profile, on one snapshot grid: the
    heterogeneity bench's 117x run of a variant at a rate is the same run as the open division's of that mode
    and rate, under another name, so ``--reuse`` copies it instead of running it again."""
    from bench import heterogeneity as het

    preset = presets.get("paper-sim-open")
    record = het.model_record(preset, "resnet18_v1")
    budget = preset.budget_for("resnet18_v1")
    pairs = {("paper", "esync"), ("standalone", presets.STANDALONE), ("fast-only", presets.FAST_SYNC),
             ("async", "async"), ("dcasgd", "dcasgd"), ("adsp", "adsp")}
    for variant, mode in pairs:
        het_spec = het.job_spec(het.RunKey("resnet18_v1", 117, variant, "iid", 1, 0.03), preset)
        open_spec = suite.job_spec(suite.RunKey("resnet18_v1", mode, "iid", 1, 0.03), preset,
                                   profiles.load(preset.profile), record, budget, engine="sim")
        assert suite._canonical(het_spec.launch_argv("a")) == suite._canonical(open_spec.launch_argv("b")), variant
    assert open_spec.eval_interval == pytest.approx(0.5 * record["base_iteration_s"])

    other = tmp_path / "het" / "runs" / "resnet18_v1-117x-paper-iid-lr0.03"
    other.mkdir(parents=True)
    spec = het.job_spec(het.RunKey("resnet18_v1", 117, "paper", "iid", 0, 0.03), preset)
    summary = {"final_accuracy": 0.9, "time_to_target_s": 12.0, "train_time_s": budget, "curve": [[0.0, 0.1]],
               "sim": {"wall_s": 9.0, "command": ["python", "-m", "mxhet.sim"] + spec.launch_argv(str(other))[3:]}}
    (other / "summary.json").write_text(json.dumps(summary))
    (other / "confirmation.json").write_text("{}")
    key = suite.RunKey("resnet18_v1", "esync", "iid", 0, 0.03)   # the open division's run of it, its own name
    wanted = suite.job_spec(key, preset, profiles.load(preset.profile), record, budget, engine="sim")
    records, failures = suite.execute(
        [key], lambda k: wanted, str(tmp_path / "open"), resume=True,
        run=lambda *a: pytest.fail("ran a run that another bench has"), reuse=suite.Reusable([str(tmp_path / "het")]))
    assert not failures and records[key][0]["reused_from"] == str(other)
    assert sorted(os.listdir(tmp_path / "open" / "runs" / "resnet18_v1-esync-iid-lr0.03")) == [
        "confirmation.json", "summary.json"]
    different = dataclasses.replace(wanted, seed=5)
    assert suite.Reusable([str(tmp_path / "het")]).take(different, str(tmp_path / "x")) is None
    with pytest.raises(ConfigError, match="no runs/ directory"):
        suite.Reusable([str(tmp_path / "nowhere")])


def test_figure_3_says_a_panel_is_not_measured_yet_instead_of_leaving_it_empty(tmp_path, monkeypatch):
    from bench import plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    runs = [{"mode": "esync", "dist": "iid", "curve": [[0.0, 0.1], [10.0, 0.8]]}]
    plots.curves({"runs": runs, "target_accuracy": 0.8, "figure_model": "resnet18_v1", "engine": "sim"},
                 str(tmp_path / "fig3.png"))
    iid, non_iid = figures[0].axes
    assert [t.get_text() for t in non_iid.texts] == ["not measured yet"] and not iid.texts


@pytest.mark.timeout(60)
def test_an_interruption_a_finalizer_swallowed_still_stops_the_parallel_bench():
    """A signal handler that runs inside an object's ``__del__`` (MXNet frees its handles there) raises into
    a finalizer, which prints the exception and drops it: the bench must stop all the same (a clean run
    once went on for 180 s after its test's signal)."""
    from bench import runner

    class Stopped(Exception):
        pass

    def fn(item):
        if item == 0:
            try:
                runner.interrupt(Stopped("signal"))   # raised where nothing catches it for the bench: dropped
            except Stopped:
                pass
        while not runner.STOP.wait(0.05):
            pass
        raise runner.Interrupted("ended")

    with pytest.raises(Stopped):
        runner.run_each([0, 1], fn, 2)
    assert runner.STOP.is_set() and not runner._SIGNALLED


def test_a_run_after_an_interrupted_one_starts_its_jobs_one_at_a_time_too():
    """An interrupted parallel run leaves STOP set for its threads; the next run in the same process, with
    one job at a time, must still start its jobs (a test of the heterogeneity bench once found every job
    'not started' after the test above had run in its process)."""
    from bench import runner

    runner.STOP.set()

    def fn(item):
        if runner.STOP.is_set():   # as run_job refuses to start a job
            raise runner.Interrupted("not started")
        return item

    assert runner.run_each([1, 2], fn, 1) == [1, 2]

