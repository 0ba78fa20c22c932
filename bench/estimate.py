"""``mxhet-bench estimate`` (``python -m bench.estimate``): how long a simulator bench takes on an idle machine.

With ``--preset`` (repeatable) it predicts a whole bench before it runs
(:func:`predict`: every planned run at its budget, from per-model costs
measured once, ``--costs``), and with ``--measured DIR`` calibrates that
prediction by the runs already finished in DIR (:func:`calibrate`: what they
took, and the rest at their rates); otherwise it estimates a finished bench
from its runs, as follows.

A simulated run's cost is its real work: every device's iterations (a forward
and backward pass and the local optimizer step each, plus the simulated
exchanges), the snapshots of the global model it scores along the way, the
start-up and the final evaluation. All three are measured with the simulator
itself, in CPU seconds (which do not grow with the load of a shared machine the
way wall time does): for each model its finished Sync run's command runs three
more times (:func:`measure`). Sync's rounds are one iteration per device, so a
compute cap stops it within a round, and its exchange every round makes the
per-iteration cost an upper bound for the other modes. Iteration and snapshot
counts come from the runs' ``summary.json``. The runs are then packed onto
``--jobs`` single-threaded slots, longest first (what ``--jobs`` does, up to
the order), and the longest slot is the estimate.

Writes ``estimate.json`` and ``estimate.md`` into the bench's output directory.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

from mxhet.errors import ConfigError

CONFIRM_SNAPSHOTS = 10
"""Confirming one candidate crossing on all 10,000 test images costs about 10 snapshots on 1,000 (an upper
bound: the precise-BN pass of a snapshot does not grow with the test images)."""
CANDIDATES = 2
"""Candidate crossings a prediction assumes each run confirms (the first holds, or the second)."""


def iterations_per_s(mode, slowdowns, base):
    """Real iterations per virtual second of a run of ``mode`` on devices of these ``slowdowns``: every
    device computes all the time in the modes without a barrier; Sync's rounds last the slowest device's
    iteration, one iteration per device each."""
    if mode == "sync":
        return len(slowdowns) / (max(slowdowns) * base)
    return sum(1.0 / (f * base) for f in slowdowns)


def snapshot_count(preset, slowdowns, rate, budget, base):
    """Snapshots of the global model a run takes on the preset's grid: every ``eval_slowest_share`` of the
    slowest iteration (``eval_base_share`` of the fastest) or ``eval_growth`` of the time so far, whichever is
    longer, but not before ``eval_min_iterations`` real iterations since the last one."""
    t, n = 0.0, 1                                   # the first snapshot at 0
    floor = preset.eval_interval(budget, base * max(slowdowns), base * min(slowdowns))
    gate = preset.eval_min_iterations / rate if rate > 0 else 0.0
    while True:
        t += max(floor, preset.eval_growth * t, gate)
        if t >= budget:
            return n
        n += 1


def predict(preset, costs, jobs, models=None, seeds=None, profile=None):
    """The cost of a whole simulator bench of ``preset`` before it runs, from measured per-model ``costs``
    (:func:`measure`: CPU seconds of an iteration, a snapshot and the fixed part): every planned run's
    iterations at the rate its mode computes for its whole budget (the divisions' runs do not stop at the
    target), its snapshots on the preset's grid and, where the preset confirms, ``CANDIDATES`` confirmations
    on all test images. ``preset.lr_sweep``: the sweep's runs are included.

    Returns:
        :func:`estimate`'s shape, with ``runs`` carrying ``model``, ``variant``, ``budget_s`` and
        ``predicted`` True, and ``per_model_s`` (CPU seconds per model).

    Raises:
        ValueError: a model without a measured cost or a fixed base iteration.
    """
    from . import profiles, suite
    profile = profile or profiles.load(preset.profile)
    models = tuple(models or preset.default_models())
    experiments = suite.EXPERIMENTS + ((suite.SWEEP,) if preset.lr_sweep else ())
    planned = suite.plan(experiments, models, preset.figure_model, preset, seeds=seeds)
    rows = []
    for key in suite.unique_runs(planned):
        if key.model not in costs or key.model not in preset.iteration_s:
            raise ValueError("no measured cost or fixed base iteration for model %r" % key.model)
        base = preset.iteration_s[key.model]
        budget = preset.budget_of(key.model, key.mode)
        spec = suite.job_spec(key, preset, profile, {"base_iteration_s": base, "input_size": 0}, budget,
                              engine="sim")
        rate = iterations_per_s(spec.mode, spec.slowdowns, base)
        cost = costs[key.model]
        iterations = int(rate * budget)
        snapshots = snapshot_count(preset, spec.slowdowns, rate, budget, base)
        parts = {"iterations_s": iterations * cost["iteration_cpu_s"],
                 "snapshots_s": max(0, snapshots - cost["fixed_snapshots"]) * cost["snapshot_cpu_s"],
                 "confirm_s": (CANDIDATES * CONFIRM_SNAPSHOTS * cost["snapshot_cpu_s"]) if preset.confirm else 0.0,
                 "fixed_s": cost["fixed_cpu_s"]}
        rows.append(dict(parts, run=suite.run_name(key), model=key.model, variant=key.mode, budget_s=budget,
                         lr=spec.lr, iterations=iterations, snapshots=snapshots, cost_s=sum(parts.values()),
                         predicted=True))
    total = sum(r["cost_s"] for r in rows)
    span, slots = makespan([r["cost_s"] for r in rows], jobs)
    per_model = {}
    for r in rows:
        per_model[r["model"]] = per_model.get(r["model"], 0.0) + r["cost_s"]
    return {"preset": preset.name, "jobs": jobs, "runs": rows, "total_s": total, "makespan_s": span,
            "slots_s": slots, "per_model_s": per_model, "costs": costs,
            "seeds": sorted({s for m in models for s in (seeds or preset.seeds_for(m))})}


def _budget_of(summary):
    """The ``--time-budget`` of a simulator run's command (None where it has none)."""
    command = list(summary.get("sim", {}).get("command") or ())
    if "--time-budget" not in command[:-1]:
        return None
    try:
        return float(command[command.index("--time-budget") + 1])
    except ValueError:
        return None


