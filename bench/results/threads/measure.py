"""How fast one simulator run goes under each compute-thread setting, on an otherwise idle machine.

    python bench/results/threads/measure.py [--budget 12] [--repeats 2] [--out bench/results/threads/settings.json]

Each setting runs the same short ResNet-18 job (closed-division settings: lr 0.001, batch 64, 32 px) as
``python -m mxhet.sim`` and reads the simulator's own "simulated X virtual seconds in Y s of wall time"
line, which leaves out start-up and the final evaluation. Settings alternate, so a slow spell of the
machine falls on all of them.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench.provenance import provenance  # noqa: E402
from bench.runner import compute_threads  # noqa: E402

SETTINGS = (
    ("MXNet's default (OMP_NUM_THREADS unset)", {}),
    ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}),
    ("OMP_NUM_THREADS=2", {"OMP_NUM_THREADS": "2"}),
    ("OMP_NUM_THREADS=2 MXNET_ENGINE_TYPE=NaiveEngine", {"OMP_NUM_THREADS": "2", "MXNET_ENGINE_TYPE": "NaiveEngine"}),
)
JOBS = (
    ("one fast device alone", ["-n", "1", "--sync", "local", "--slowdown", "1"]),
    ("Sync over four fast devices", ["-n", "4", "--sync", "sync", "--slowdown", "1,1,1,1"]),
)
LINE = re.compile(r"simulated ([0-9.]+) virtual seconds in ([0-9.]+) s of wall time")


def one(job, extra_env, budget, out):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MXNET_ENGINE_TYPE")}
    env.update(extra_env)
    argv = [sys.executable, "-m", "mxhet.sim"] + job + [
        "--contexts", "cpu", "--base-iter", "0.115", "--model", "resnet18_v1", "--input-size", "32",
        "--batch-size", "64", "--lr", "0.001", "--dist", "iid", "--time-budget", str(budget), "--seed", "0",
        "--eval-samples", "1000", "--eval-min-iterations", "20", "--eval-growth", "0.1", "--metrics-out", out]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    found = LINE.search(proc.stdout + proc.stderr)
    if not found:
        raise SystemExit("no 'simulated ... wall time' line from %s" % " ".join(argv))
    virtual, wall = float(found.group(1)), float(found.group(2))
    return {"virtual_s": virtual, "wall_s": wall, "threads": compute_threads(env),
            "virtual_s_per_wall_min": round(60 * virtual / wall, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=12.0, help="virtual s of training per run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "settings.json"))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for job_name, job in JOBS:
                for name, extra in SETTINGS:
                    row = dict(one(job, extra, args.budget, os.path.join(tmp, "run")), job=job_name, setting=name,
                               repeat=repeat)
                    print("%-28s %-50s %6.2f virtual s a wall minute" % (job_name, name, row["virtual_s_per_wall_min"]),
                          flush=True)
                    rows.append(row)
    summary = {}
    for job_name, _ in JOBS:
        for name, _ in SETTINGS:
            rates = [r["virtual_s_per_wall_min"] for r in rows if r["job"] == job_name and r["setting"] == name]
            summary.setdefault(job_name, {})[name] = round(sum(rates) / len(rates), 2)
    doc = {"what": __doc__.strip().split("\n")[0], "unit": "virtual seconds of the run per wall minute",
           "runs": rows, "mean": summary,
           "provenance": provenance(["python", "bench/results/threads/measure.py"] + list(argv or sys.argv[1:]))}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
