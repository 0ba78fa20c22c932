"""How OpenMP's wait policy changes MXNet's speed on two threads, on idle cores and beside one busy process.

    python bench/results/omp-wait/measure.py [--repeats 2] [--out bench/results/omp-wait/omp-wait.json]

Two jobs, each with ``OMP_NUM_THREADS=2`` (what mxhet-launch gives one worker on a 2-core machine, and the
bench's one simulator at a time) under ``OMP_WAIT_POLICY=ACTIVE`` (libgomp spins between parallel regions, as
its default does first) and ``PASSIVE`` (it sleeps), alternated:

- ``cluster small CNN``: ``mxhet-launch -n 1 --sync local`` of the small CNN for 10 s of training; the result
  is the iterations it made (more is faster);
- ``simulator ResNet-18``: ``python -m mxhet.sim -n 1 --sync local`` of ResNet-18 for 6 virtual s; the result
  is its wall seconds (fewer is faster).

"beside a busy process" runs each beside one ``python`` spinning on a core at nice 5 (a bench, a test run);
"idle" needs the machine otherwise idle (pause any bench first: a simulator run resumes where it stopped).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench.provenance import provenance  # noqa: E402

POLICIES = ("ACTIVE", "PASSIVE")


def _env(policy):
    return dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY=policy, PYTHONPATH=ROOT)


def cluster_small_cnn(policy, out):
    argv = [sys.executable, "-m", "mxhet.launcher", "-n", "1", "--sync", "local", "--slowdown", "1",
            "--contexts", "cpu", "--omp-threads", "2", "--timeout", "120", "--",
            sys.executable, "-m", "mxhet.train", "--model", "smallcnn", "--batch-size", "64", "--lr", "0.05",
            "--time-budget", "10", "--seed", "0", "--eval-interval", "1000", "--metrics-out", out]
    subprocess.run(argv, cwd=ROOT, env=_env(policy), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["workers"][0]["iterations"]


def sim_resnet18(policy, out):
    argv = [sys.executable, "-m", "mxhet.sim", "-n", "1", "--sync", "local", "--slowdown", "1",
            "--base-iter", "0.115", "--model", "resnet18_v1", "--input-size", "32", "--batch-size", "64",
            "--lr", "0.03", "--time-budget", "6", "--eval-samples", "1000", "--eval-interval", "100",
            "--metrics-out", out]
    t0 = time.monotonic()
    subprocess.run(argv, cwd=ROOT, env=_env(policy), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return round(time.monotonic() - t0, 2)


JOBS = (("cluster small CNN", "iterations in 10 s of training", cluster_small_cnn),
        ("simulator ResNet-18", "wall seconds for 6 virtual s", sim_resnet18))


def measure(repeats, tmp):
    samples = {(job, policy): [] for job, _, _ in JOBS for policy in POLICIES}
    for repeat in range(repeats):
        for job, _, run in JOBS:
            for policy in POLICIES:
                out = os.path.join(tmp, "%s-%s-%d" % (job.replace(" ", "-"), policy, repeat))
                samples[(job, policy)].append(run(policy, out))
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "omp-wait.json"))
    args = parser.parse_args(argv)
    phases = []
    with tempfile.TemporaryDirectory() as tmp:
        for phase in ("idle", "beside a busy process"):
            busy = None
            if phase != "idle":
                busy = subprocess.Popen(["nice", "-n", "5", sys.executable, "-c", "while True: pass"])
            try:
                load = round(os.getloadavg()[0], 2)
                samples = measure(args.repeats, os.path.join(tmp, phase.replace(" ", "-")))
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
            rows = [{"job": job, "unit": unit, "policy": policy, "values": samples[(job, policy)],
                     "median": statistics.median(samples[(job, policy)])}
                    for job, unit, _ in JOBS for policy in POLICIES]
            for row in rows:
                print("%-22s %-20s %-8s median %-8s %s (%s)" % (phase, row["job"], row["policy"], row["median"],
                                                               row["values"], row["unit"]))
            phases.append({"phase": phase, "load_average_1min_at_start": load, "rows": rows})
    command = ["python", "bench/results/omp-wait/measure.py"] + list(sys.argv[1:] if argv is None else argv)
    result = {"what": __doc__.split("\n")[0], "provenance": provenance(command=command), "repeats": args.repeats,
              "phases": phases}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
