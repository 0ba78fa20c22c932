"""``mxhet-bench heterogeneity`` without processes: its plan (shared runs, the variants' commands), the
recommended flags on both engines' parsers, and the whole bench on fake runs (the JSON's fields, the best
alternative, the verdict, --seeds-best, the report and the figure)."""
import json
import os

import pytest

from bench import confirm, heterogeneity as het, presets
from mxhet.errors import ConfigError

BUDGET = 300.0
TIMES = {   # (profile, variant) -> virtual s to the target on seed 0 (None: never)
    (117, "recommended"): 15.0, (117, "paper"): 60.0, (117, "async"): 40.0, (117, "dcasgd"): None,
    (117, "adsp"): 90.0, (117, "dylu"): 35.0, (117, "fast-only"): 25.0, (117, "sync"): None,
    (2, "recommended"): 14.0, (2, "paper"): 30.0, (2, "async"): 18.0, (2, "dcasgd"): 19.0,
    (2, "adsp"): 40.0, (2, "dylu"): 16.0, (2, "fast-only"): 11.0, (2, "sync"): 24.0,
}
STANDALONE_S = 20.0


def _time(name, seed):
    parts = name.split("-")   # model, then standalone | fast, only4 | 117x, variant
    if parts[1] == "standalone":
        t = STANDALONE_S
    elif parts[1] == "fast":
        t = TIMES[(117 if parts[2] == "only4" else 2, "fast-only")]
    else:
        t = TIMES[(int(parts[1][:-1]), parts[2])]
    return None if t is None else t * (1 + 0.05 * seed)


def _summary(spec, name):
    t = _time(name, spec.seed)
    n = 1 if spec.mode == "local" else len(spec.slowdowns)
    curve = [[0.0, 0.1]] + ([[t, 0.81]] if t else []) + [[spec.time_budget, 0.86 if t else 0.7]]
    workers = [{"slot": i, "samples": 64, "local_iters": [1], "iterations": 10, "compute_ratio": 0.5,
                "bytes_pushed": 1, "bytes_pulled": 1, "slowdown": spec.slowdowns[i], "rounds": 1,
                "context": "cpu", "overruns": 0} for i in range(n)]
    return {"model": spec.model, "mode": spec.mode, "dist": spec.dist, "time_to_target_s": t,
            "final_accuracy": curve[-1][1], "train_time_s": spec.time_budget, "curve": curve, "workers": workers,
            "target_accuracy": spec.target_accuracy, "wall_s": 3.0}


def _fake_confirm(run_dir, summary):   # every candidate holds on the whole test set
    return confirm.confirm(summary, lambda i: summary["curve"][i][1])


def test_runs_without_slow_devices_run_once_for_every_profile_they_serve():
    planned = het.plan(["resnet18_v1"], [117, 10, 2], list(het.DEFAULT_VARIANTS), ["iid", "non-iid"], [0])
    assert planned["resnet18_v1-standalone-iid"][1] == [117, 10, 2]       # one device, all the data
    assert "resnet18_v1-standalone-non-iid" not in planned
    assert planned["resnet18_v1-fast-only4-iid"][1] == [117]              # the paper's 4 fast devices
    assert planned["resnet18_v1-fast-only2-non-iid"][1] == [10, 2]        # 2 fast devices in both
    assert planned["resnet18_v1-117x-recommended-non-iid"][1] == [117]
    assert len(planned) == 1 + 2 * 2 + 2 * 3 * 7
    seeds = het.plan(["resnet18_v1"], [2], ["recommended", "paper"], ["iid"], [0, 1])
    assert list(seeds) == ["resnet18_v1-2x-recommended-iid", "resnet18_v1-2x-paper-iid",
                           "resnet18_v1-2x-recommended-iid-seed1", "resnet18_v1-2x-paper-iid-seed1"]


def test_each_variant_s_command_and_one_snapshot_grid():
    preset = presets.get(het.PRESET)
    planned = het.plan(["resnet18_v1"], [117, 10, 2], list(het.DEFAULT_VARIANTS), ["iid"], [0])
    specs = {name: het.job_spec(key, preset, checkpoint_every_min=10) for name, (key, _) in planned.items()}
    assert {s.eval_interval for s in specs.values()} == {0.5 * preset.iteration_s["resnet18_v1"]}
    assert {s.time_budget for s in specs.values()} == {preset.budget_for("resnet18_v1")}
    rec = specs["resnet18_v1-117x-recommended-iid"].launch_argv("x")
    assert rec[rec.index("--sync") + 1] == "esync" and rec[-len(presets.RECOMMENDED_ARGS):] == list(
        presets.RECOMMENDED_ARGS)
    assert "--checkpoint-every-min" in rec          # a deadline run is checkpointed too
    paper = specs["resnet18_v1-117x-paper-iid"].launch_argv("x")
    assert "--checkpoint-every-min" in paper and "--round-deadline" not in paper
    assert specs["resnet18_v1-2x-paper-iid"].slowdowns == (2.0, 2.0, 1.0, 1.0)
    assert specs["resnet18_v1-10x-async-iid"].slowdowns == (10.0, 10.0, 1.0, 1.0)
    fast = specs["resnet18_v1-fast-only2-iid"]
    assert fast.mode == "sync" and fast.slowdowns == (1.0, 1.0)
    assert specs["resnet18_v1-standalone-iid"].slowdowns == (1.0,)
    assert "--stop-at-target" not in fast.sim_args          # every run goes on to its budget


def test_the_recommended_flags_are_flags_of_both_engines():
    from mxhet.policy.flags import resolve_args
    from mxhet.sim import cli as sim_cli
    from mxhet.train import build_parser

    args = build_parser().parse_args(["--sync", "esync", "--metrics-out", "x", *presets.RECOMMENDED_ARGS])
    options = resolve_args(args, "esync")
    assert (options["round_deadline"], options["round_length"]) == (8.0, 8.0)
    key = het.RunKey("smallcnn", 10, "recommended", "iid", 0)
    argv = het.job_spec(key, presets.get(het.PRESET), budget=2.0).launch_argv("x")
    job = sim_cli.make_job(sim_cli.build_parser().parse_args(argv[3:]))
    assert (job.mode_options["round_deadline"], job.mode_options["round_length"]) == (8.0, 8.0)


