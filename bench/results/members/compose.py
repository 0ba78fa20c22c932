"""Compose one ``python -m mxhet.sim --score-members N`` run into this directory's JSON and figure.

    python bench/results/members/compose.py RUN_DIR NAME "WHAT" [--commit C --date D]

RUN_DIR is the run's ``--metrics-out`` (``summary.json``); NAME the output's stem (``NAME.json``,
``NAME.png``); WHAT the sentence saying what the run is. The JSON holds the provenance (the run's own
command, commit and date: ``--commit`` and ``--date`` where the run was made before this script ran), the
per-round property (the global model scores at least the members' mean), the late members and, under
``--late-memory``, the rounds that added a remembered delta and who pushed and pulled it, the scoring's
cost, and the run's summary.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench import plots  # noqa: E402
from bench.provenance import provenance  # noqa: E402


def _spread(values):
    return {"min": round(min(values), 4), "max": round(max(values), 4),
            "mean": round(sum(values) / len(values), 4)} if values else None


def compose(summary, commit=None, date=None):
    members = summary["members"]
    rounds = members["rounds"]
    gaps = [r["global_accuracy"] - r["members_mean"] for r in rounds]
    late = [m for r in rounds for m in r["members"] if m.get("staleness", 0) > 0]
    with_late = [r for r in rounds if r.get("late")]
    on_time = [m["accuracy"] for r in rounds for m in r["members"] if m.get("staleness", 0) == 0]
    out = {
        "rounds": len(rounds),
        "global_at_least_members_mean": sum(g >= 0 for g in gaps),
        "global_minus_mean": _spread(gaps),
        "late_members": {
            "pushes": len(late), "rounds_with_late": len(with_late),
            "slots": sorted({m["slot"] for m in late}), "staleness": sorted({m["staleness"] for m in late}),
            "share_range": [round(min(m["share"] for m in late), 4), round(max(m["share"] for m in late), 4)]
            if late else None,
            "accuracy_mean": round(sum(m["accuracy"] for m in late) / len(late), 4) if late else None,
            "on_time_accuracy_mean": round(sum(on_time) / len(on_time), 4) if on_time else None,
            "global_at_least_on_time_mean": sum(r["global_accuracy"] >= r["on_time_mean"] for r in rounds),
            "global_minus_on_time_mean": _spread([r["global_accuracy"] - r["on_time_mean"] for r in rounds]),
            "in_rounds_with_late": {
                "global_at_least_members_mean": sum(r["global_accuracy"] >= r["members_mean"] for r in with_late),
                "global_minus_mean_mean": round(sum(r["global_accuracy"] - r["members_mean"] for r in with_late)
                                                / len(with_late), 4) if with_late else None,
                "global_at_least_on_time_mean": sum(r["global_accuracy"] >= r["on_time_mean"]
                                                    for r in with_late)}},
    }
    log = summary["sim"].get("memory_log") or []
    if log:   # --late-memory: (slot, round, "push"/"pull", rank, version)
        pushes = [e for e in log if e[2] == "push"]
        pulls = [e for e in log if e[2] == "pull"]
        out["late_memory"] = {"memory_pushes": len(pushes), "keeper_pulls": len(pulls),
                              "pushed_by_slots": sorted({e[0] for e in pushes}),
                              "pulled_by_slots": sorted({e[0] for e in pulls}),
                              "workers": {str(w["slot"]): w.get("late_memory") for w in summary["workers"]}}
    cost = members.get("cpu_s"), members.get("wall_s")
    out["cost"] = {"scoring_cpu_s": cost[0], "scoring_wall_s": cost[1],
                   "cpu_s_per_round": members.get("cpu_s_per_round"),
                   "cpu_s_per_score": members.get("cpu_s_per_score"),
                   "run_wall_s": summary["sim"].get("wall_s"), "run_cpu_s": summary["sim"].get("cpu_s")}
    prov = provenance(["env", "OMP_NUM_THREADS=1", "MXNET_CPU_WORKER_NTHREADS=1"] + summary["sim"]["command"],
                      {summary.get("seed", 0)})
    if commit:
        prov.update(commit=commit, dirty=False)
    if date:
        prov["date"] = date
    return prov, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("name")
    parser.add_argument("what")
    parser.add_argument("--commit", default=None, help="the commit the run was made on (default: HEAD)")
    parser.add_argument("--date", default=None, help="when the run was made (default: now)")
    args = parser.parse_args(argv)
    with open(os.path.join(args.run_dir, "summary.json")) as f:
        summary = json.load(f)
    prov, out = compose(summary, args.commit, args.date)
    here = os.path.dirname(os.path.abspath(__file__))
    doc = dict({"provenance": prov, "what": args.what}, **out, summary=summary)
    with open(os.path.join(here, args.name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    plots.members_plot(os.path.join(args.run_dir, "summary.json"), os.path.join(here, args.name + ".png"))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
