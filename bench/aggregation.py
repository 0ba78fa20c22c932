"""``mxhet-bench aggregation``: ESync's aggregation options against plain ESync,
Sync, Async and standalone training, in the simulator.

For each model, profile and data split it runs (``python -m mxhet.sim``, one
process per run, ``--jobs`` at a time) plain ESync (Algorithm 1), ESync with
each option of :mod:`mxhet.policy.aggregation` and their combination, and the
references; every run stops at the target accuracy (``--stop-at-target``) or
at its cap of virtual seconds. It reports time to the target, final accuracy
and n_i (local iterations per round) per device, in ``aggregation.json`` and
``aggregation.md``.

Virtual time: an iteration of a slowdown-1 device takes the model's base
iteration (:data:`BASE_ITER_S`, one iteration measured on one CPU core here),
a slowdown-f device f times that.
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

from tqdm import tqdm

from mxhet.errors import ConfigError

from . import profiles

MODELS = {"resnet18_v1": {"input_size": 32, "lr": 0.1}, "alexnet": {"input_size": 64, "lr": 0.1},
          "smallcnn": {"input_size": 28, "lr": 0.05}}
BASE_ITER_S = {"resnet18_v1": 0.114, "alexnet": 0.148, "smallcnn": 0.05}
"""Virtual seconds of one iteration (batch 64) of a slowdown-1 device: one CPU
core of the bench machine for the paper's models (the bench/results/paper-sim
and bench/results/report.md calibrations); the small CNN's is the 0.05 s that
bench/results/validate-sim pins on both engines."""

VARIANTS = {
    "esync": ("esync", ()),
    "esync-normalized": ("esync", ("--aggregation", "normalized")),
    "esync-weighted": ("esync", ("--aggregation", "weighted")),
    "esync-nesterov": ("esync", ("--outer-optimizer", "nesterov")),
    "esync-normalized-nesterov": ("esync", ("--aggregation", "normalized", "--outer-optimizer", "nesterov")),
    "esync-delayed": ("esync", ("--ack", "delayed")),
    "esync-nesterov-delayed": ("esync", ("--outer-optimizer", "nesterov", "--ack", "delayed")),
    "sync": ("sync", ()),
    "async": ("async", ()),
    "local": ("local", ()),
}
DEFAULT_VARIANTS = ("esync", "esync-normalized", "esync-weighted", "esync-nesterov", "esync-normalized-nesterov",
                    "sync", "async", "local")
DEFAULT_CAP = 90.0
DEFAULT_SYNC_CAP = 400.0
"""Virtual seconds a run may take before it is stopped without reaching the
target (``--cap``; Sync: ``--sync-cap``, longer: it waits for the slowest
device every step, so its runs are cheap in wall time)."""


def _split(text, known, what):
    names = [x for x in text.split(",") if x]
    bad = [x for x in names if x not in known]
    if bad or not names:
        raise ConfigError("unknown %s %s; known: %s" % (what, bad or text, ", ".join(known)))
    return names


def plan(models, profile_names, dists, variants, cap, sync_cap, seed=0, eval_samples=1000):
    """Every run as ``(name, command arguments after python -m mxhet.sim)``; ``local`` runs once per model
    and profile (one device on the whole training set: the split does not apply)."""
    runs = []
    for model in models:
        spec = MODELS[model]
        base = BASE_ITER_S[model]
        for pname in profile_names:
            profile = profiles.BUILTIN[pname]
            slowdowns = profile.slowdowns
            for dist in dists:
                for variant in variants:
                    mode, extra = VARIANTS[variant]
                    if mode == "local" and dist != dists[0]:
                        continue
                    name = "%s-%s-%s-%s" % (model, pname, "all" if mode == "local" else dist, variant)
                    n = 1 if mode == "local" else len(slowdowns)
                    slow = "1" if mode == "local" else ",".join("%g" % f for f in slowdowns)
                    interval = 0.5 * max(1.0 if mode == "local" else max(slowdowns), 1.0) * base
                    args = ["-n", str(n), "--sync", mode, "--slowdown", slow, "--base-iter", "%g" % base,
                            "--model", model, "--input-size", str(spec["input_size"]), "--lr", "%g" % spec["lr"],
                            "--dist", dist, "--seed", str(seed), "--time-budget", "%g" % (sync_cap if mode == "sync" else cap),
                            "--stop-at-target", "--eval-interval", "%g" % interval, "--eval-growth", "0.1",
                            "--eval-samples", str(eval_samples), "--no-progress"] + list(extra)
                    runs.append((name, args))
    return runs


def _one(python, out, name, args):
    directory = os.path.join(out, "runs", name)
    summary = os.path.join(directory, "summary.json")
    if os.path.exists(summary):
        return name, None, 0.0
    os.makedirs(directory, exist_ok=True)
    cmd = shlex.split(python) + ["-m", "mxhet.sim"] + args + ["--metrics-out", directory]
    env = dict(os.environ, OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1")
    t0 = time.monotonic()
    with open(os.path.join(directory, "job.log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    shutil.rmtree(os.path.join(directory, "snapshots"), ignore_errors=True)  # scored already; large
    return name, rc, time.monotonic() - t0


def record(out, name):
    """The row of one finished run (None if it left no summary)."""
    directory = os.path.join(out, "runs", name)
    path = os.path.join(directory, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        s = json.load(f)
    n_i = []
    for i in range(s["num_workers"]):
        with open(os.path.join(directory, "worker-%d.json" % i)) as f:
            w = json.load(f)
        n_i.append(round(sum(w["local_iters"]) / len(w["local_iters"]), 1) if w["local_iters"] else 0.0)
    model, rest = name.split("-", 1)
    profile = "paper-sim" if rest.startswith("paper-sim-") else rest.split("-", 1)[0]
    rest = rest[len(profile) + 1:]
    dist = "non-iid" if rest.startswith("non-iid-") else rest.split("-", 1)[0]
    variant = rest[len(dist) + 1:]
    return {"name": name, "model": model, "profile": profile, "dist": dist, "variant": variant,
            "time_to_target_s": s["time_to_target_s"], "final_accuracy": s["final_accuracy"],
            "train_time_s": s["train_time_s"], "n_i": n_i, "wall_s": s["sim"]["wall_s"],
            "command": s["sim"]["command"]}


def _fmt(t):
    return "%.0f s" % t if t is not None else "not reached"


def report(rows, target, command):
    """The markdown report: one table per model and profile, and the goals checked."""
    lines = ["# mxhet-bench aggregation", "",
             "Engine: **sim** (virtual time; real training of every device's replica). Command: `%s`" % command, "",
             "Time to %.2f test accuracy (each run stops there, or at its cap of virtual seconds: the train time "
             "then), final accuracy (all 10,000 test images), n_i = mean local iterations per round per device "
             "(slow devices first)." % target, ""]
    by = {}
    for r in rows:
        by.setdefault((r["model"], r["profile"]), []).append(r)
    for (model, profile), group in sorted(by.items()):
        lines += ["## %s, profile `%s`" % (model, profile), "",
                  "| data | variant | time to %.2f | final acc | train time | n_i per device |" % target,
                  "|---|---|---|---|---|---|"]
        for r in sorted(group, key=lambda r: (r["dist"], list(VARIANTS).index(r["variant"]))):
            lines.append("| %s | %s | %s | %.3f | %.0f s | %s |" % (
                r["dist"], r["variant"], _fmt(r["time_to_target_s"]), r["final_accuracy"], r["train_time_s"],
                " ".join("%g" % x for x in r["n_i"])))
        lines.append("")
    lines += ["## Goals", ""] + goals(rows)
    return "\n".join(lines) + "\n"


def goals(rows):
    """The issue's goals, checked on the rows: ESync (best variant) on non-i.i.d. data reaches the target and
    beats Sync to it; on AlexNet ESync ends no worse than standalone."""
    out = []
    index = {(r["model"], r["profile"], r["dist"], r["variant"]): r for r in rows}
    for (model, profile, dist, variant), r in sorted(index.items()):
        if not variant.startswith("esync") or dist != "non-iid":
            continue
        sync = index.get((model, profile, dist, "sync"))
        t, ts = r["time_to_target_s"], sync and sync["time_to_target_s"]
        if sync is None:
            verdict = "no Sync run to compare"
        elif t is not None and (ts is None or t < ts):
            verdict = "**beats Sync**" + (" (Sync not within its %.0f s)" % sync["train_time_s"] if ts is None else "")
        else:
            verdict = "does not beat Sync"
        out.append("- %s %s non-iid %s: %s, Sync %s: %s" % (
            model, profile, variant, _fmt(t), _fmt(ts) if sync else "no run", verdict))
    for (model, profile, dist, variant), r in sorted(index.items()):
        if model != "alexnet" or not variant.startswith("esync"):
            continue
        local = index.get((model, profile, "all", "local"))
        if local:
            out.append("- alexnet %s %s %s: final %.3f vs standalone %.3f: %s" % (
                profile, dist, variant, r["final_accuracy"], local["final_accuracy"],
                "no worse" if r["final_accuracy"] >= local["final_accuracy"] - 0.005 else "**worse**"))
    return out or ["- (no runs)"]


def add_parser(sub):
    p = sub.add_parser("aggregation", help="ESync's aggregation options (normalized, weighted, outer Nesterov) "
                                           "vs plain ESync, Sync, Async and standalone, in the simulator")
    p.add_argument("--models", default="resnet18_v1,alexnet")
    p.add_argument("--profiles", default="cpu,paper-sim")
    p.add_argument("--dists", default="iid,non-iid")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="of: %s" % ", ".join(VARIANTS))
    p.add_argument("--cap", type=float, default=DEFAULT_CAP,
                   help="virtual seconds a run may take without reaching the target (default %(default)s)")
    p.add_argument("--sync-cap", type=float, default=DEFAULT_SYNC_CAP, help="the same for Sync (default %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time, one process each (default %(default)s)")
    p.add_argument("--eval-samples", type=int, default=1000, help="test images per in-run check")
    p.add_argument("--python", default=sys.executable, help="the interpreter of each run (default: this one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the runs' commands and stop")
    p.add_argument("--out", default="runs/aggregation", help="output directory (default %(default)s)")
    return p


def run(args):
    models = _split(args.models, MODELS, "model")
    pnames = _split(args.profiles, profiles.BUILTIN, "profile")
    dists = _split(args.dists, ("iid", "non-iid"), "data split")
    variants = _split(args.variants, VARIANTS, "variant")
    if args.jobs < 1 or not args.cap > 0 or not args.sync_cap > 0:
        raise ConfigError("--jobs must be >= 1, --cap and --sync-cap > 0, got %r, %r and %r"
                          % (args.jobs, args.cap, args.sync_cap))
    runs = plan(models, pnames, dists, variants, args.cap, args.sync_cap, args.seed, args.eval_samples)
    if args.dry_run:
        for name, a in runs:
            print(name, "python -m mxhet.sim", " ".join(a))
        return 0
    os.makedirs(args.out, exist_ok=True)
    failed = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, \
            tqdm(total=len(runs), unit="run", desc="aggregation", file=sys.stderr) as bar:
        futures = [pool.submit(_one, args.python, args.out, name, a) for name, a in runs]
        for fut in concurrent.futures.as_completed(futures):
            name, rc, wall = fut.result()
            if rc:
                failed.append(name)
            bar.set_postfix_str("%s %s %.0fs" % (name, "failed" if rc else "ok", wall))
            bar.update(1)
    names = sorted(os.listdir(os.path.join(args.out, "runs")))
    rows = [r for r in (record(args.out, n) for n in names) if r is not None]
    command = "mxhet-bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", []) or ["aggregation"])
    with open(os.path.join(args.out, "aggregation.json"), "w") as f:
        json.dump({"rows": rows, "failed": failed, "base_iter_s": BASE_ITER_S, "models": MODELS}, f, indent=1)
    with open(os.path.join(args.out, "aggregation.md"), "w") as f:
        f.write(report(rows, 0.8, command))
    print(report(rows, 0.8, command))
    if failed:
        print("failed runs (see their job.log): %s" % ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0