def test_whole_bench_on_fake_runs_writes_fields_best_alternative_verdict_report_and_figure(tmp_path):
    ran = []

    def fake_run(spec, run_dir, desc, position, leave):
        name = os.path.basename(run_dir)
        ran.append(name)
        return _summary(spec, name)

    out = str(tmp_path / "het")
    doc = het.run_bench(["resnet18_v1"], [117, 2], list(het.DEFAULT_VARIANTS), ["iid"], [0, 1, 2], out, seeds_best=True,
                        budget=BUDGET, sweep=None, command=["mxhet-bench", "heterogeneity"], run=fake_run,
                        confirm_fn=_fake_confirm, log=lambda *_: None)
    # seed 0 of everything (standalone once for both profiles), then seeds 1 and 2 of recommended and the
    # best alternative of each cell only
    assert len([n for n in ran if "seed" not in n]) == 1 + 2 + 2 * 7
    assert sorted(n for n in ran if "seed" in n) == sorted(
        "resnet18_v1-%s-iid-seed%d" % (v, s) for s in (1, 2)
        for v in ("117x-recommended", "standalone", "2x-recommended", "fast-only2"))
    saved = json.load(open(os.path.join(out, "heterogeneity.json")))
    assert saved["recommended_args"] == list(presets.RECOMMENDED_ARGS)
    assert saved["provenance"]["seeds"] == [0, 1, 2] and saved["provenance"]["date"]
    assert {r["profile"] for r in saved["runs"]} == {117, 2}
    assert {r["variant"] for r in saved["runs"]} == set(het.DEFAULT_VARIANTS)
    assert all(r["confirmation"] is not None for r in saved["runs"])
    standalone = [r for r in saved["runs"] if r["run"] == "resnet18_v1-standalone-iid"]
    assert sorted(r["profile"] for r in standalone) == [2, 117] and standalone[0]["shared_by"] == [2, 117]
    assert saved["lrs"]["resnet18_v1"]["recommended"] == 0.1 and "no sweep committed" in saved["lr_source"]
    cells = {(c["profile"], c["dist"]): c for c in doc["cells"]}
    assert cells[(117, "iid")]["best_alternative"] == "standalone"        # 20 s, before fast-only's 25 s
    v117 = cells[(117, "iid")]["verdict"]
    assert v117["no_later"] is True and v117["speedup"]["value"] == pytest.approx(20 / 15)
    assert cells[(117, "iid")]["variants"]["recommended"]["time_to_target"]["n"] == 3
    assert cells[(117, "iid")]["variants"]["dcasgd"]["time_to_target"]["kind"] == "none_reached"
    v2 = cells[(2, "iid")]["verdict"]
    assert cells[(2, "iid")]["best_alternative"] == "fast-only" and v2["no_later"] is False
    assert v2["late_by_s"] == pytest.approx(3.0 * 1.05) and v2["speedup"]["value"] == pytest.approx(11 / 14)
    text = open(os.path.join(out, "heterogeneity.md")).read()
    assert "## resnet18_v1, 117x, iid" in text and "standalone (best alternative)" in text
    assert "**no later**" in text and "**later** by 3." in text and "`%s`" % " ".join(presets.RECOMMENDED_ARGS) in text
    assert "not reached (0/1" in text          # DC-ASGD at 117x
    assert cells[(2, "iid")]["capacity"]["bound"] == pytest.approx(1.5)
    assert cells[(2, "iid")]["capacity"]["speedup"]["value"] == pytest.approx(11 / 14)   # fast-only is the best
    assert "Against Sync over the fast devices only: all devices together have 1.5x" in text
    with open(os.path.join(out, "heterogeneity.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # a later invocation keeps the runs it does not run again
    het.run_bench(["resnet18_v1"], [2], ["paper"], ["iid"], [0], out, budget=BUDGET, sweep=None, run=fake_run,
                  confirm_fn=_fake_confirm, log=lambda *_: None)
    again = json.load(open(os.path.join(out, "heterogeneity.json")))
    assert len(again["runs"]) == len(saved["runs"])


def test_verdict_with_censored_runs_and_missing_sides():
    def runs(times, end=300.0):
        return [{"time_to_target_s": t, "train_time_s": end, "final_accuracy": 0.85} for t in times]

    later = het.verdict(runs([None, None]), runs([20.0, 22.0]))
    assert later["no_later"] is False and later["late_by_s"] is None and "later" in later["text"]
    assert het.verdict(runs([None]), runs([None]))["no_later"] is None
    assert het.verdict(runs([10.0, 11.0]), runs([None, 30.0]))["no_later"] is True
    assert het.verdict([], runs([1.0]))["text"] == "not yet measured"


def test_verdict_gives_the_final_accuracy_gap_its_interval_over_seeds():
    def runs(accuracies):
        return [{"time_to_target_s": 10.0, "train_time_s": 300.0, "final_accuracy": a} for a in accuracies]

    close = het.verdict(runs([0.9031, 0.9044, 0.9052]), runs([0.9081, 0.9071, 0.9105]))
    low, high = close["accuracy_gap_interval"]
    assert close["accuracy_gap"] == pytest.approx(-0.00433, abs=1e-5) and low < close["accuracy_gap"] < high
    assert "final accuracy -0.004 [%+.3f, %+.3f] (0.904 vs 0.909; " % (low, high) in close["text"]
    assert ("within the 95% interval" in close["text"].split("final accuracy")[1]) == (low <= 0 <= high)
    apart = het.verdict(runs([0.900, 0.901, 0.902]), runs([0.910, 0.911, 0.912]))
    assert apart["accuracy_gap_interval"][1] < 0 and "the 95% interval excludes 0" in apart["text"]
    one = het.verdict(runs([0.903]), runs([0.908, 0.907]))
    assert one["accuracy_gap_interval"] is None and "no interval: a side has one seed" in one["text"].split(";")[-1]


def test_a_cell_the_recommended_esync_loses_says_why_or_that_it_is_not_yet_analysed(tmp_path):
    def runs(times, accuracies):
        return [{"time_to_target_s": t, "train_time_s": 300.0, "final_accuracy": a} for t, a in zip(times, accuracies)]

    base = {"model": "resnet18_v1_gn", "profile": 10, "dist": "non-iid"}
    wins = dict(base, verdict=het.verdict(runs([10.0, 11.0], [0.9, 0.91]), runs([20.0, 21.0], [0.9, 0.91])))
    later = dict(base, verdict=het.verdict(runs([30.0, 31.0], [0.9, 0.91]), runs([20.0, 21.0], [0.9, 0.91])))
    lower = dict(base, verdict=het.verdict(runs([10.0, 11.0, 12.0], [0.80, 0.801, 0.802]),
                                           runs([20.0, 21.0, 22.0], [0.90, 0.901, 0.902])))
    goal = dict(wins, goal={"sync": later["verdict"], "async": wins["verdict"]})
    assert not het.loses(wins) and het.loses(later) and het.loses(lower) and het.loses(goal)
    assert het.why_line(wins, {}) is None
    assert het.why_line(later, {}) == ("Why it loses: not yet analysed (no entry `resnet18_v1_gn 10x non-iid` in "
                                       "why.json).")
    why = {"resnet18_v1_gn 10x non-iid": {"why": "the slow devices hold half the labels",
                                          "evidence": ["bench/results/heterogeneity-explore/README.md"]}}
    assert het.why_line(goal, why) == (
        "Why it loses: the slow devices hold half the labels (the runs: [bench/results/heterogeneity-explore/"
        "README.md](../heterogeneity-explore/README.md))")
    assert het.load_why(str(tmp_path)) == {}
    (tmp_path / het.WHY_FILE).write_text(json.dumps(why))
    assert het.load_why(str(tmp_path)) == why
    (tmp_path / het.WHY_FILE).write_text(json.dumps({"x": "not an entry"}))
    with pytest.raises(ValueError, match="expected"):
        het.load_why(str(tmp_path))
    # the committed explanations are well formed, and name files that exist
    committed = het.load_why(os.path.join(het.ROOT, het.DEFAULT_OUT))
    assert all(os.path.exists(os.path.join(het.ROOT, e)) for entry in committed.values() for e in entry["evidence"])


def test_the_capacity_bound_is_the_profiles_throughput_over_its_fast_devices_and_the_report_says_how_close():
    assert het.capacity_bound(10) == pytest.approx(2.2 / 2) and het.capacity_bound(2) == pytest.approx(1.5)
    assert het.capacity_bound(117) == pytest.approx((4 + 2 / 117) / 4)

    def runs(times):
        return [{"time_to_target_s": t, "train_time_s": 540.0, "final_accuracy": 0.9} for t in times]

    cap = het.capacity(runs([12.1, 14.7, 14.7]), runs([19.6, 19.6, 21.5]), 10)
    assert cap["speedup"]["value"] == pytest.approx((19.6 * 19.6 * 21.5) ** (1 / 3) / (12.1 * 14.7 * 14.7) ** (1 / 3))
    assert cap["of_bound"] == pytest.approx(cap["speedup"]["value"] / 1.1)
    line = het._capacity_line({"profile": 10, "capacity": cap})
    assert "all devices together have 1.1x" in line and "%.2f of the bound (beyond it" % cap["of_bound"] in line
    assert "(the 95% interval excludes 1)" in line or "(within the 95% interval)" in line
    none = het.capacity([], runs([19.6]), 10)
    assert none["speedup"] is None and none["bound"] == pytest.approx(1.1)
    assert het._capacity_line({"profile": 10, "capacity": none}).endswith("not measured (a side has no run).")
    slower = het.capacity(runs([30.0]), runs([19.6]), 2)
    assert slower["of_bound"] == pytest.approx(19.6 / 30.0 / 1.5)
    assert "no interval: a side has one seed" in het._capacity_line({"profile": 2, "capacity": slower})


def test_bad_arguments_are_refused_by_name():
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    for flag, value in (("--profiles", "117,5"), ("--variants", "esync"), ("--models", "vgg"),
                        ("--dists", "group"), ("--seeds", "0,-1")):
        args = parser.parse_args([flag, value])
        with pytest.raises(ConfigError, match=flag):
            het.run(args)
    with pytest.raises(ConfigError, match="sweep"):
        het.learning_rates(presets.get(het.PRESET), "/nonexistent")


def test_the_predicted_cost_counts_every_device_s_iterations_at_the_whole_budget():
    preset = presets.get(het.PRESET)
    planned = het.plan(["resnet18_v1", "smallcnn"], [117, 10], ["paper", "standalone", "fast-only"], ["iid"], [0])
    costs = {"resnet18_v1": {"iteration_cpu_s": 0.1, "snapshot_cpu_s": 1.0, "fixed_cpu_s": 10.0,
                             "fixed_snapshots": 2}}
    rows = {r["run"]: r for r in het.predict(planned, preset, costs)}
    assert not any(name.startswith("smallcnn") for name in rows)      # no measured cost
    fast = preset.budget_for("resnet18_v1") / preset.iteration_s["resnet18_v1"]   # one fast device's iterations
    assert rows["resnet18_v1-standalone-iid"]["iterations"] == pytest.approx(fast, abs=1)
    assert rows["resnet18_v1-fast-only4-iid"]["iterations"] == pytest.approx(4 * fast, abs=1)
    assert rows["resnet18_v1-117x-paper-iid"]["iterations"] == pytest.approx((4 + 2 / 117) * fast, abs=1)
    assert rows["resnet18_v1-10x-paper-iid"]["iterations"] == pytest.approx((2 + 2 / 10) * fast, abs=1)
    r = rows["resnet18_v1-standalone-iid"]
    assert r["cpu_s"] == pytest.approx(0.1 * r["iterations"] + 10.0 + (r["snapshots"] - 2 + 20) * 1.0)


def test_where_no_alternative_reached_the_target_the_best_is_the_most_accurate():
    def row(variant, acc, t=None):
        return {"model": "m", "profile": 10, "dist": "iid", "variant": variant, "mode": "x", "time_to_target_s": t,
                "train_time_s": 100.0 if variant != "dylu" else 50.0, "final_accuracy": acc}
    rows = [row("standalone", 0.70), row("async", 0.75), row("dylu", 0.6), row("recommended", 0.9, 10.0)]
    assert het.best_alternative(rows, "m", 10, "iid") == "async"
    rows.append(row("adsp", 0.5, 90.0))
    assert het.best_alternative(rows, "m", 10, "iid") == "adsp"        # the only one that reached it
    assert het.best_alternative(rows, "m", 117, "iid") is None


def test_a_run_kept_from_an_earlier_invocation_keeps_its_stamp_and_wall_time():
    old = {"run": "r", "profile": 2, "model": "m", "dist": "iid", "variant": "paper", "command": ["a"],
           "recorded": {"commit": "old"}, "wall_s": 900.0, "resumed": False}
    kept = dict(old, recorded={"commit": "new"}, wall_s=600.0, resumed=True)      # --resume found it finished
    assert het.merge([old], [kept])[0]["recorded"] == {"commit": "old"}
    assert het.merge([old], [kept])[0]["wall_s"] == 900.0
    again = dict(kept, command=["b"])                                              # another command: run again
    assert het.merge([old], [again])[0]["recorded"] == {"commit": "new"}


def test_rows_of_a_superseded_recommended_candidate_are_dropped_and_the_others_kept():
    base = {"profile": 10, "model": "m", "dist": "iid", "command": ["a"], "recorded": {}, "resumed": False}
    superseded = dict(base, run="r-rec", variant="recommended", extra_args=["--round-deadline", "2.5"])
    current = dict(base, run="r-rec2", variant="recommended", extra_args=list(presets.RECOMMENDED_ARGS))
    paper = dict(base, run="r-paper", variant="paper", extra_args=[])
    assert sorted(r["run"] for r in het.merge([superseded, current, paper], [])) == ["r-paper", "r-rec2"]


def test_report_only_starts_and_scores_nothing(tmp_path):
    from bench.runner import JobFailed
    with pytest.raises(JobFailed, match="not finished"):
        het.not_run(None, str(tmp_path), "", 0, False)
    summary = {"curve": [[0.0, 0.1]], "train_time_s": 1.0}
    with pytest.raises(ConfigError, match="not confirmed yet"):
        het.recorded_confirmation(str(tmp_path), summary)
    record = {"curve_points": 1, "train_time_s": 1.0, "time_to_target_s": None}
    (tmp_path / confirm.FILE).write_text(json.dumps(record))
    assert het.recorded_confirmation(str(tmp_path), summary) == record


# --lrs: the time of a run is _time's at its default rate (0.1) times LR_FACTOR[(where, lr)]; a run that never
# reaches the target ends at LR_ACCURACY[lr]
LR_FACTOR = {(117, 0.01): 2.0, (117, 0.03): 0.5, (117, 0.1): 1.0,      # 117x: best at 0.03
             (2, 0.01): 2.0, (2, 0.03): 1.5, (2, 0.1): 1.0,            # 2x: best at the default
             ("standalone", 0.01): 0.8, ("standalone", 0.03): 0.9, ("standalone", 0.1): 1.0}
LR_ACCURACY = {0.01: 0.75, 0.03: 0.72, 0.1: 0.70}


def _lr_run(ran):
    def fake_run(spec, run_dir, desc, position, leave):
        name = os.path.basename(run_dir)
        ran.append(name)
        summary = _summary(spec, name)
        where = ("standalone" if "standalone" in name else 117 if "117x" in name or "fast-only4" in name else 2)
        t = summary["time_to_target_s"]
        if t is None:
            summary["curve"][-1][1] = summary["final_accuracy"] = LR_ACCURACY[spec.lr]
        else:
            t *= LR_FACTOR[(where, spec.lr)]
            summary["curve"][1][0] = summary["time_to_target_s"] = t
        return summary
    return fake_run


def test_run_names_get_a_suffix_only_at_a_rate_other_than_the_default():
    key = het.RunKey("resnet18_v1", 10, "recommended", "iid", 0)
    assert het.run_name(key) == "resnet18_v1-10x-recommended-iid"
    assert het.run_name(key._replace(lr=0.03)) == "resnet18_v1-10x-recommended-iid-lr0.03"
    assert het.run_name(key._replace(lr=0.03, seed=2)) == "resnet18_v1-10x-recommended-iid-lr0.03-seed2"
    planned = het.plan(["resnet18_v1"], [117, 10], ["standalone", "paper"], ["iid"], [0], [0.01, 0.1],
                       lambda model, variant: 0.1)
    assert list(planned) == ["resnet18_v1-standalone-iid-lr0.01", "resnet18_v1-standalone-iid",
                             "resnet18_v1-117x-paper-iid-lr0.01", "resnet18_v1-117x-paper-iid",
                             "resnet18_v1-10x-paper-iid-lr0.01", "resnet18_v1-10x-paper-iid"]
    assert planned["resnet18_v1-standalone-iid-lr0.01"][1] == [117, 10]     # one sweep for both profiles
    assert planned["resnet18_v1-standalone-iid"][0].lr is None              # the default: today's run


def test_lrs_sweep_the_first_seed_and_run_the_others_at_each_cell_s_best_rate(tmp_path):
    ran = []
    out = str(tmp_path / "het")
    doc = het.run_bench(["resnet18_v1"], [117, 2], list(het.DEFAULT_VARIANTS), ["iid"], [0, 1], out, budget=BUDGET,
                        sweep=None, run=_lr_run(ran), confirm_fn=_fake_confirm, lrs=[0.01, 0.03, 0.1],
                        log=lambda *_: None)
    first = [n for n in ran if "seed" not in n]
    assert len(first) == len(set(first)) == 3 * (1 + 2 + 2 * 7)       # standalone's sweep runs once for both
    assert {"resnet18_v1-117x-recommended-iid-lr0.03", "resnet18_v1-117x-recommended-iid",
            "resnet18_v1-standalone-iid-lr0.01", "resnet18_v1-fast-only2-iid-lr0.03"} <= set(first)
    later = sorted(n for n in ran if "seed" in n)
    assert len(later) == 1 + 2 + 2 * 7
    assert {"resnet18_v1-117x-recommended-iid-lr0.03-seed1",        # 117x: every variant best at 0.03
            "resnet18_v1-fast-only4-iid-lr0.03-seed1",
            "resnet18_v1-117x-dcasgd-iid-lr0.01-seed1",             # never reached: the most accurate rate
            "resnet18_v1-2x-recommended-iid-seed1",                 # 2x: best at the default, today's name
            "resnet18_v1-fast-only2-iid-seed1",
            "resnet18_v1-standalone-iid-lr0.01-seed1"} <= set(later)
    saved = json.load(open(os.path.join(out, "heterogeneity.json")))
    assert all(r["lr"] == (float(r["run"].split("-lr")[1].split("-")[0]) if "-lr" in r["run"] else 0.1)
               for r in saved["runs"])
    assert saved["lr_sweep"] == [0.01, 0.03, 0.1]
    cells = {(c["profile"], c["dist"]): c for c in doc["cells"]}
    rec = cells[(117, "iid")]["variants"]["recommended"]
    assert rec["best_lr"] == 0.03 and rec["sweep"]["seed"] == 0
    assert rec["sweep"]["lrs"] == {
        "0.01": {"run": "resnet18_v1-117x-recommended-iid-lr0.01", "time_to_target_s": 30.0, "final_accuracy": 0.86},
        "0.03": {"run": "resnet18_v1-117x-recommended-iid-lr0.03", "time_to_target_s": 7.5, "final_accuracy": 0.86},
        "0.1": {"run": "resnet18_v1-117x-recommended-iid", "time_to_target_s": 15.0, "final_accuracy": 0.86}}
    # the tables use the best rate's runs only: both seeds at 0.03
    assert rec["seeds"] == [0, 1] and rec["time_to_target"]["mean"] == pytest.approx(7.5 * (1 + 1.05) / 2)
    assert cells[(117, "iid")]["variants"]["dcasgd"]["best_lr"] == 0.01
    assert cells[(2, "iid")]["variants"]["recommended"]["best_lr"] == 0.1
    assert {c["variants"]["standalone"]["best_lr"] for c in doc["cells"]} == {0.01}
    # the best alternative and the verdict at each variant's best rate: fast-only4 at 0.03 (12.5 s), ahead of
    # standalone at 0.01 (16 s) and of every alternative at 0.1
    assert cells[(117, "iid")]["best_alternative"] == "fast-only"
    assert cells[(117, "iid")]["verdict"]["speedup"]["value"] == pytest.approx(12.5 / 7.5)
    text = open(os.path.join(out, "heterogeneity.md")).read()
    section = text.split("## resnet18_v1, 117x, iid")[1].split("## ")[0]
    assert "Learning-rate sweep (seed 0" in section and "| variant | lr 0.01 | lr 0.03 | lr 0.1 |" in section
    assert "| recommended | 30.0 s, 0.860 | **7.5 s, 0.860** | 15.0 s, 0.860 |" in section
    assert "| dcasgd | **not reached, 0.750** | not reached, 0.720 | not reached, 0.700 |" in section
    assert "| recommended | 0.03 | 0,1 | 2/2 |" in section              # the main table's lr: the best
    assert "| recommended | 0.1 | 0,1 | 2/2 |" in text.split("## resnet18_v1, 2x, iid")[1]


def test_lrs_with_seeds_best_runs_the_other_seeds_of_recommended_and_the_best_alternative_at_their_best(tmp_path):
    ran = []
    het.run_bench(["resnet18_v1"], [117, 2], ["recommended", "standalone", "fast-only", "async"], ["iid"], [0, 1],
                  str(tmp_path / "het"), seeds_best=True, budget=BUDGET, sweep=None, run=_lr_run(ran),
                  confirm_fn=_fake_confirm, lrs=[0.01, 0.03, 0.1], log=lambda *_: None)
    assert sorted(n for n in ran if "seed" in n) == sorted([
        "resnet18_v1-117x-recommended-iid-lr0.03-seed1", "resnet18_v1-fast-only4-iid-lr0.03-seed1",
        "resnet18_v1-2x-recommended-iid-seed1", "resnet18_v1-fast-only2-iid-seed1"])


def test_one_rate_in_lrs_runs_every_seed_at_that_rate_not_at_the_default(tmp_path):
    ran = []
    het.run_bench(["resnet18_v1"], [117], ["recommended"], ["iid"], [0, 1, 2], str(tmp_path / "het"),
                  budget=BUDGET, sweep=None, run=_lr_run(ran), confirm_fn=_fake_confirm, lrs=[0.03],
                  log=lambda *_: None)
    assert ran == ["resnet18_v1-117x-recommended-iid-lr0.03", "resnet18_v1-117x-recommended-iid-lr0.03-seed1",
                   "resnet18_v1-117x-recommended-iid-lr0.03-seed2"]


def test_a_variant_whose_first_seed_ran_one_of_the_lrs_runs_its_other_seeds_at_that_rate(tmp_path):
    from bench.runner import JobFailed
    ran, run = [], _lr_run([])

    def fake_run(spec, run_dir, desc, position, leave):   # the first seed's run at 0.1 does not finish
        name = os.path.basename(run_dir)
        if name == "resnet18_v1-117x-recommended-iid":
            raise JobFailed("stopped")
        ran.append(name)
        return run(spec, run_dir, desc, position, leave)
    doc = het.run_bench(["resnet18_v1"], [117], ["recommended"], ["iid"], [0, 1], str(tmp_path / "het"),
                        budget=BUDGET, sweep=None, run=fake_run, confirm_fn=_fake_confirm, lrs=[0.03, 0.1],
                        log=lambda *_: None)
    assert ran == ["resnet18_v1-117x-recommended-iid-lr0.03", "resnet18_v1-117x-recommended-iid-lr0.03-seed1"]
    assert doc["cells"][0]["variants"]["recommended"]["seeds"] == [0, 1]


def test_without_lrs_every_variant_runs_at_its_one_rate_under_today_s_names(tmp_path):
    ran = []
    doc = het.run_bench(["resnet18_v1"], [2], ["recommended", "standalone"], ["iid"], [0, 1], str(tmp_path / "h"),
                        budget=BUDGET, sweep=None, run=_lr_run(ran), confirm_fn=_fake_confirm, log=lambda *_: None)
    assert ran == ["resnet18_v1-2x-recommended-iid", "resnet18_v1-standalone-iid",
                   "resnet18_v1-2x-recommended-iid-seed1", "resnet18_v1-standalone-iid-seed1"]
    assert doc["lr_sweep"] is None and doc["cells"][0]["variants"]["recommended"]["sweep"] is None
    assert "Learning-rate sweep" not in het.markdown(doc)


def test_dry_run_with_lrs_lists_the_sweep_and_says_the_other_seeds_come_later(capsys):
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    args = parser.parse_args(["--models", "resnet18_v1", "--profiles", "10", "--variants", "recommended,standalone",
                              "--seeds", "0,1,2", "--lrs", "0.03,0.1", "--sweep", "none", "--dry-run"])
    assert het.run(args) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line.startswith("resnet18_v1")]
    assert names == ["resnet18_v1-10x-recommended-iid-lr0.03", "resnet18_v1-10x-recommended-iid",
                     "resnet18_v1-standalone-iid-lr0.03", "resnet18_v1-standalone-iid"]
    assert "not listed: seeds 1,2" in out


@pytest.mark.parametrize("text", ["", ",", "0", "-0.1", "nan", "inf", "0.1,x"])
def test_a_bad_lrs_is_refused_by_name(text):
    with pytest.raises(ConfigError, match="--lrs"):
        het.parse_lrs(text)
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    with pytest.raises(ConfigError, match="--lrs"):
        het.run(parser.parse_args(["--lrs", text, "--dry-run"]))


def test_sweep_of_takes_the_seed_with_most_rates_and_the_lowest_of_equal_times():
    def row(lr, t, acc=0.85, seed=0):
        return {"run": "r%g-%d" % (lr, seed), "lr": lr, "seed": seed, "time_to_target_s": t, "final_accuracy": acc}
    assert het.sweep_of([row(0.1, 10.0), row(0.1, 5.0, seed=1)]) is None            # one rate: no sweep
    sweep = het.sweep_of([row(0.1, 20.0), row(0.03, 20.0), row(0.01, None, 0.9), row(0.1, 1.0, seed=1)])
    assert sweep["seed"] == 0 and sweep["best_lr"] == 0.03 and list(sweep["lrs"]) == ["0.01", "0.03", "0.1"]
    assert het.sweep_of([row(0.1, None, 0.7), row(0.03, None, 0.8)])["best_lr"] == 0.03


# --norm group: every variant on GroupNorm, named and reported under the model's _gn label

def test_group_norm_runs_are_named_by_the_gn_label_and_train_with_norm_group():
    from mxhet.sim import cli as sim_cli

    preset = presets.get(het.PRESET)
    batch = het.plan(["resnet18_v1"], [117, 10], list(het.DEFAULT_VARIANTS), ["non-iid"], [0, 1])
    group = het.plan(["resnet18_v1"], [117, 10], list(het.DEFAULT_VARIANTS), ["non-iid"], [0, 1], norm="group")
    assert list(batch) == list(het.plan(["resnet18_v1"], [117, 10], list(het.DEFAULT_VARIANTS), ["non-iid"], [0, 1],
                                        norm="batch"))
    assert "resnet18_v1-117x-recommended-non-iid" in batch and "resnet18_v1-standalone-iid-seed1" in batch
    assert list(group) == [name.replace("resnet18_v1-", "resnet18_v1_gn-", 1) for name in batch]
    assert group["resnet18_v1_gn-fast-only2-non-iid"][1] == [10]
    for name, (key, _) in group.items():
        argv = het.job_spec(key, preset).launch_argv("x")
        i = argv.index("--norm")
        assert argv[i + 1] == "group" and argv[argv.index("--model") + 1] == "resnet18_v1", name
        assert sim_cli.build_parser().parse_args(argv[3:]).norm == "group"
    rec = het.job_spec(group["resnet18_v1_gn-10x-recommended-non-iid"][0], preset).launch_argv("x")
    assert rec[-len(presets.RECOMMENDED_ARGS):] == list(presets.RECOMMENDED_ARGS)
    assert all("--norm" not in het.job_spec(key, preset).launch_argv("x") for key, _ in batch.values())
    old_key = het.RunKey("resnet18_v1", 10, "paper", "iid", 2, 0.03)      # as built before --norm
    assert het.run_name(old_key) == "resnet18_v1-10x-paper-iid-lr0.03-seed2"


def test_group_norm_is_refused_by_name_for_a_model_without_batchnorm(tmp_path):
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    with pytest.raises(ConfigError, match="alexnet"):
        het.run(parser.parse_args(["--models", "resnet18_v1,alexnet", "--norm", "group", "--dry-run"]))
    with pytest.raises(ConfigError, match="smallcnn"):
        het.run_bench(["smallcnn"], [10], ["paper"], ["iid"], [0], str(tmp_path), sweep=None, norm="group",
                      run=lambda *a: pytest.fail("ran"), log=lambda *_: None)
    assert not os.path.exists(tmp_path / "heterogeneity.json")


def test_dry_run_lists_the_gn_runs(capsys):
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    args = parser.parse_args(["--models", "resnet18_v1", "--profiles", "10", "--variants", "recommended,standalone",
                              "--dists", "non-iid", "--norm", "group", "--seeds", "0", "--sweep", "none", "--dry-run"])
    assert het.run(args) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("resnet18")]
    assert names == ["resnet18_v1_gn-10x-recommended-non-iid", "resnet18_v1_gn-standalone-iid"]