def finished_runs(dirs):
    """``{run name: [summary, ...]}`` of the finished simulator runs under each of ``dirs``/runs (a name may be
    in several: a closed and an open division name their runs alike; :func:`calibrate` tells them apart)."""
    from .suite import experiment_records
    found = {}
    for out in dirs:
        runs = load_runs(out)
        for name, summary in runs.items():
            if "wall_s" in summary.get("sim", {}):
                found.setdefault(name, []).append(summary)
        # a run whose directory was never kept is only a record of the bench's experiment JSONs: its wall
        # time and command, not its CPU time
        for name, (record, _) in experiment_records(out).items():
            if name not in runs and record.get("wall_s") is not None and record.get("command"):
                found.setdefault(name, []).append({"lr": record.get("lr"), "sim": {
                    "wall_s": record["wall_s"], "cpu_s": None, "command": record["command"]}})
    return found


def _measured_for(row, summaries):
    """The summary of ``row``'s run among ``summaries``: the same learning rate and budget."""
    for summary in summaries:
        budget = _budget_of(summary)
        if (summary.get("lr") is not None and abs(float(summary["lr"]) - row["lr"]) <= 1e-12 * max(1.0, row["lr"])
                and budget is not None and abs(budget - row["budget_s"]) < 1e-6 * max(1.0, budget)):
            return summary
    return None


