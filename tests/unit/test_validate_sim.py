"""mxhet-bench validate-sim's arithmetic and the bench's engine plumbing (no jobs run)."""
import json
import os
import sys

import mxnet as mx
import pytest

from bench import cli, presets, profiles, suite, validate
from bench.runner import JobSpec
from mxhet.errors import ConfigError


def _summary(iters, rounds, ratios, curve, time_s=60.0):
    return {"train_time_s": time_s, "curve": curve,
            "workers": [{"slot": i, "local_iters": [k] * r, "rounds": r, "compute_ratio": c}
                        for i, (k, r, c) in enumerate(zip(iters, rounds, ratios))]}


def test_compare_applies_each_tolerance():
    cluster = _summary([9, 1], [100, 100], [0.90, 0.95], [[0, 0.1], [30, 0.6], [60, 0.8]])
    close = _summary([9.5, 1], [105, 105], [0.93, 0.97], [[0, 0.1], [20, 0.5], [40, 0.7], [60, 0.79]])
    figures = validate.compare(cluster, close, 60.0)
    assert all(f["agree"] for f in figures), [f for f in figures if not f["agree"]]
    acc = [f for f in figures if f["figure"] == "accuracy"][0]
    assert acc["points"] == 2 and acc["mean_abs_gap"] == pytest.approx((abs(0.6 - 0.6) + 0.01) / 2)
    far = _summary([11, 1], [89, 89], [0.84, 0.95], [[0, 0.1], [60, 0.7]])
    bad = {(f["figure"], f["slot"]) for f in validate.compare(cluster, far, 60.0) if not f["agree"]}
    assert bad == {("local_iters_mean", 0), ("rounds_per_min", 0), ("rounds_per_min", 1), ("compute_ratio", 0),
                   ("accuracy", None)}


def test_no_matching_point_after_the_warm_up_is_a_disagreement():
    cluster = _summary([1], [10], [0.5], [[0, 0.1], [5, 0.2]])
    acc = [f for f in validate.compare(cluster, cluster, 60.0) if f["figure"] == "accuracy"][0]
    assert acc["points"] == 0 and not acc["agree"]


def test_validate_run_writes_the_report_with_agree(tmp_path):
    calls = []

    def fake_run(spec, run_dir, desc):
        calls.append((spec.engine, spec.mode, spec.launch_argv(run_dir)[:3]))
        s = _summary([3, 1], [50, 50], [0.9, 0.9], [[0, 0.1], [30, 0.7], [60, 0.8]])
        s["final_accuracy"] = 0.8
        return s
    cases = validate.default_cases(60.0)
    result = validate.run(cases, ["esync"], "smallcnn", 60.0, 0.05, str(tmp_path), run_job=fake_run,
                          log=lambda *_: None, command=["mxhet-bench", "validate-sim"])
    assert result["agree"] is True and len(result["results"]) == 2
    assert [c[0] for c in calls] == ["cluster", "sim"] * 2
    assert calls[0][2][2] == "mxhet.launcher" and calls[1][2][2] == "mxhet.sim"
    data = json.loads((tmp_path / "validate-sim.json").read_text())
    assert data["agree"] is True and data["engine"] == "both" and data["tolerances"]["compute_ratio"]
    assert "**Overall: the engines agree**" in (tmp_path / "validate-sim.md").read_text()


def test_a_job_spec_runs_on_either_engine(tmp_path):
    spec = JobSpec(mode="esync", slowdowns=(1.0, 4.0), model="resnet18_v1", time_budget=30, input_size=16,
                   launcher_args=("--base-iter", "0.1", "--omp-threads", "1", "--adsp-period", "2"),
                   contexts=("cpu", "gpu(0)"), engine="sim", sim_args=("--stop-at-target",))
    argv = spec.launch_argv(str(tmp_path))
    assert argv[:3] == [sys.executable, "-m", "mxhet.sim"]
    assert "--omp-threads" not in argv and argv[argv.index("--base-iter") + 1] == "0.1"
    assert argv[argv.index("--contexts") + 1] == "gpu(0)" and "--stop-at-target" in argv
    from mxhet.sim import cli as sim_cli
    args = sim_cli.build_parser().parse_args(argv[3:])     # the simulator takes every flag given
    assert args.num_workers == 2 and args.model == "resnet18_v1" and args.adsp_period == 2.0
    spec.engine = "cluster"
    argv = spec.launch_argv(str(tmp_path))
    assert argv[2] == "mxhet.launcher" and "--omp-threads" in argv and "mxhet.train" in argv


def test_paper_sim_preset_is_the_papers_profile_in_virtual_time():
    preset = presets.get("paper-sim")
    profile = profiles.load(preset.profile)
    # the closed division: the paper's settings, every run to its budget, confirmed times, 3 seeds
    assert preset.engine == "sim" and not preset.stop_at_target and preset.confirm and preset.division == "closed"
    assert profile.slowdowns == (117.0, 117.0, 1.0, 1.0, 1.0, 1.0) and set(profile.contexts) == {"cpu"}
    assert preset.batch_size == 64 and set(preset.models) == set(presets.PAPER_ORDER)
    assert set(preset.lrs.values()) == {0.001} and preset.seeds == (0, 1, 2) and not preset.max_iterations
    assert preset.budget_of("resnet18_v1", "esync") == preset.budget_of("resnet18_v1", "local")   # common budget
    assert {"sync-fast", "local", "async", "dcasgd", "adsp", "localsgd"} <= set(
        preset.table_modes_for("resnet18_v1") + (presets.STANDALONE,))