def test_dry_run_scales_its_prediction_by_the_divisions_measured_cpu_rate(capsys, tmp_path, monkeypatch):
    from bench import estimate
    calibrated = tmp_path / "estimate.json"
    calibrated.write_text(json.dumps({"presets": [{"calibration": {"cpu_factor_all": 2.0}}, {}]}))
    monkeypatch.setattr(estimate, "CALIBRATED", str(calibrated))
    assert estimate.cpu_rate() == 2.0 and estimate.cpu_rate(str(tmp_path / "missing.json")) is None
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    args = parser.parse_args(["--models", "resnet18_v1", "--profiles", "10", "--variants", "recommended",
                              "--seeds", "0", "--sweep", "none", "--dry-run"])
    assert het.run(args) == 0
    out = capsys.readouterr().out
    idle = float(out.split(" CPU h on an idle machine")[0].split()[-1])
    scaled = float(out.split("their prediction, ")[1].split("about ")[1].split(" CPU h")[0])
    assert scaled == pytest.approx(2 * idle, abs=0.15) and "(2.00x their prediction" in out   # each printed to 0.1 h


def _norm_run(ran):
    """_time's runs; with --norm group, fast-only never reaches the target (so the best alternative of a _gn
    cell differs from its BatchNorm cell's)."""
    def fake_run(spec, run_dir, desc, position, leave):
        name = os.path.basename(run_dir)
        ran.append(name)
        summary = _summary(spec, name)
        assert ("--norm" in spec.extra_train_args) == ("_gn-" in name)
        if "_gn-" in name and "fast-only" in name:
            summary["curve"] = [summary["curve"][0], [spec.time_budget, 0.7]]
            summary.update(time_to_target_s=None, final_accuracy=0.7)
        return summary
    return fake_run


