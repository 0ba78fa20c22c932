"""The fixed cost of an ESync round on the real cluster, before and after a change.

Runs the same ESync job (by default the demo's: 3 workers, slowdown 1,1,10,
the small CNN, 60 s) with two checkouts of mxhet, interleaved (before, after,
before, after, ...) so that load from other processes on the machine falls on
both alike. For each run it reports, per device: blocked seconds per round
(State Server waits plus push/pull), its split into State Server and push/pull
time, the compute ratio, the mean iteration time, and the ratio of the fast
devices' blocked time per round to the fastest device's iteration time.

Usage::

    python -m bench.round_cost --code before=<dir>,after=. --ack blocking,delayed \\
        --repeat 2 --out runs/round-cost

``<dir>`` holds another mxhet (e.g. ``git archive <commit> | tar -x -C <dir>``);
each run starts in that directory so its workers and servers import it.
"""
import argparse
import json
import os
import statistics
import sys
import time

from .runner import JobFailed, JobSpec, machine_info, run_job


def _pairs(text):
    out = []
    for item in text.split(","):
        label, _, path = item.partition("=")
        if not label or not path:
            raise argparse.ArgumentTypeError("expected LABEL=DIR[,LABEL=DIR...], got %r" % text)
        out.append((label, os.path.abspath(path)))
    return out


def summarize(summary):
    """Per-device round costs of one finished job's ``summary.json``."""
    workers = sorted(summary["workers"], key=lambda w: w["slot"])
    rows = []
    for w in workers:
        rounds = max(1, len(w["round_blocked_s"]))
        rows.append({
            "slot": w["slot"], "slowdown": w["slowdown"], "rounds": w["rounds"],
            "iteration_s": w["compute_s"] / max(1, w["iterations"] + w["aborted"]),
            "blocked_per_round_s": sum(w["round_blocked_s"]) / rounds,
            "query_per_round_s": w["query_s"] / rounds,
            "sync_per_round_s": w["sync_s"] / rounds,
            "compute_ratio": w["compute_ratio"],
            "mean_n_i": statistics.mean(w["local_iters"]) if w["local_iters"] else 0.0,
            "rtt_s": w["rtt_s"], "aborted": w["aborted"],
        })
    fastest = min(rows, key=lambda r: r["slowdown"])
    fast = [r for r in rows if r["slowdown"] == fastest["slowdown"]]
    return {
        "devices": rows,
        "fastest_iteration_s": fastest["iteration_s"],
        "fast_blocked_per_round_s": statistics.mean(r["blocked_per_round_s"] for r in fast),
        "fast_compute_ratio": statistics.mean(r["compute_ratio"] for r in fast),
        "blocked_over_iteration": statistics.mean(r["blocked_per_round_s"] for r in fast) / fastest["iteration_s"],
        "final_accuracy": summary.get("final_accuracy"),
    }


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.round_cost", description=__doc__.splitlines()[0])
    p.add_argument("--code", type=_pairs, default=[("current", os.getcwd())],
                   help="LABEL=DIR pairs: checkouts of mxhet to compare (default: this one)")
    p.add_argument("--ack", default="blocking,delayed", help="ESync ack modes (default %(default)s)")
    p.add_argument("--model", default="smallcnn")
    p.add_argument("--slowdown", default="1,1,10")
    p.add_argument("--time-budget", type=float, default=60.0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--extra", default="", help="more training flags, space-separated")
    p.add_argument("--out", default="runs/round-cost")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    slowdowns = tuple(float(x) for x in args.slowdown.split(","))
    acks = [a for a in args.ack.split(",") if a]
    results = []
    home = os.getcwd()
    for rep in range(args.repeat):
        for ack in acks:
            for label, code in args.code:
                name = "%s-%s-%d" % (label, ack, rep)
                spec = JobSpec(mode="esync", slowdowns=slowdowns, model=args.model, time_budget=args.time_budget,
                               batch_size=args.batch_size,
                               extra_train_args=("--ack", ack) + tuple(args.extra.split()))
                env_before = os.environ.get("PYTHONPATH")
                os.environ["PYTHONPATH"] = code
                os.chdir(code)
                started = time.time()
                try:
                    summary = run_job(spec, os.path.join(out, name))
                except JobFailed as exc:
                    print("FAILED %s: %s" % (name, exc), file=sys.stderr)
                    continue
                finally:
                    os.chdir(home)
                    if env_before is None:
                        os.environ.pop("PYTHONPATH", None)
                    else:
                        os.environ["PYTHONPATH"] = env_before
                row = dict(summarize(summary), label=label, ack=ack, repeat=rep, started_unix=started)
                results.append(row)
                print("%-22s fast blocked/round %6.1f ms  fastest iter %5.1f ms  ratio %5.2f  "
                      "fast compute ratio %.2f  q/round %s ms  sync/round %s ms  n_i %s  acc %s" % (
                          name, 1000 * row["fast_blocked_per_round_s"], 1000 * row["fastest_iteration_s"],
                          row["blocked_over_iteration"], row["fast_compute_ratio"],
                          "/".join("%.1f" % (1000 * d["query_per_round_s"]) for d in row["devices"]),
                          "/".join("%.1f" % (1000 * d["sync_per_round_s"]) for d in row["devices"]),
                          "/".join("%.1f" % d["mean_n_i"] for d in row["devices"]),
                          row["final_accuracy"]), flush=True)
    with open(os.path.join(out, "round-cost.json"), "w") as f:
        json.dump({"experiment": "round-cost", "command": sys.argv, "machine": machine_info(),
                   "model": args.model, "slowdown": list(slowdowns), "time_budget": args.time_budget,
                   "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