def calibrate(results, finished):
    """What the finished runs of :func:`predict` ``results`` (one per preset) took, and the rest at their rates.

    A planned run is finished where ``finished`` (:func:`finished_runs`) holds a run of its name, learning
    rate and budget: its simulator's wall seconds (every session's, when resumed; confirmations on all test
    images are not in them) are ``measured_wall_s``. Each remaining run's ``calibrated_wall_s`` is its
    predicted cost times the ratio of measured wall time to predicted cost (without confirmations) over the
    finished runs of its model and variant, else of its model, else of every finished run, in any of the
    presets (the ratio does not depend on a run's budget or learning rate): the prediction counts CPU seconds
    of one run on an idle machine, the bench's runs take wall time on the machine as it is used. Each result
    gains these row fields and ``calibration``; without a finished run anywhere the remaining runs have no
    calibrated time (None).
    """
    done = []
    for result in results:
        for row in result["runs"]:
            summary = _measured_for(row, finished.get(row["run"], ()))
            if summary is not None:
                row["measured_wall_s"] = float(summary["sim"]["wall_s"])
                cpu = summary["sim"].get("cpu_s")
                row["measured_cpu_s"] = float(cpu) if cpu is not None else None
                done.append(row)

    def ratio(rows, measured="measured_wall_s"):
        rows = [r for r in rows if r[measured] is not None]     # a run known from a record has no CPU time
        predicted = sum(r["cost_s"] - r["confirm_s"] for r in rows)
        return sum(r[measured] for r in rows) / predicted if predicted > 0 else None

    pairs, models = {}, {}
    for row in done:
        pairs.setdefault((row["model"], row["variant"]), []).append(row)
        models.setdefault(row["model"], []).append(row)
    overall = ratio(done) if done else None
    factors = {"%s %s" % pair: ratio(rows) for pair, rows in sorted(pairs.items())}
    for result in results:
        mine = [r for r in result["runs"] if "measured_wall_s" in r]
        remaining = [r for r in result["runs"] if "measured_wall_s" not in r]
        for row in remaining:
            pair = (row["model"], row["variant"])
            # the finished runs of its model and variant, else of its model, else all (each measure apart: a
            # run known from a record has a wall time, not a CPU time)
            tiers = [(pairs.get(pair), "%s %s" % pair), (models.get(row["model"]), row["model"]),
                     (done, "every finished run")]
            factor, source = next(((ratio(rows), name) for rows, name in tiers
                                   if rows and ratio(rows) is not None), (None, None))
            cpu_factor = next((ratio(rows, "measured_cpu_s") for rows, _ in tiers
                               if rows and ratio(rows, "measured_cpu_s") is not None), None)
            row["calibrated_wall_s"] = row["cost_s"] * factor if factor is not None else None
            row["calibrated_cpu_s"] = row["cost_s"] * cpu_factor if cpu_factor is not None else None
            row["factor_from"] = source
        left = [r["calibrated_wall_s"] for r in remaining]
        left_cpu = [r["calibrated_cpu_s"] for r in remaining]
        result["calibration"] = {
            "finished": len(mine), "remaining": len(remaining),
            "finished_wall_s": sum(r["measured_wall_s"] for r in mine),
            "finished_predicted_s": sum(r["cost_s"] - r["confirm_s"] for r in mine),
            "factor": ratio(mine) if mine else None, "factor_all": overall, "factors": factors,
            "cpu_factor_all": ratio(done, "measured_cpu_s") if done else None,
            "remaining_wall_s": None if None in left else sum(left),
            "remaining_cpu_s": None if None in left_cpu else sum(left_cpu)}
    return results


def calibrated_totals(results):
    """Over every preset of :func:`calibrate`'d ``results``: runs finished and remaining, and what the remaining
    take in hours of wall and of CPU at the finished runs' rates (None: not calibrated)."""
    cals = [r.get("calibration") for r in results]
    if not cals or any(c is None or c["remaining_wall_s"] is None for c in cals):
        return None
    return {"finished": sum(c["finished"] for c in cals), "remaining": sum(c["remaining"] for c in cals),
            "remaining_wall_h": round(sum(c["remaining_wall_s"] for c in cals) / 3600.0, 1),
            "remaining_cpu_h": round(sum(c["remaining_cpu_s"] for c in cals) / 3600.0, 1)}