def test_gn_cells_stand_apart_from_the_batchnorm_ones_in_json_report_and_seeds_best(tmp_path):
    out = str(tmp_path / "het")
    variants = ["recommended", "standalone", "fast-only", "async"]
    ran = []
    het.run_bench(["resnet18_v1"], [2], variants, ["non-iid"], [0, 1], out, seeds_best=True, budget=BUDGET,
                  sweep=None, run=_norm_run(ran), confirm_fn=_fake_confirm, log=lambda *_: None)
    assert sorted(n for n in ran if "seed" in n) == ["resnet18_v1-2x-recommended-non-iid-seed1",
                                                     "resnet18_v1-fast-only2-non-iid-seed1"]
    # rows recorded before --norm existed carry no norm: they are BatchNorm runs
    path = os.path.join(out, "heterogeneity.json")
    saved = json.load(open(path))
    assert {r["norm"] for r in saved["runs"]} == {"batch"} and saved["norm"] == "batch"
    for r in saved["runs"]:
        del r["norm"]
    json.dump(saved, open(path, "w"))
    ran.clear()
    doc = het.run_bench(["resnet18_v1"], [2], variants, ["non-iid"], [0, 1], out, seeds_best=True, budget=BUDGET,
                        sweep=None, run=_norm_run(ran), confirm_fn=_fake_confirm, norm="group", log=lambda *_: None)
    assert all(n.startswith("resnet18_v1_gn-") for n in ran)
    assert sorted(n for n in ran if "seed" in n) == ["resnet18_v1_gn-2x-async-non-iid-seed1",
                                                     "resnet18_v1_gn-2x-recommended-non-iid-seed1"]
    assert doc["norm"] == "group"
    gn = [r for r in doc["runs"] if r["run"].startswith("resnet18_v1_gn-")]
    assert len(gn) == 6 and {r["norm"] for r in gn} == {"group"} and {r["model"] for r in gn} == {"resnet18_v1"}
    assert len(doc["runs"]) == 2 * len(gn)          # the BatchNorm rows are kept
    cells = {(c["model"], c["dist"]): c for c in doc["cells"]}
    # the standalone device's i.i.d. run serves the non-i.i.d. cells and makes no i.i.d. cell of its own
    assert set(cells) == {("resnet18_v1", "non-iid"), ("resnet18_v1_gn", "non-iid")}
    assert cells[("resnet18_v1_gn", "non-iid")]["norm"] == "group"
    assert cells[("resnet18_v1", "non-iid")]["norm"] == "batch"
    assert cells[("resnet18_v1", "non-iid")]["best_alternative"] == "fast-only"
    assert cells[("resnet18_v1_gn", "non-iid")]["best_alternative"] == "async"
    rec = cells[("resnet18_v1_gn", "non-iid")]["variants"]["recommended"]
    assert rec["seeds"] == [0, 1] and rec["time_to_target"]["mean"] == pytest.approx(14.0 * (1 + 1.05) / 2)
    assert cells[("resnet18_v1_gn", "non-iid")]["variants"]["fast-only"]["seeds"] == [0]
    assert doc["lrs"]["resnet18_v1_gn"] == doc["lrs"]["resnet18_v1"]
    text = open(os.path.join(out, "heterogeneity.md")).read()
    assert "## resnet18_v1, 2x, non-iid" in text and "## resnet18_v1_gn, 2x, non-iid" in text
    assert "GroupNorm" in text
    assert "async (best alternative)" in text.split("## resnet18_v1_gn, 2x, non-iid")[1].split("## ")[0]
    # --report-only: nothing runs, the JSON's rows (both labels) are re-rendered
    again = het.run_bench(["resnet18_v1"], [2], variants, ["non-iid"], [0], out, budget=BUDGET, sweep=None,
                          run=het.not_run, confirm_fn=het.recorded_confirmation, norm="group", log=lambda *_: None)
    assert [(c["model"], c["dist"]) for c in again["cells"]] == [(c["model"], c["dist"]) for c in doc["cells"]]
    # the fake runs left no directories, as runs never committed: their rows are kept, none is "not finished"
    assert again["failures"] == [] and len(again["runs"]) == len(doc["runs"])
    fresh = het.run_bench(["resnet18_v1"], [2], variants, ["non-iid"], [0], str(tmp_path / "empty"), budget=BUDGET,
                          sweep=None, run=het.not_run, confirm_fn=het.recorded_confirmation, norm="group",
                          log=lambda *_: None)
    assert {f["run"] for f in fresh["failures"]} == {n for n in ran if "seed" not in n}   # nothing recorded there


