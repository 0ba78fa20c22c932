"""CPU seconds of short simulator runs on two versions of the code: the checkout and ``--before REV``.

    python bench/results/sim-speed/measure.py --before REV [--repeats 3] [--out bench/results/sim-speed/NAME.json]

Each run is a fresh ``python -m mxhet.sim`` on one thread with MXNet's NaiveEngine (as the bench runs a job
beside another), started from a ``git worktree`` of REV or from this checkout; the kernel reports its user +
system CPU seconds at its end (``os.wait4``). The two versions alternate, so a busy spell of the machine
falls on both. Every run's final model digest is recorded too: a change meant to make the simulator cheaper
must leave it the same.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench.provenance import provenance  # noqa: E402
from bench.suite import write_json  # noqa: E402

# the paper-sim profiles and per-model settings (bench/presets.py), for a few virtual seconds each
JOBS = {
    "alexnet async, 117x (6 devices)": [
        "-n", "6", "--sync", "async", "--slowdown", "117,117,1,1,1,1", "--base-iter", "0.148", "--model", "alexnet",
        "--input-size", "64", "--time-budget", "4"],
    "resnet18_v1 sync, fast devices only (4 devices)": [
        "-n", "4", "--sync", "sync", "--slowdown", "1,1,1,1", "--base-iter", "0.115", "--model", "resnet18_v1",
        "--input-size", "32", "--time-budget", "2"],
    "resnet18_v1 dcasgd, 117x (6 devices)": [
        "-n", "6", "--sync", "dcasgd", "--slowdown", "117,117,1,1,1,1", "--base-iter", "0.115", "--model",
        "resnet18_v1", "--input-size", "32", "--time-budget", "2"],
}
# one fast device alone (--sync local), about 40 iterations of each model the paper trains at 32 pixels: what one
# replica's training costs, where 1f5f1cb changed the convolutions that see one pixel (AlexNet, at 64 pixels,
# has none: the control)
for _model, _iteration_s in (("resnet18_v1", 0.115), ("resnet50_v1", 0.302), ("resnet50_v2", 0.311),
                             ("mobilenet1.0", 0.103), ("alexnet", 0.148)):
    JOBS["%s alone (1 device)" % _model] = [
        "-n", "1", "--sync", "local", "--slowdown", "1", "--base-iter", "%g" % _iteration_s, "--model", _model,
        "--input-size", "64" if _model == "alexnet" else "32", "--time-budget", "%g" % (40 * _iteration_s)]
COMMON = ["--contexts", "cpu", "--batch-size", "64", "--lr", "0.001", "--seed", "0", "--eval-interval", "1000",
          "--eval-samples", "100", "--final-eval-samples", "100", "--bn-batches", "2", "--no-progress"]


def run(tree, argv, out):
    env = dict(os.environ, OMP_NUM_THREADS="1", MXNET_ENGINE_TYPE="NaiveEngine")
    with open(out + ".log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mxhet.sim"] + argv + COMMON + ["--metrics-out", out],
                                cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    if status != 0:
        raise SystemExit("the run in %s ended with status %d: %s.log" % (tree, status, out))
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    digests = sorted({w["final_model_sha256"] for w in summary["workers"]})
    iterations = sum(w["iterations"] for w in summary["workers"])
    return round(usage.ru_utime + usage.ru_stime, 3), digests, iterations


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the git revision to compare this checkout with")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None, help="comma-separated words: run the jobs whose name has one of "
                        "them (default: every job)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "measure.json"))
    args = parser.parse_args(argv)
    before = subprocess.run(["git", "rev-parse", args.before], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="sim-speed-")
    tree = os.path.join(tmp, "before")
    subprocess.run(["git", "worktree", "add", "--detach", tree, before], cwd=ROOT, check=True, capture_output=True)
    rows = []
    try:
        words = args.only.split(",") if args.only else None
        for name, job in JOBS.items():
            if words and not any(w in name for w in words):
                continue
            samples = {"before": [], "after": []}
            seen = {"before": set(), "after": set()}
            work = {}
            for repeat in range(args.repeats):
                for side, where in (("before", tree), ("after", ROOT)):
                    cpu, digests, iterations = run(where, job, os.path.join(tmp, "%s-%d" % (side, repeat)))
                    samples[side].append(cpu)
                    seen[side].update(digests)
                    work[side] = iterations
                    print("%-48s %-6s %7.2f CPU s  %d iterations" % (name, side, cpu, iterations), flush=True)
            med = {side: statistics.median(samples[side]) for side in samples}
            rows.append({"job": name, "argv": job + COMMON, "cpu_s": samples,
                         "median_cpu_s": {side: round(v, 3) for side, v in med.items()},
                         "after_of_before": round(med["after"] / med["before"], 3),
                         "iterations": work, "same_final_model": seen["before"] == seen["after"],
                         "final_model_sha256": sorted(seen["after"])})
            print("%-48s after/before %.3f, same final model: %s" % (name, rows[-1]["after_of_before"],
                                                                     rows[-1]["same_final_model"]), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    command = ["python", "bench/results/sim-speed/measure.py"] + list(sys.argv[1:] if argv is None else argv)
    result = {"what": "CPU seconds of whole simulator processes (start-up and a 100-image evaluation included) "
                      "on the code at `before` and at the provenance's commit",
              "before": before, "provenance": provenance(command=command), "repeats": args.repeats,
              "load_average_1min_at_end": round(os.getloadavg()[0], 2), "rows": rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json(args.out, result)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
