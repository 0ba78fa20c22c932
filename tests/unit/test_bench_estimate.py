"""The idle-machine estimate of a simulator bench: run costs and packing (no simulator runs)."""
import json
import sys

import pytest

from bench import estimate

COST = {"iteration_cpu_s": 0.1, "snapshot_cpu_s": 2.0, "fixed_cpu_s": 10.0, "fixed_snapshots": 2}


def summary(model, iterations, snapshots):
    return {"model": model, "curve": [[i, 0.1] for i in range(snapshots)],
            "workers": [{"iterations": n} for n in iterations]}


def test_a_run_costs_its_iterations_its_extra_snapshots_and_the_fixed_part():
    cost = estimate.run_cost(summary("m", [100, 50, 50], 12), COST)
    assert cost["iterations"] == 200 and cost["snapshots"] == 10
    assert cost["cost_s"] == pytest.approx(200 * 0.1 + 10 * 2.0 + 10.0)


def test_packing_longest_first_onto_the_slot_that_frees_first():
    span, slots = estimate.makespan([5, 4, 3, 3, 3], 2)
    assert sorted(slots) == [8, 10] and span == 10          # 5+3, 4+3+3
    assert estimate.makespan([7, 1], 1) == (8, [8])
    assert estimate.makespan([], 3) == (0.0, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="jobs"):
        estimate.makespan([1], 0)


def test_estimate_reads_finished_runs_and_names_a_model_without_a_cost(tmp_path):
    for name, model, iterations in (("a-sync", "a", [10, 10]), ("b-esync", "b", [300])):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(summary(model, iterations, 4)))
    runs = estimate.load_runs(str(tmp_path))
    assert sorted(runs) == ["a-sync", "b-esync"]
    result = estimate.estimate(runs, {"a": COST, "b": dict(COST, iteration_cpu_s=1.0)}, jobs=2)
    costs = {r["run"]: r["cost_s"] for r in result["runs"]}
    assert costs == {"a-sync": pytest.approx(20 * 0.1 + 2 * 2.0 + 10), "b-esync": pytest.approx(300 + 4 + 10)}
    assert result["makespan_s"] == pytest.approx(314) and result["total_s"] == pytest.approx(330)
    text = estimate.report(dict(result, caps=(30, 90), eval_samples=1000), "python -m bench.estimate")
    assert "| b-esync | 300 | 2 |" in text and "**6 min**" in text
    with pytest.raises(ValueError, match="'b'"):
        estimate.estimate(runs, {"a": COST}, jobs=1)
    assert "default" not in result
    without_b = estimate.estimate(runs, {"a": COST, "b": dict(COST, iteration_cpu_s=1.0)}, jobs=2, opt_in=("b", "z"))
    assert without_b["default"]["left_out"] == ["b"]
    assert without_b["default"]["total_s"] == pytest.approx(16) and without_b["makespan_s"] == pytest.approx(314)
    text = estimate.report(dict(without_b, caps=(30, 90), eval_samples=1000), "python -m bench.estimate")
    assert "Without b, which" in text


def test_the_command_line_refuses_a_directory_without_runs_and_bad_caps(tmp_path, capsys):
    with pytest.raises(SystemExit, match="no finished runs"):
        estimate.main(["--out", str(tmp_path)])
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary("a", [1], 2)))
    with pytest.raises(SystemExit, match="--caps"):
        estimate.main(["--out", str(tmp_path), "--caps", "90,30"])


COMMAND = ["python", "-m", "mxhet.sim", "-n", "2", "--sync", "sync", "--slowdown", "1,3", "--model", "smallcnn",
           "--base-iter", "0.05", "--time-budget", "600", "--eval-samples", "200", "--eval-interval", "5",
           "--metrics-out", "somewhere"]


def _scripted(monkeypatch, results):
    """Replace the simulator runs by ``results`` (iterations, CPU s, snapshots, virtual s); return their argvs."""
    calls = []

    def run(argv, out, timeout):
        calls.append(argv)
        return results[len(calls) - 1]
    monkeypatch.setattr(estimate, "_sim", run)
    return calls


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_measure_runs_the_command_three_times_and_separates_the_costs(monkeypatch):
    # caps 6 and 30: 24 more iterations cost 1.2 CPU s more; 8 more snapshots 2.0 s more
    calls = _scripted(monkeypatch, [(6, 3.0, 2, 0.4), (30, 4.2, 2, 2.0), (6, 5.0, 10, 0.4)])
    cost = estimate.measure({"sim": {"command": COMMAND}}, caps=(6, 30), snapshots=8)
    assert cost["iteration_cpu_s"] == pytest.approx(0.05) and cost["snapshot_cpu_s"] == pytest.approx(0.25)
    assert cost["fixed_cpu_s"] == pytest.approx(2.7) and cost["fixed_snapshots"] == 2
    assert [_flag(a, "--max-iterations") for a in calls] == ["6", "30", "6"]
    assert [_flag(a, "--eval-interval") for a in calls] == ["1e9", "1e9", "0.05"]   # 0.4 virtual s / 8
    assert all("--metrics-out" not in a and a[1:3] == ["-m", "mxhet.sim"] for a in calls)