def test_lrs_choose_each_rate_per_gn_cell(tmp_path):
    out = str(tmp_path / "het")
    ran = []
    inner = _lr_run(ran)

    def fake_run(spec, run_dir, desc, position, leave):   # GroupNorm: 0.03 five times slower, 0.1 best
        summary = inner(spec, run_dir, desc, position, leave)
        if "--norm" in spec.extra_train_args and spec.lr == 0.03 and summary["time_to_target_s"] is not None:
            summary["curve"][1][0] = summary["time_to_target_s"] = 5 * summary["time_to_target_s"]
        return summary

    for norm in ("batch", "group"):
        doc = het.run_bench(["resnet18_v1"], [117], ["recommended"], ["iid"], [0, 1], out, budget=BUDGET,
                            sweep=None, run=fake_run, confirm_fn=_fake_confirm, lrs=[0.01, 0.03, 0.1], norm=norm,
                            log=lambda *_: None)
    assert [n for n in ran if "seed" in n] == ["resnet18_v1-117x-recommended-iid-lr0.03-seed1",
                                               "resnet18_v1_gn-117x-recommended-iid-seed1"]
    best = {c["model"]: c["variants"]["recommended"]["best_lr"] for c in doc["cells"]}
    assert best == {"resnet18_v1": 0.03, "resnet18_v1_gn": 0.1}
    gn = next(c for c in doc["cells"] if c["model"] == "resnet18_v1_gn")["variants"]["recommended"]
    assert set(gn["sweep"]["lrs"]) == {"0.01", "0.03", "0.1"} and gn["seeds"] == [0, 1]
    assert gn["sweep"]["lrs"]["0.1"]["run"] == "resnet18_v1_gn-117x-recommended-iid"