CALIBRATED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "bench", "results", "divisions-estimate", "estimate.json")
"""The committed calibrated prediction (``mxhet-bench estimate --measured``) other benches' predictions scale by."""


def cpu_rate(path=None):
    """The CPU time the divisions' finished runs took over their prediction (:func:`calibrate`'s
    ``cpu_factor_all``) in the estimate at ``path`` (default :data:`CALIBRATED`); None where there is none."""
    try:
        with open(path or CALIBRATED) as f:
            presets = json.load(f).get("presets") or []
    except (OSError, ValueError, AttributeError):
        return None
    rates = [p.get("calibration", {}).get("cpu_factor_all") for p in presets if isinstance(p, dict)]
    return next((r for r in rates if r), None)


def calibration_report(result, dirs):
    """Markdown: what ``result``'s finished runs took and what the rest should take at the finished runs' rates."""
    cal = result["calibration"]
    where = ", ".join("`%s`" % d for d in dirs)
    lines = ["### As the runs have gone on this machine", ""]
    if cal["remaining_wall_s"] is None:
        return lines + ["No planned run has finished in %s: nothing to calibrate by." % where, ""]
    rate = ("At the rate of the finished runs of the same model and variant (else of the same model, else of "
            "all, in every preset here), the remaining %d take about **%.1f h** one at a time, and %.1f CPU "
            "hours: about the wall time they would take one at a time on a machine doing nothing else, where a "
            "run keeps about one core busy%s."
            % (cal["remaining"], cal["remaining_wall_s"] / 3600.0, cal["remaining_cpu_s"] / 3600.0,
               " (the cores-busy column below)" if cal["finished"] else ""))
    if cal["finished"]:
        lines += ["%d of the %d runs have finished in %s: **%.1f h** of wall time (the machine as it was used: "
                  "a run alone on both cores or beside other runs and tests; confirmations on all test images not "
                  "included), "
                  "%.2fx their prediction (CPU seconds on an idle machine). %s" % (
                      cal["finished"], cal["finished"] + cal["remaining"], where, cal["finished_wall_s"] / 3600.0,
                      cal["factor"], rate), ""]
    else:
        lines += ["None of its runs has finished in %s. %s" % (where, rate), ""]
    lines += ["| model | finished | wall time (h) | remaining | at the measured rates (h) |", "|---|---|---|---|---|"]
    for model in sorted({r["model"] for r in result["runs"]}):
        rows = [r for r in result["runs"] if r["model"] == model]
        done = [r for r in rows if "measured_wall_s" in r]
        left = [r for r in rows if "measured_wall_s" not in r]
        lines.append("| %s | %d | %.1f | %d | %.1f |" % (model, len(done), sum(r["measured_wall_s"] for r in done)
                                                         / 3600.0, len(left),
                                                         sum(r["calibrated_wall_s"] for r in left) / 3600.0))
    lines.append("")
    if not cal["finished"]:
        return lines
    lines += ["Cores busy (a run's CPU time over its wall time) says how much of the machine a run had: the "
              "fewer, the more it shared the cores with other work.", "",
              "| finished run | predicted (CPU min) | CPU (min) | wall (min) | cores busy | wall over predicted |",
              "|---|---|---|---|---|---|"]
    lines += ["| %s | %.0f | %s | %.0f | %s | %.2f |" % (
        r["run"], (r["cost_s"] - r["confirm_s"]) / 60.0,
        "%.0f" % (r["measured_cpu_s"] / 60.0) if r["measured_cpu_s"] is not None else "— (a record only)",
        r["measured_wall_s"] / 60.0,
        "%.2f" % (r["measured_cpu_s"] / r["measured_wall_s"]) if r["measured_cpu_s"] is not None
        and r["measured_wall_s"] > 0 else "—",
        r["measured_wall_s"] / (r["cost_s"] - r["confirm_s"])) for r in result["runs"] if "measured_wall_s" in r]
    lines.append("")
    return lines