@pytest.mark.parametrize("cpu_s", [(3.0, 3.0, 5.0), (3.0, 4.2, 2.9)], ids=["iterations free", "snapshots free"])
def test_measure_refuses_a_cost_of_zero(monkeypatch, cpu_s):
    _scripted(monkeypatch, [(6, cpu_s[0], 2, 0.4), (30, cpu_s[1], 2, 2.0), (6, cpu_s[2], 10, 0.4)])
    with pytest.raises(RuntimeError, match="did not cost more CPU"):
        estimate.measure({"sim": {"command": COMMAND}}, caps=(6, 30), snapshots=8)


def test_a_measuring_run_stops_at_its_cap_and_reports_its_cpu(tmp_path):
    argv = estimate._with([sys.executable] + COMMAND[1:-2], max_iterations=6, eval_interval="1e9", eval_growth="0")
    iterations, cpu, snapshots, _ = estimate._sim(argv, str(tmp_path / "a"), timeout=300)
    assert iterations in (6, 7) and snapshots == 2 and cpu > 0          # 2: the first and the final evaluation


def test_costs_from_an_earlier_estimate_are_not_measured_again(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "a-sync"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary("a", [10, 10], 4)))
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"costs": {"a": COST}, "caps": [30, 90]}))
    monkeypatch.setattr(estimate, "measure", lambda *a, **k: pytest.fail("measured again"))
    assert estimate.main(["--out", str(tmp_path), "--costs", str(earlier), "--jobs", "1"]) == 0
    written = json.loads((tmp_path / "estimate.json").read_text())
    assert written["total_s"] == pytest.approx(20 * 0.1 + 2 * 2.0 + 10) and written["caps"] == [30, 90]
    assert "a-sync" in (tmp_path / "estimate.md").read_text()


def test_a_whole_division_is_predicted_at_its_budgets_before_it_runs():
    from bench import presets
    cost = {"iteration_cpu_s": 0.1, "snapshot_cpu_s": 1.0, "fixed_cpu_s": 10.0, "fixed_snapshots": 2}
    preset = presets.get("paper-sim")
    result = estimate.predict(preset, {"resnet18_v1": cost}, 2, models=("resnet18_v1",))
    runs = {r["run"]: r for r in result["runs"]}
    base, budget = preset.iteration_s["resnet18_v1"], preset.budget_for("resnet18_v1")
    assert runs["resnet18_v1-local-iid-seed2"]["iterations"] == int(budget / base)
    assert runs["resnet18_v1-esync-iid"]["iterations"] == int((4 + 2 / 117.0) * budget / base)
    sync = runs["resnet18_v1-sync-iid"]
    assert sync["budget_s"] == presets.SYNC_BUDGET_FACTOR * budget
    assert sync["iterations"] == int(6 / (117.0 * base) * sync["budget_s"])
    assert sync["confirm_s"] == estimate.CANDIDATES * estimate.CONFIRM_SNAPSHOTS * 1.0
    assert result["per_model_s"]["resnet18_v1"] == pytest.approx(result["total_s"])
    assert result["makespan_s"] >= result["total_s"] / 2
    open_runs = {r["run"] for r in estimate.predict(presets.get("paper-sim-open"), {"resnet18_v1": cost}, 2,
                                                    models=("resnet18_v1",))["runs"]}
    assert {"resnet18_v1-esync-iid-lr0.01", "resnet18_v1-sync-fast-iid-lr0.1"} <= open_runs   # the sweep's
    with pytest.raises(ValueError, match="alexnet"):
        estimate.predict(preset, {"resnet18_v1": cost}, 2, models=("alexnet",))


def _row(run, model, variant, cost_s, lr=0.001, budget_s=100.0, confirm_s=10.0):
    return {"run": run, "model": model, "variant": variant, "cost_s": cost_s, "confirm_s": confirm_s, "lr": lr,
            "budget_s": budget_s}


def _finished(wall_s, cpu_s, lr=0.001, budget_s=100.0):
    return {"lr": lr, "sim": {"wall_s": wall_s, "cpu_s": cpu_s,
                              "command": ["python", "-m", "mxhet.sim", "--time-budget", "%g" % budget_s]}}