# sync: Sync over every device of the profile, the non-i.i.d. goal's Sync

def test_the_sync_variant_runs_sync_on_every_device_of_the_profile_without_flags_of_its_own():
    preset = presets.get(het.PRESET)
    assert het.VARIANTS["sync"] == ("sync", ())
    for p, profile in het.PROFILES.items():
        key = het.RunKey("resnet18_v1", p, "sync", "non-iid", 0)
        spec = het.job_spec(key, preset)
        paper = het.job_spec(key._replace(variant="paper"), preset)
        assert spec.mode == "sync" and spec.slowdowns == profile.slowdowns and spec.dist == "non-iid"
        assert spec.extra_train_args == paper.extra_train_args          # the paper's ESync has none either
        assert spec.time_budget == paper.time_budget == preset.budget_for("resnet18_v1")   # not Sync's 20-fold
        argv = spec.launch_argv("x")
        assert argv[argv.index("--sync") + 1] == "sync" and argv[argv.index("-n") + 1] == str(len(profile.slowdowns))
        assert argv[argv.index("--dist") + 1] == "non-iid"


def test_sync_runs_are_named_by_profile_and_split_and_serve_their_own_profile_only():
    key = het.RunKey("resnet18_v1", 117, "sync", "non-iid", 0)
    assert het.run_name(key) == "resnet18_v1-117x-sync-non-iid"
    assert het.run_name(key._replace(profile=10, dist="iid", lr=0.03, seed=1)) == (
        "resnet18_v1-10x-sync-iid-lr0.03-seed1")
    assert het.run_name(key._replace(norm="group")) == "resnet18_v1_gn-117x-sync-non-iid"
    planned = het.plan(["resnet18_v1"], [117, 10, 2], list(het.DEFAULT_VARIANTS), ["non-iid"], [0])
    assert {name: profs for name, (_, profs) in planned.items() if "-sync-" in name} == {
        "resnet18_v1-117x-sync-non-iid": [117], "resnet18_v1-10x-sync-non-iid": [10],
        "resnet18_v1-2x-sync-non-iid": [2]}