def predict_report(results, command, costs_from, measured_dirs=()):
    """Markdown for :func:`predict` results of one or more presets."""
    lines = ["# What the full simulator bench costs on this 2-core machine (a prediction)", "",
             "Command: `%s`" % command, "",
             "Per-model CPU seconds of an iteration, a snapshot (1,000 test images) and the fixed part of a run "
             "(start-up, the first and the final evaluation on all test images) come from `%s`, measured with "
             "the simulator on this machine, idle. Each planned run is predicted at its whole budget (the "
             "divisions' runs go on to it): its iterations at the rate its mode computes (every device "
             "all the time, Sync one iteration per device every slowest iteration), its snapshots on the "
             "preset's grid, and %d confirmations on all test images of about %d snapshots each. Runs are "
             "packed longest first onto the `--jobs` slots; a loaded machine takes longer." % (
                 costs_from, CANDIDATES, CONFIRM_SNAPSHOTS), ""]
    grand = 0.0
    for result in results:
        grand += result["makespan_s"]
        lines += ["## Preset `%s` (seeds %s)" % (result["preset"], ", ".join(map(str, result["seeds"]))), "",
                  "| model | runs | CPU hours | share of the makespan at `--jobs %d` (hours) |" % result["jobs"],
                  "|---|---|---|---|"]
        for model, cost in sorted(result["per_model_s"].items(), key=lambda kv: -kv[1]):
            count = sum(1 for r in result["runs"] if r["model"] == model)
            lines.append("| %s | %d | %.1f | %.1f |" % (model, count, cost / 3600.0,
                                                         cost / result["total_s"] * result["makespan_s"] / 3600.0))
        lines += ["", "All runs one after the other: **%.1f h**; with `--jobs %d`: **%.1f h** (slots: %s h)."
                  % (result["total_s"] / 3600.0, result["jobs"], result["makespan_s"] / 3600.0,
                     ", ".join("%.1f" % (x / 3600.0) for x in result["slots_s"])), "",
                  "| run | budget (virtual s) | iterations | snapshots | total (CPU min) |", "|---|---|---|---|---|"]
        lines += ["| %s | %.0f | %d | %d | %.1f |" % (r["run"], r["budget_s"], r["iterations"], r["snapshots"],
                                                       r["cost_s"] / 60.0)
                  for r in sorted(result["runs"], key=lambda r: -r["cost_s"])]
        lines.append("")
        if "calibration" in result:
            lines += calibration_report(result, measured_dirs)
    if len(results) > 1:
        lines += ["All presets, one bench after the other, `--jobs %d`: **%.1f h**." % (results[0]["jobs"],
                                                                                    grand / 3600.0), ""]
        totals = calibrated_totals(results)
        if totals:
            lines += ["What remains of all presets at the finished runs' rates, one run at a time: **%.1f h** "
                      "(%.1f CPU hours)." % (totals["remaining_wall_h"], totals["remaining_cpu_h"]), ""]
    return "\n".join(lines)


def run_cost(summary, cost):
    """CPU seconds one run takes alone, with ``cost`` its model's :func:`measure`."""
    iterations = sum(w.get("iterations", 0) for w in summary.get("workers", []))
    snapshots = max(0, len(summary.get("curve", [])) - cost["fixed_snapshots"])
    parts = {"iterations_s": iterations * cost["iteration_cpu_s"], "snapshots_s": snapshots * cost["snapshot_cpu_s"],
             "fixed_s": cost["fixed_cpu_s"]}
    return dict(parts, iterations=iterations, snapshots=snapshots, cost_s=sum(parts.values()))


def makespan(costs, jobs):
    """The longest of ``jobs`` slots when the ``costs`` are placed longest first,
    each on the slot that frees first; returns (makespan, per-slot totals)."""
    if jobs < 1:
        raise ValueError("jobs must be >= 1, got %r" % (jobs,))
    slots = [0.0] * jobs
    for cost in sorted(costs, reverse=True):
        i = min(range(jobs), key=slots.__getitem__)
        slots[i] += cost
    return max(slots), slots