def test_finished_runs_calibrate_the_rest_by_model_and_variant_then_model_then_all():
    rows = [_row("a-esync", "a", "esync", 110), _row("a-esync-seed1", "a", "esync", 110),
            _row("a-sync", "a", "sync", 60), _row("b-esync", "b", "esync", 210)]
    finished = {"a-esync": [_finished(300.0, 150.0, lr=0.1),          # the open division's run of that name
                            _finished(200.0, 150.0)],
                "a-sync-seed1": [_finished(999.0, 1.0)]}              # no such planned run
    result, = estimate.calibrate([{"runs": rows}], finished)
    by = {r["run"]: r for r in result["runs"]}
    assert by["a-esync"]["measured_wall_s"] == 200.0 and by["a-esync"]["measured_cpu_s"] == 150.0
    # the ratio leaves out the confirmations: 200 s of wall for 110 - 10 predicted
    assert by["a-esync-seed1"]["calibrated_wall_s"] == pytest.approx(110 * 2.0)
    assert by["a-esync-seed1"]["factor_from"] == "a esync"
    assert by["a-sync"]["calibrated_wall_s"] == pytest.approx(60 * 2.0) and by["a-sync"]["factor_from"] == "a"
    assert by["b-esync"]["factor_from"] == "every finished run"
    cal = result["calibration"]
    assert cal["finished"] == 1 and cal["remaining"] == 3 and cal["factor"] == pytest.approx(2.0)
    assert cal["remaining_wall_s"] == pytest.approx((110 + 60 + 210) * 2.0)
    assert cal["remaining_cpu_s"] == pytest.approx((110 + 60 + 210) * 1.5)     # 150 CPU s for 100 predicted
    assert cal["factors"] == {"a esync": pytest.approx(2.0)}
    assert estimate.calibrated_totals([result]) == {"finished": 1, "remaining": 3, "remaining_wall_h": 0.2,
                                                     "remaining_cpu_h": 0.2}      # 760 s and 570 s
    assert estimate.calibrated_totals([{"runs": []}]) is None                       # not calibrated
    # another budget is another run; a preset without a finished run of its own takes the others' rates
    other, = estimate.calibrate([{"runs": [_row("a-esync", "a", "esync", 110, budget_s=50.0)]}], finished)
    assert other["calibration"]["finished"] == 0 and other["calibration"]["remaining_wall_s"] is None
    assert "nothing to calibrate by" in "\n".join(estimate.calibration_report(other, ["d"]))
    closed, opened = estimate.calibrate([{"runs": [_row("a-esync", "a", "esync", 110)]},
                                         {"runs": [_row("a-esync", "a", "esync", 60, lr=0.1, budget_s=50.0)]}],
                                        finished)
    assert opened["calibration"]["finished"] == 0 and opened["runs"][0]["factor_from"] == "a esync"
    assert opened["calibration"]["remaining_wall_s"] == pytest.approx(60 * 2.0)
    assert "None of its runs has finished" in "\n".join(estimate.calibration_report(opened, ["d"]))
    text = "\n".join(estimate.calibration_report(result, ["d"]))
    assert "1 of the 4 runs have finished" in text and "| a-esync | 2 | 2 | 3 | 0.75 | 2.00 |" in text   # minutes


def test_measured_directories_are_read_and_checked(tmp_path, capsys):
    run = tmp_path / "runs" / "a-esync"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(_finished(200.0, 150.0)))
    (tmp_path / "runs" / "unfinished").mkdir()
    # a run kept only as a record of an experiment JSON: its wall time and command, no CPU time
    record = {"key": "a-sync", "lr": 0.001, "wall_s": 50.0,
              "command": ["python", "-m", "mxhet.sim", "--time-budget", "100"]}
    (tmp_path / "table1.json").write_text(json.dumps({"runs": [record, {"key": "x", "wall_s": None}]}))
    (tmp_path / "curves.json").write_text(json.dumps({"runs": [record]}))        # one run in two experiments
    found = estimate.finished_runs([str(tmp_path)])
    assert found == {"a-esync": [_finished(200.0, 150.0)],
                     "a-sync": [{"lr": 0.001, "sim": {"wall_s": 50.0, "cpu_s": None, "command": record["command"]}}]}
    result, = estimate.calibrate([{"runs": [_row("a-esync", "a", "esync", 110), _row("a-sync", "a", "sync", 60),
                                            _row("a-sync-seed1", "a", "sync", 60)]}], found)
    by = {r["run"]: r for r in result["runs"]}
    assert by["a-sync"]["measured_wall_s"] == 50.0 and by["a-sync"]["measured_cpu_s"] is None
    assert by["a-sync-seed1"]["calibrated_wall_s"] == pytest.approx(60 * 1.0)   # 50 s for 60 - 10
    assert by["a-sync-seed1"]["calibrated_cpu_s"] == pytest.approx(60 * 1.5)    # no CPU of its own: the model's
    assert "| a-sync | 1 | — (a record only) | 1 | — | 1.00 |" in "\n".join(estimate.calibration_report(result, ["d"]))
    with pytest.raises(SystemExit, match="give --preset"):
        estimate.main(["--out", str(tmp_path), "--measured", str(tmp_path)])
    with pytest.raises(SystemExit, match="no such directory"):
        estimate.main(["--out", str(tmp_path / "o"), "--preset", "paper-sim", "--costs", __file__,
                       "--measured", str(tmp_path / "missing")])