def test_adding_sync_leaves_the_other_variants_runs_names_and_order_as_they_were():
    old = ["recommended", "paper", "standalone", "fast-only", "async", "dcasgd", "adsp", "dylu"]
    assert list(het.DEFAULT_VARIANTS) == old + ["sync"]          # last: the report's rows and the figure's colours keep
    assert het.ALTERNATIVES == ("standalone", "fast-only", "async", "dcasgd", "adsp", "dylu", "sync")
    planned = het.plan(["resnet18_v1"], [117, 10], list(het.DEFAULT_VARIANTS), ["iid"], [0])
    assert list(planned) == [
        "resnet18_v1-117x-recommended-iid", "resnet18_v1-117x-paper-iid", "resnet18_v1-standalone-iid",
        "resnet18_v1-fast-only4-iid", "resnet18_v1-117x-async-iid", "resnet18_v1-117x-dcasgd-iid",
        "resnet18_v1-117x-adsp-iid", "resnet18_v1-117x-dylu-iid", "resnet18_v1-117x-sync-iid",
        "resnet18_v1-10x-recommended-iid", "resnet18_v1-10x-paper-iid", "resnet18_v1-fast-only2-iid",
        "resnet18_v1-10x-async-iid", "resnet18_v1-10x-dcasgd-iid", "resnet18_v1-10x-adsp-iid",
        "resnet18_v1-10x-dylu-iid", "resnet18_v1-10x-sync-iid"]
    assert list(het.plan(["resnet18_v1"], [117, 10], old, ["iid"], [0])) == [
        name for name in planned if "-sync-" not in name]