def _finished(spec):
    """The summary a finished simulator run of ``spec`` writes (what a fake run returns)."""
    n = 1 if spec.mode == "local" else len(spec.slowdowns)
    return {"model": spec.model, "mode": spec.mode, "dist": spec.dist, "time_to_target_s": 10.0,
            "final_accuracy": 0.81, "train_time_s": 20.0, "curve": [[0, 0.1], [20, 0.81]],
            "workers": [{"slot": i, "rank": i, "samples": 64, "local_iters": [1], "iterations": 1,
                         "compute_ratio": 0.5, "bytes_pushed": 1, "bytes_pulled": 1, "slowdown": 1.0,
                         "rounds": 1, "context": "cpu", "overruns": 0} for i in range(n)]}


def test_every_bench_json_records_its_engine(tmp_path):
    def fake_run(spec, run_dir, desc, position, leave):
        assert spec.engine == "sim" and "--stop-at-target" in spec.sim_args
        return _finished(spec)
    out = str(tmp_path / "out")
    suite.run_suite(("table1",), presets.get("paper-sim-lr0.1"), profiles.load("paper-sim"), out,
                    models=("resnet18_v1",),
                    measure=lambda m, s, b, c: 0.1, run=fake_run, log=lambda *_: None, command=["mxhet-bench"])
    data = json.load(open(os.path.join(out, "table1.json")))
    assert data["engine"] == "sim" and data["profile"]["calibration"]["resnet18_v1"]["base_iteration_s"] == 0.1
    assert "Engine: **sim**" in open(os.path.join(out, "report.md")).read()


def test_paper_sim_gpu_is_paper_sim_at_the_papers_sizes_on_the_gpu(tmp_path):
    preset, cpu = presets.get("paper-sim-gpu"), presets.get("paper-sim-lr0.1")
    assert preset.engine == "sim" and preset.stop_at_target and preset.max_iterations == cpu.max_iterations
    assert preset.input_sizes["resnet18_v1"] == 224 and preset.input_sizes["inceptionv3"] == 299
    assert preset.default_models() == presets.PAPER_ORDER and not preset.iteration_s   # measured on the GPU
    profile = profiles.load(preset.profile)
    assert profile.slowdowns == profiles.load(cpu.profile).slowdowns
    record = {"base_iteration_s": 0.02, "input_size": 224}
    spec = suite.job_spec(suite.RunKey("resnet18_v1", "esync", "iid"), preset, profile, record, 7200.0, 0,
                          engine="sim")
    argv = spec.launch_argv("out")
    assert argv[argv.index("--contexts") + 1] == "gpu(0)" and argv[argv.index("--input-size") + 1] == "224"
    if mx.context.num_gpus() == 0:     # refused before any run on a machine without a GPU
        with pytest.raises(ConfigError, match="gpu"):
            suite.run_suite(("table1",), preset, profile, str(tmp_path), log=lambda *_: None)


def test_paper_sim_runs_inception_only_when_asked(tmp_path):
    """Inception-v3 is opt-in in paper-sim: the default bench leaves it out, and Table 1 says why."""
    preset = presets.get("paper-sim-lr0.1")
    assert "inceptionv3" in presets.get("paper-sim").opt_in
    assert "inceptionv3" not in preset.default_models() and "inceptionv3" in preset.models
    ran = []

    def fake_run(spec, run_dir, desc, position, leave):
        ran.append(spec.model)
        return _finished(spec)

    def bench(out, models):
        suite.run_suite(("table1",), preset, profiles.load("paper-sim"), out, models=models,
                        measure=lambda m, s, b, c: 0.1, run=fake_run, log=lambda *_: None, command=["mxhet-bench"])
        return json.load(open(os.path.join(out, "table1.json")))

    data = bench(str(tmp_path / "default"), None)
    assert set(ran) == set(preset.default_models()) and "inceptionv3" not in ran
    assert [s["model"] for s in data["skipped"]] == ["inceptionv3"]
    assert data["skipped"][0]["reason"].startswith("opt-in")
    report = open(os.path.join(str(tmp_path / "default"), "report.md")).read()
    assert "| Inception-v3 | skipped |" in report and "`inceptionv3`: opt-in" in report
    del ran[:]
    data = bench(str(tmp_path / "asked"), ("alexnet", "inceptionv3"))
    assert set(ran) == {"alexnet", "inceptionv3"} and data["skipped"] == []
    assert {r["model"] for r in data["rows"]} == {"alexnet", "inceptionv3"}


def test_validate_sim_cli_refuses_bad_input(capsys):
    assert cli.main(["validate-sim", "--cases", "lab"]) == 2
    assert "--cases: unknown lab" in capsys.readouterr().err
