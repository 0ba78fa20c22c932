"""``mxhet-bench validate-sim``: does the simulator tell the truth about the cluster?

The same job -- profile, model, seed, base iteration -- runs once on the real
cluster (launcher, PS-LITE, State Server, ``--base-iter`` padding) and once in
virtual time (``python -m mxhet.sim``), and the two are compared per device:

* mean local iterations per round n_i (within 10%),
* rounds per minute (within 10%),
* compute ratio (within 0.05 absolute),

and per run the test accuracy at matching times after a warm-up (the
simulator's curve interpolated at the cluster's snapshot times; the mean
absolute difference within 0.03). ``agree`` is true when every figure is
within its tolerance.
"""
import dataclasses
import json
import os
import sys

import numpy as np

from .provenance import provenance
from .runner import JobSpec, machine_info, run_with_bar
from .suite import write_json

TOLERANCES = {"local_iters_mean": ("relative", 0.10), "rounds_per_min": ("relative", 0.10),
              "compute_ratio": ("absolute", 0.05), "accuracy": ("absolute", 0.03)}
WARMUP = 0.25
"""Share of the budget before accuracies are compared (the first snapshots move fastest)."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One profile to validate on: slowdowns per device and optional speed schedules."""
    name: str
    slowdowns: tuple
    schedules: tuple = ()   # launcher --slowdown-schedule values, "SLOT:SPEC"
    note: str = ""


def default_cases(budget):
    """The bench's ``cpu`` profile, and one of four different speeds with a mid-run slowdown."""
    half = budget / 2
    return (Case("cpu", (10.0, 10.0, 1.0, 1.0), note="the cpu preset's profile"),
            Case("mixed", (1.0, 2.0, 4.0, 8.0), ("0:%g-=12" % half,),
                 note="four speeds; slot 0 slows from 1x to 12x at half time"))


def per_device(summary):
    """``{figure: [value per device in slot order]}`` of one run's summary."""
    workers = sorted(summary["workers"], key=lambda w: w["slot"])
    minutes = summary["train_time_s"] / 60.0
    return {
        "local_iters_mean": [sum(w["local_iters"]) / max(1, len(w["local_iters"])) for w in workers],
        "rounds_per_min": [w["rounds"] / minutes if minutes > 0 else 0.0 for w in workers],
        "compute_ratio": [w["compute_ratio"] or 0.0 for w in workers],
    }


def accuracy_gap(cluster_curve, sim_curve, budget, warmup=WARMUP):
    """Mean and max |cluster - sim| test accuracy at the cluster's snapshot times after the warm-up."""
    sim_t = np.array([t for t, _ in sim_curve])
    sim_a = np.array([a for _, a in sim_curve])
    gaps = [abs(a - float(np.interp(t, sim_t, sim_a))) for t, a in cluster_curve if warmup * budget <= t <= budget]
    if not gaps:
        return None, None, 0
    return float(np.mean(gaps)), float(np.max(gaps)), len(gaps)


def within(kind, limit, cluster, sim):
    if kind == "relative":
        return abs(sim - cluster) <= limit * max(abs(cluster), 1e-9)
    return abs(sim - cluster) <= limit


def compare(cluster, sim, budget):
    """Every compared figure of one (case, mode), with its tolerance and verdict."""
    a, b = per_device(cluster), per_device(sim)
    figures = []
    for name in ("local_iters_mean", "rounds_per_min", "compute_ratio"):
        kind, limit = TOLERANCES[name]
        for slot, (x, y) in enumerate(zip(a[name], b[name])):
            figures.append({"figure": name, "slot": slot, "cluster": round(x, 4), "sim": round(y, 4),
                            "tolerance": "%s %g" % (kind, limit), "agree": within(kind, limit, x, y)})
    mean_gap, max_gap, points = accuracy_gap(cluster["curve"], sim["curve"], budget)
    kind, limit = TOLERANCES["accuracy"]
    figures.append({"figure": "accuracy", "slot": None, "cluster": None, "sim": None, "mean_abs_gap": mean_gap,
                    "max_abs_gap": max_gap, "points": points, "tolerance": "mean %s %g" % (kind, limit),
                    "agree": mean_gap is not None and mean_gap <= limit})
    return figures