def test_sync_is_an_alternative_the_report_can_name_best(tmp_path):
    ran = []

    def fake_run(spec, run_dir, desc, position, leave):   # _time's runs, Sync over all four devices first
        name = os.path.basename(run_dir)
        ran.append(name)
        summary = _summary(spec, name)
        if "-sync-" in name:
            summary["curve"][1][0] = summary["time_to_target_s"] = 9.0 * (1 + 0.05 * spec.seed)
        return summary

    out = str(tmp_path / "het")
    doc = het.run_bench(["resnet18_v1"], [2], ["recommended", "standalone", "fast-only", "async", "sync"],
                        ["non-iid"], [0, 1], out, seeds_best=True, budget=BUDGET, sweep=None, run=fake_run,
                        confirm_fn=_fake_confirm, log=lambda *_: None)
    assert sorted(n for n in ran if "seed" in n) == ["resnet18_v1-2x-recommended-non-iid-seed1",
                                                     "resnet18_v1-2x-sync-non-iid-seed1"]
    cell = next(c for c in doc["cells"] if c["dist"] == "non-iid")
    assert cell["best_alternative"] == "sync" and cell["verdict"]["no_later"] is False
    assert cell["verdict"]["speedup"]["value"] == pytest.approx(9.0 / 14.0)
    sync_rows = [r for r in doc["runs"] if r["variant"] == "sync"]
    assert {(r["mode"], r["profile"], tuple(r["slowdown"]), r["dist"]) for r in sync_rows} == {
        ("sync", 2, (2.0, 2.0, 1.0, 1.0), "non-iid")}
    assert doc["variants"]["sync"] == {"mode": "sync", "args": []} and "sync" in doc["alternatives"]
    text = open(os.path.join(out, "heterogeneity.md")).read()
    section = text.split("## resnet18_v1, 2x, non-iid")[1].split("## ")[0]
    assert "| sync (best alternative) |" in section and "best alternative (sync): **later**" in section
    assert het.NON_IID_NOTE in text
    assert het.NON_IID_NOTE not in het.markdown(dict(doc, cells=[c for c in doc["cells"] if c["dist"] == "iid"]))


def test_dry_run_lists_the_sync_runs_by_default_at_the_slowest_device_s_pace(tmp_path, capsys):
    costs = tmp_path / "estimate.json"
    costs.write_text(json.dumps({"costs": {"resnet18_v1": {"iteration_cpu_s": 0.1, "snapshot_cpu_s": 1.0,
                                                           "fixed_cpu_s": 10.0, "fixed_snapshots": 2}}}))
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    args = parser.parse_args(["--models", "resnet18_v1", "--seeds", "0", "--sweep", "none", "--costs", str(costs),
                              "--dry-run"])
    assert args.variants.split(",")[-1] == "sync"
    assert het.run(args) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("resnet18")}
    preset = presets.get(het.PRESET)
    fast = preset.budget_for("resnet18_v1") / preset.iteration_s["resnet18_v1"]   # one fast device's iterations
    for p, devices in ((117, 6), (10, 4), (2, 4)):     # one iteration per device a round of the slowest's length
        line = lines["resnet18_v1-%dx-sync-iid" % p]
        assert int(line.split()[3]) == pytest.approx(devices * fast / p, abs=1) and line.endswith("CPU min")


# needed: the recommended flags and --wait-needed 2, a candidate run only when named

def test_the_needed_variant_is_the_recommended_esync_with_wait_needed_run_only_when_named():
    preset = presets.get(het.PRESET)
    assert list(het.VARIANTS)[-2] == "needed" and "needed" not in het.DEFAULT_VARIANTS   # late: colours keep
    assert "needed" in het.ESYNC_VARIANTS and "needed" not in het.ALTERNATIVES
    key = het.RunKey("resnet18_v1", 10, "needed", "non-iid", 1, lr=0.03, norm="group")
    assert het.run_name(key) == "resnet18_v1_gn-10x-needed-non-iid-lr0.03-seed1"
    spec, recommended = het.job_spec(key, preset), het.job_spec(key._replace(variant="recommended"), preset)
    assert spec.mode == "esync"
    assert tuple(spec.extra_train_args) == tuple(recommended.extra_train_args) + ("--wait-needed", "2")
    parser = het.add_parser(__import__("argparse").ArgumentParser().add_subparsers(dest="experiment"))
    assert parser.parse_args([]).variants.split(",") == list(het.DEFAULT_VARIANTS)


def test_the_normalized_variant_is_the_papers_esync_with_fednovas_weights_run_only_when_named():
    preset = presets.get(het.PRESET)
    assert list(het.VARIANTS)[-1] == "normalized" and "normalized" not in het.DEFAULT_VARIANTS
    assert "normalized" in het.ESYNC_VARIANTS and "normalized" not in het.ALTERNATIVES
    key = het.RunKey("resnet18_v1", 10, "normalized", "non-iid", 0, lr=0.03, norm="group")
    assert het.run_name(key) == "resnet18_v1_gn-10x-normalized-non-iid-lr0.03"
    spec, paper = het.job_spec(key, preset), het.job_spec(key._replace(variant="paper"), preset)
    assert spec.mode == "esync"
    assert tuple(spec.extra_train_args) == tuple(paper.extra_train_args) + ("--aggregation", "normalized")


def test_a_label_skewed_cell_says_how_the_recommended_esync_stands_against_sync_and_async(tmp_path):
    # issue 31's goal on label-skewed data names Sync and Async over the devices that hold the data, not the
    # cell's best alternative (here fast-only, which moves the slow devices' data)
    out = str(tmp_path / "het")
    doc = het.run_bench(["resnet18_v1"], [2], ["recommended", "fast-only", "async", "sync"], ["non-iid", "iid"],
                        [0], out, budget=BUDGET, sweep=None, run=lambda spec, run_dir, *_: _summary(
                            spec, os.path.basename(run_dir)), confirm_fn=_fake_confirm, log=lambda *_: None)
    skewed, iid = (next(c for c in doc["cells"] if c["dist"] == d) for d in ("non-iid", "iid"))
    assert skewed["best_alternative"] == "fast-only" and "goal" not in iid and het.goal_line(iid) is None
    # recommended 14 s; Sync 24 s, Async 18 s (TIMES at 2x)
    assert skewed["goal"]["sync"]["no_later"] is True and skewed["goal"]["async"]["no_later"] is True
    assert skewed["goal"]["sync"]["speedup"]["value"] == pytest.approx(24.0 / 14.0)
    assert skewed["goal"]["async"]["speedup"]["value"] == pytest.approx(18.0 / 14.0)
    text = open(os.path.join(out, "heterogeneity.md")).read()
    line = het.goal_line(skewed)
    assert line in text.split("## resnet18_v1, 2x, non-iid")[1].split("## ")[0]
    assert "against `sync`: **no later**: 1.71×" in line and "against `async`: **no later**: 1.29×" in line
    assert "Issue 31's goal" not in text.split("## resnet18_v1, 2x, iid")[1].split("## ")[0]
    # a rival with no run says so rather than passing
    lone = het.cells([r for r in doc["runs"] if r["variant"] != "async"])
    assert next(c for c in lone if c["dist"] == "non-iid")["goal"]["async"]["text"] == "no alternative measured"