def load_runs(out):
    """``{run name: summary}`` of every finished run under ``out``/runs."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "runs", "*", "summary.json"))):
        with open(path) as f:
            runs[os.path.basename(os.path.dirname(path))] = json.load(f)
    return runs


def _with(argv, **flags):
    """A simulator command line with some flags set (``max_iterations=30`` sets ``--max-iterations 30``)."""
    argv = list(argv)
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = str(value)
        else:
            argv += [flag, str(value)]
    return argv


def _sim(argv, out, timeout):
    proc = subprocess.run(argv + ["--metrics-out", out], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(argv[1:4]), proc.stderr[-2000:]))
    with open(os.path.join(out, "summary.json")) as f:
        done = json.load(f)
    return (sum(w["iterations"] for w in done["workers"]), done["sim"]["cpu_s"], len(done["curve"]),
            done["train_time_s"])


def measure(summary, caps=(30, 90), snapshots=20, timeout=1800):
    """CPU seconds of an iteration, of a snapshot of the global model, and of
    the rest (start-up and the final evaluation) for the run ``summary``
    describes, from three shorter runs of its own command: caps ``caps[0]``
    and ``caps[1]`` with no snapshot along the way, and ``caps[0]`` again with
    about ``snapshots`` of them.

    Raises:
        RuntimeError: a run failed (its error output is included), or the
        runs did not differ by a positive cost (the machine's noise swamped
        what was to be measured: a cost of zero would make runs look free).
    """
    argv = [sys.executable] + [a for a in summary["sim"]["command"][1:]]
    if "--metrics-out" in argv:
        i = argv.index("--metrics-out")
        del argv[i:i + 2]
    quiet = dict(eval_interval="1e9", eval_growth="0")
    with tempfile.TemporaryDirectory(prefix="mxhet-estimate-") as tmp:
        i1, c1, n1, t1 = _sim(_with(argv, max_iterations=caps[0], **quiet), os.path.join(tmp, "a"), timeout)
        i2, c2, _, _ = _sim(_with(argv, max_iterations=caps[1], **quiet), os.path.join(tmp, "b"), timeout)
        _, c3, n3, _ = _sim(_with(argv, max_iterations=caps[0], eval_interval="%g" % (t1 / snapshots),
                                  eval_growth="0"), os.path.join(tmp, "c"), timeout)
    if i2 <= i1 or n3 <= n1:
        raise RuntimeError("the measuring runs did not differ (iterations %d, %d; snapshots %d, %d)"
                           % (i1, i2, n1, n3))
    if c2 <= c1 or c3 <= c1:
        raise RuntimeError("the measuring runs did not cost more CPU for more iterations or snapshots "
                           "(CPU seconds %g, %g, %g); measure on a quieter machine or with larger caps"
                           % (c1, c2, c3))
    per_iteration = (c2 - c1) / (i2 - i1)
    return {"iteration_cpu_s": per_iteration, "snapshot_cpu_s": (c3 - c1) / (n3 - n1),
            "fixed_cpu_s": max(0.0, c1 - i1 * per_iteration), "fixed_snapshots": n1,
            "measured": {"iterations": [i1, i2], "cpu_s": [c1, c2, c3], "snapshots": [n1, n3]}}


def estimate(runs, costs, jobs, opt_in=()):
    """The estimate for ``runs`` (name -> summary) with ``costs`` (model -> :func:`measure`).

    ``opt_in``: models a bench runs only on request (``Preset.opt_in``); where
    some of the runs are theirs, ``default`` is the estimate without them.
    """
    rows = []
    for name, summary in sorted(runs.items()):
        model = summary.get("model")
        if model not in costs:
            raise ValueError("no measured cost for model %r (run %s)" % (model, name))
        rows.append(dict(run_cost(summary, costs[model]), run=name, model=model))
    total = sum(r["cost_s"] for r in rows)
    span, slots = makespan([r["cost_s"] for r in rows], jobs)
    result = {"jobs": jobs, "runs": rows, "total_s": total, "makespan_s": span, "slots_s": slots, "costs": costs}
    left_out = sorted({r["model"] for r in rows} & set(opt_in))
    if left_out:
        kept = [r["cost_s"] for r in rows if r["model"] not in left_out]
        span, slots = makespan(kept, jobs)
        result["default"] = {"left_out": left_out, "total_s": sum(kept), "makespan_s": span, "slots_s": slots}
    return result


def report(result, command):
    lines = ["# How long this simulator bench takes on an idle machine (an estimate)", "",
             "Command: `%s`" % command, "",
             "CPU seconds per model, from three short runs of its Sync run's command (compute caps of %s real "
             "iterations without snapshots along the way, and the first cap again with snapshots): an "
             "iteration, a snapshot of the global model scored on %s test images, and what a run costs "
             "besides (start-up, the first and the final evaluation)." % (
                 " and ".join(str(c) for c in result.get("caps", ())), result.get("eval_samples", "its")), "",
             "| model | iteration | snapshot | start-up and final evaluation |", "|---|---|---|---|"]
    lines += ["| %s | %.3f | %.2f | %.1f |" % (m, c["iteration_cpu_s"], c["snapshot_cpu_s"], c["fixed_cpu_s"])
              for m, c in sorted(result["costs"].items())]
    lines += ["", "| run | iterations | snapshots | iterations (min) | snapshots (min) | total (min) |",
              "|---|---|---|---|---|---|"]
    for r in sorted(result["runs"], key=lambda r: -r["cost_s"]):
        lines.append("| %s | %d | %d | %.1f | %.1f | %.1f |" % (r["run"], r["iterations"], r["snapshots"],
                                                                r["iterations_s"] / 60.0, r["snapshots_s"] / 60.0,
                                                                r["cost_s"] / 60.0))
    lines += ["", "All runs one after the other: **%.0f min**. With `--jobs %d` (longest first): **%.0f min** "
              "(slots: %s min)." % (result["total_s"] / 60.0, result["jobs"], result["makespan_s"] / 60.0,
                                    ", ".join("%.0f" % (s / 60.0) for s in result["slots_s"])), ""]
    default = result.get("default")
    if default:
        lines += ["Without %s, which the preset runs only when `--models` names it (what `mxhet-bench all` "
                  "runs by default): **%.0f min** one after the other, **%.0f min** with `--jobs %d` (slots: %s "
                  "min)." % (", ".join(default["left_out"]), default["total_s"] / 60.0, default["makespan_s"] / 60.0,
                            result["jobs"], ", ".join("%.0f" % (s / 60.0) for s in default["slots_s"])), ""]
    return "\n".join(lines)


def _opt_in(out):
    """The opt-in models of the preset the bench in ``out`` ran (none when it is not known)."""
    from . import presets
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        with open(path) as f:
            try:
                name = json.load(f).get("preset")
            except (ValueError, AttributeError):
                continue
        if name in presets.PRESETS:
            return tuple(presets.PRESETS[name].opt_in)
    return ()


def main_predict(args, argv):
    """``--preset``: predict the cost of whole benches from the costs of an earlier estimate.json."""
    from . import presets
    from .provenance import provenance
    if not args.costs:
        raise SystemExit("python -m bench.estimate: --preset needs --costs (an estimate.json with measured costs)")
    missing = [d for d in args.measured or () if not os.path.isdir(d)]
    if missing:
        raise SystemExit("python -m bench.estimate: --measured %s: no such directory" % missing[0])
    with open(args.costs) as f:
        costs = json.load(f)["costs"]
    seeds = tuple(int(x) for x in args.seeds.split(",")) if args.seeds else None
    try:
        results = [predict(presets.get(name), costs, args.jobs, seeds=seeds) for name in args.preset]
    except (ValueError, ConfigError) as exc:
        raise SystemExit("python -m bench.estimate: %s" % exc)
    if args.measured:
        calibrate(results, finished_runs(args.measured))
    command = "mxhet-bench estimate " + " ".join(argv)
    os.makedirs(args.out, exist_ok=True)
    doc = {"command": command, "costs_from": args.costs, "measured": list(args.measured or ()), "presets": results,
           "total_makespan_s": sum(r["makespan_s"] for r in results), "calibrated": calibrated_totals(results),
           "provenance": provenance(["mxhet-bench", "estimate"] + list(argv), seeds=seeds or ())}
    with open(os.path.join(args.out, "estimate.json"), "w") as f:
        json.dump(doc, f, indent=1)
    text = predict_report(results, command, args.costs, args.measured or ())
    with open(os.path.join(args.out, "estimate.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="mxhet-bench estimate", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a finished simulator bench's output directory (with runs/); "
                                                "with --preset, where the prediction is written")
    p.add_argument("--preset", action="append", default=None,
                   help="predict the whole bench of this preset (repeatable: paper-sim, paper-sim-open) from the "
                        "per-model costs in --costs instead of estimating a finished bench")
    p.add_argument("--seeds", default=None, help="with --preset: every model's seeds (default: the preset's)")
    p.add_argument("--jobs", type=int, default=2, help="runs at once (default %(default)s)")
    p.add_argument("--measured", action="append", default=None, metavar="DIR",
                   help="with --preset: a bench output directory (repeatable) whose finished runs say what the "
                        "planned runs take on this machine: the prediction is calibrated by them")
    p.add_argument("--caps", default="30,90", help="the two compute caps of the measuring runs (default %(default)s)")
    p.add_argument("--costs", default="", help="take the per-model costs from this earlier estimate.json "
                                               "instead of measuring them (models it lacks are measured)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        raise SystemExit("python -m bench.estimate: --jobs must be >= 1, got %d" % args.jobs)
    if args.preset:
        return main_predict(args, argv)
    if args.measured:
        raise SystemExit("python -m bench.estimate: --measured calibrates a prediction: give --preset")
    runs = load_runs(args.out)
    if not runs:
        raise SystemExit("python -m bench.estimate: no finished runs under %s/runs" % args.out)
    try:
        caps = tuple(int(c) for c in args.caps.split(","))
    except ValueError:
        caps = ()
    if len(caps) != 2 or not 0 < caps[0] < caps[1]:
        raise SystemExit("python -m bench.estimate: --caps must be two increasing integers, got %r" % args.caps)
    if args.jobs < 1:
        raise SystemExit("python -m bench.estimate: --jobs must be >= 1, got %d" % args.jobs)
    models = sorted({s.get("model") for s in runs.values()})
    from tqdm import tqdm
    costs = {}
    if args.costs:
        with open(args.costs) as f:
            earlier = json.load(f)
        costs = {m: c for m, c in earlier.get("costs", {}).items() if m in models}
        caps = tuple(earlier.get("caps", caps))
    for model in tqdm([m for m in models if m not in costs], desc="measuring", unit="model"):
        # the model's Sync run where there is one (any of its runs otherwise)
        name = min((n for n, s in runs.items() if s.get("model") == model),
                   key=lambda n: (runs[n].get("mode") != "sync", n))
        costs[model] = dict(measure(runs[name], caps), run=name)
    result = estimate(runs, costs, args.jobs, opt_in=_opt_in(args.out))
    command = "python -m bench.estimate " + " ".join(argv)
    result.update(command=command, caps=caps,
                  eval_samples=next(iter(runs.values())).get("eval_samples", "its"))
    from .experiment import write_outputs
    from .provenance import provenance
    result["provenance"] = provenance(["python", "-m", "bench.estimate"] + list(argv))
    text = report(result, command)
    write_outputs(args.out, "estimate", result, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