def run(cases, modes, model, budget, base_iter, out, seed=0, run_job=run_with_bar, log=print,
        input_size=0, lr=0.05, command=None):
    """Run every (case, mode) on both engines; write ``validate-sim.json`` and ``validate-sim.md``."""
    os.makedirs(out, exist_ok=True)
    results = []
    for case in cases:
        for mode in modes:
            pair = {}
            for engine in ("cluster", "sim"):
                launcher = ["--base-iter", "%g" % base_iter]
                for schedule in case.schedules:
                    launcher += ["--slowdown-schedule", schedule]
                spec = JobSpec(mode=mode, slowdowns=case.slowdowns, model=model, time_budget=budget, lr=lr,
                               seed=seed, input_size=input_size, eval_interval=max(1.0, budget / 30),
                               extra_train_args=("--eval-samples", "2000"), launcher_args=tuple(launcher),
                               engine=engine)
                run_dir = os.path.join(out, "runs", "%s-%s-%s" % (case.name, mode, engine))
                pair[engine] = run_job(spec, run_dir, "%s %s %s" % (case.name, mode, engine))
            figures = compare(pair["cluster"], pair["sim"], budget)
            agree = all(f["agree"] for f in figures)
            log("%s %s: %s" % (case.name, mode, "agree" if agree else "DISAGREE on " + ", ".join(
                sorted({"%s%s" % (f["figure"], "" if f["slot"] is None else "[%d]" % f["slot"])
                        for f in figures if not f["agree"]}))))
            results.append({"case": case.name, "slowdowns": list(case.slowdowns),
                            "schedules": list(case.schedules), "note": case.note, "mode": mode,
                            "agree": agree, "figures": figures,
                            "final_accuracy": {e: pair[e]["final_accuracy"] for e in pair},
                            "sim_speed": pair["sim"].get("sim", {}).get("virtual_s_per_wall_s")})
    result = {"experiment": "validate-sim", "engine": "both", "agree": all(r["agree"] for r in results),
              "command": list(command or sys.argv), "machine": machine_info(("cpu",)),
              "provenance": provenance(command, seeds=[seed]), "model": model,
              "time_budget_s": budget, "base_iteration_s": base_iter, "seed": seed, "tolerances": {
                  k: "%s %g" % v for k, v in TOLERANCES.items()}, "warmup_share": WARMUP, "results": results}
    write_json(os.path.join(out, "validate-sim.json"), result)
    with open(os.path.join(out, "validate-sim.md"), "w") as f:
        f.write(markdown(result))
    return result


def markdown(result):
    lines = ["# mxhet-bench validate-sim", "",
             "The same jobs on the real cluster and in the simulator (`%s`, %g s, base iteration %g s, seed %d)."
             % (result["model"], result["time_budget_s"], result["base_iteration_s"], result["seed"]), "",
             "Command: `%s`" % " ".join(result["command"]), "",
             "Tolerances: %s; accuracy compared after the first %d%% of the budget." % (
                 ", ".join("%s %s" % kv for kv in result["tolerances"].items()), 100 * result["warmup_share"]), "",
             "**Overall: %s**" % ("the engines agree" if result["agree"] else "the engines DISAGREE"), ""]
    for r in result["results"]:
        lines += ["## %s, %s: %s" % (r["case"], r["mode"], "agree" if r["agree"] else "DISAGREE"), "",
                  "Slowdowns %s%s. Final accuracy: cluster %.3f, sim %.3f. Simulator speed: %s virtual s per "
                  "wall s." % (",".join("%g" % s for s in r["slowdowns"]),
                               "; schedule " + ", ".join(r["schedules"]) if r["schedules"] else "",
                               r["final_accuracy"]["cluster"], r["final_accuracy"]["sim"], r["sim_speed"]), "",
                  "| figure | device | cluster | sim | tolerance | agree |", "|---|---|---|---|---|---|"]
        for f in r["figures"]:
            if f["figure"] == "accuracy":
                lines.append("| accuracy, mean / max gap over %d points | all | | %s / %s | %s | %s |" % (
                    f["points"], "%.3f" % f["mean_abs_gap"] if f["mean_abs_gap"] is not None else "-",
                    "%.3f" % f["max_abs_gap"] if f["max_abs_gap"] is not None else "-", f["tolerance"],
                    "yes" if f["agree"] else "**no**"))
            else:
                lines.append("| %s | %d | %.3f | %.3f | %s | %s |" % (
                    f["figure"], f["slot"], f["cluster"], f["sim"], f["tolerance"], "yes" if f["agree"] else "**no**"))
        lines.append("")
    return "\n".join(lines)


def load(path):
    with open(path) as f:
        return json.load(f)
