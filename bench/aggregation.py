"""``mxhet-bench aggregation``: ESync's aggregation options against plain ESync,
Sync, Async and standalone training, on the simulator or the real cluster.

For each model, profile and data split it runs plain ESync (Algorithm 1), ESync
with each option of :mod:`mxhet.policy.aggregation` and their combination, and
the references, ``--jobs`` at a time. It reports time to the target, final
accuracy and n_i (local iterations per round) per device, in
``aggregation.json`` and ``aggregation.md``.

* ``--engine sim`` (default): ``python -m mxhet.sim`` on the ``paper-sim``
  profile with settings of its own (the paper-sim preset's fixed base
  iteration per model, stop at the target, a compute cap of
  ``--max-iterations`` real iterations over all devices on either data split,
  a snapshot every half slowest iteration or 10% of the time so far). A run
  whose command equals a finished one under ``--reuse`` is taken from there
  instead of being run again.
* ``--engine cluster``: real processes through ``mxhet-launch`` (PS-LITE, the
  State Server), the ``cpu`` preset's settings: ``--cluster-budget`` seconds of
  training at the base iteration the cpu bench calibrated.

Virtual time (sim): an iteration of a slowdown-1 device takes the model's base
iteration, a slowdown-f device f times that.
"""
import json
import os
import shlex
import shutil
import sys
import threading
import time

from tqdm import tqdm

from mxhet.errors import ConfigError

from . import presets, profiles, runner
from .provenance import provenance
from .runner import canonical

MODELS = {"resnet18_v1": {"input_size": 32, "lr": 0.1}, "alexnet": {"input_size": 64, "lr": 0.1},
          "smallcnn": {"input_size": 28, "lr": 0.05}}
BASE_ITER_S = dict(presets.PRESETS["paper-sim"].iteration_s, smallcnn=0.05)
"""Virtual seconds of one iteration (batch 64) of a slowdown-1 device in the
simulator: the paper-sim preset's (one idle CPU core of the bench machine);
the small CNN's is the 0.05 s that bench/results/validate-sim pins."""
CLUSTER_BASE_ITER_S = {"resnet18_v1": 0.168977, "alexnet": 0.217176, "smallcnn": 0.05}
"""Seconds of one base iteration on the real cluster: the cpu bench's
calibration (bench/results/curves.json: one iteration on one core, at 75% of
the machine's 2 cores for the profile's devices)."""

VARIANTS = {
    "esync": ("esync", ()),
    "esync-normalized": ("esync", ("--aggregation", "normalized")),
    "esync-weighted": ("esync", ("--aggregation", "weighted")),
    "esync-nesterov": ("esync", ("--outer-optimizer", "nesterov")),
    "esync-nesterov-lr0.35": ("esync", ("--outer-optimizer", "nesterov", "--outer-lr", "0.35")),
    "esync-normalized-nesterov": ("esync", ("--aggregation", "normalized", "--outer-optimizer", "nesterov")),
    "esync-delayed": ("esync", ("--ack", "delayed")),
    "esync-nesterov-delayed": ("esync", ("--outer-optimizer", "nesterov", "--ack", "delayed")),
    "esync-max10": ("esync", ("--max-local-steps", "10")),
    "esync-max30": ("esync", ("--max-local-steps", "30")),
    "sync": ("sync", ()),
    "async": ("async", ()),
    "local": ("local", ()),
}
"""``esync-nesterov-lr0.35`` halves the outer learning rate (docs/modes.md's remedy for a
``NonFiniteError``): with momentum 0.9 the outer step settles at 3.5 times the mean delta instead of 7.
``esync-max10`` caps the fast devices at 10 local iterations a round (``--max-local-steps``), the
``cpu`` profile's ratio, to bound their drift on non-i.i.d. data at the paper's 117x; ``esync-max30``
is the step between it and no cap."""
DEFAULT_VARIANTS = ("esync", "esync-normalized", "esync-weighted", "esync-nesterov", "esync-normalized-nesterov",
                    "sync", "async", "local")
DEFAULT_CAP = 7200.0
DEFAULT_MAX_ITERATIONS = 6000
"""Simulator caps: virtual seconds (``--cap``) and real iterations over all
devices (``--max-iterations``, the one that binds on non-i.i.d. data; the
paper-sim preset caps its non-i.i.d. runs at 1,500, this experiment is about
them); a run stopped by either is "not reached (cap)"."""
DEFAULT_CLUSTER_BUDGET = 200.0
TARGET = 0.8


def _split(text, known, what):
    names = [x for x in text.split(",") if x]
    bad = [x for x in names if x not in known]
    if bad or not names:
        raise ConfigError("unknown %s %s; known: %s" % (what, bad or text, ", ".join(known)))
    return names


NORM_SUFFIX = {"batch": "", "group": "_gn"}
"""The model's label in run names and reports: ``resnet18_v1_gn`` is ResNet-18 with ``--norm group``."""


def model_label(model, norm="batch"):
    """``model``'s name in run names and reports with ``norm`` layers (:data:`NORM_SUFFIX`)."""
    return model + NORM_SUFFIX[norm]


def norm_args(norm):
    """The training flags that give a model ``norm`` layers: none for its own BatchNorm."""
    return () if norm == "batch" else ("--norm", norm)


def check_norms(models, norm):
    """Refuse ``norm`` for a model of ``models`` that has no BatchNorm layers for it to replace.

    Raises:
        ConfigError: :func:`mxhet.models.check_norm`'s, naming the first such model.
    """
    if norm != "batch":
        from mxhet.models import check_norm   # imports MXNet: not at the bench parser's import
        for model in models:
            check_norm(model, norm)


def job_spec(engine, model, profile, dist, variant, cap=DEFAULT_CAP, max_iterations=DEFAULT_MAX_ITERATIONS,
             cluster_budget=DEFAULT_CLUSTER_BUDGET, seed=0, eval_samples=1000, norm="batch"):
    """The :class:`bench.runner.JobSpec` of one run (``local``: the profile's fastest device, i.i.d.).

    With ``norm="group"`` the model's BatchNorm layers are GroupNorm layers; its virtual iteration time
    stays the BatchNorm model's (the simulator compares convergence, not MXNet's CPU kernels)."""
    mode, extra = VARIANTS[variant]
    extra = norm_args(norm) + extra
    spec = MODELS[model]
    if mode == "local":
        device = profile.fastest()
        slowdowns, contexts = (device.slowdown,), (device.context,)
    else:
        slowdowns, contexts = profile.slowdowns, profile.contexts
    common = dict(mode=mode, slowdowns=slowdowns, contexts=contexts, model=model, lr=spec["lr"],
                  dist="iid" if mode == "local" else dist, target_accuracy=TARGET, seed=seed,
                  input_size=spec["input_size"], extra_train_args=("--eval-samples", str(eval_samples)) + extra)
    if engine == "sim":
        base = BASE_ITER_S[model]
        sim_args = ("--stop-at-target",) + (("--max-iterations", str(max_iterations)) if max_iterations else ())
        return runner.JobSpec(time_budget=cap, eval_interval=0.5 * max(slowdowns) * base, engine="sim",
                              sim_args=sim_args + ("--eval-growth", "0.1"),
                              launcher_args=("--base-iter", "%.6f" % BASE_ITER_S[model], "--omp-threads", "1"),
                              **common)
    base = CLUSTER_BASE_ITER_S[model]
    return runner.JobSpec(time_budget=cluster_budget, eval_interval=max(0.5, cluster_budget / 40),
                          engine="cluster", startup_allowance=900.0,
                          launcher_args=("--base-iter", "%.6f" % base, "--omp-threads", "1"), **common)


def run_name(model, profile_name, dist, variant, norm="batch"):
    return "%s-%s-%s-%s" % (model_label(model, norm), profile_name,
                              "all" if VARIANTS[variant][0] == "local" else dist, variant)


def plan(engine, models, profile_names, dists, variants, norm="batch", **kw):
    """Every run as ``(name, JobSpec)``; ``local`` once per model and profile (one device, all the data)."""
    runs, seen = [], set()
    for model in models:
        for pname in profile_names:
            for dist in dists:
                for variant in variants:
                    name = run_name(model, pname, dist, variant, norm)
                    if name not in seen:
                        seen.add(name)
                        runs.append((name, job_spec(engine, model, profiles.BUILTIN[pname], dist, variant,
                                                    norm=norm, **kw)))
    return runs


def reuse_index(directories):
    """``canonical command -> run directory`` of the finished simulator runs under ``directories``."""
    index = {}
    for top in directories:
        if not os.path.isdir(top):
            continue
        for name in sorted(os.listdir(top)):
            path = os.path.join(top, name, "summary.json")
            if os.path.exists(path):
                with open(path) as f:
                    command = (json.load(f).get("sim") or {}).get("command")
                if command:
                    index.setdefault(canonical(command), os.path.join(top, name))
    return index


def _one(out_dir, spec):
    """Run one job unless its summary exists; remove its snapshots (scored already; large)."""
    if os.path.exists(os.path.join(out_dir, "summary.json")):
        return None, 0.0
    t0 = time.monotonic()
    try:
        summary = runner.run_job(spec, out_dir)
        error = None
    except runner.JobFailed as exc:
        error = str(exc)
    else:
        if spec.engine != "sim":  # the simulator records its own command
            summary["command"] = ["python" if a == sys.executable else a for a in summary["command"]]
            with open(os.path.join(out_dir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=1)
    shutil.rmtree(os.path.join(out_dir, "snapshots"), ignore_errors=True)
    return error, time.monotonic() - t0


def parse_name(name):
    model, rest = name.split("-", 1)
    profile = "paper-sim" if rest.startswith("paper-sim-") else rest.split("-", 1)[0]
    rest = rest[len(profile) + 1:]
    dist = "non-iid" if rest.startswith("non-iid-") else rest.split("-", 1)[0]
    return model, profile, dist, rest[len(dist) + 1:]


def record(directory, name, engine, reused_from=None):
    """The row of one finished run (None if it left no summary)."""
    path = os.path.join(directory, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        s = json.load(f)
    workers = s.get("workers") or []
    if not workers:
        for i in range(s["num_workers"]):
            with open(os.path.join(directory, "worker-%d.json" % i)) as f:
                workers.append(json.load(f))
    n_i = [round(sum(w["local_iters"]) / len(w["local_iters"]), 1) if w["local_iters"] else 0.0 for w in workers]
    model, profile, dist, variant = parse_name(name)
    sim = s.get("sim") or {}
    capped = engine == "sim" and s["time_to_target_s"] is None and sim.get("stopped_at_target_s") is None
    return {"name": name, "engine": engine, "model": model, "profile": profile, "dist": dist, "variant": variant,
            "time_to_target_s": s["time_to_target_s"], "final_accuracy": s["final_accuracy"],
            "train_time_s": s["train_time_s"], "n_i": n_i, "iterations": sum(w["iterations"] for w in workers),
            "capped": capped, "max_iterations": sim.get("max_iterations"),
            "wall_s": sim.get("wall_s", s.get("wall_s")), "reused_from": reused_from, "curve": s.get("curve") or [],
            "command": list(sim.get("command") or s.get("command") or [])}


def _fmt(r):
    if r["time_to_target_s"] is not None:
        return "%.0f s" % r["time_to_target_s"]
    return "not reached (cap)" if r.get("capped") else "not reached"


def report(rows, command):
    """The markdown report: one table per engine, model and profile, and the goals checked."""
    lines = ["# mxhet-bench aggregation", "", "Command: `%s` (each run's exact command is in `aggregation.json`)."
             % command, "",
             "Time to %.2f test accuracy (in-run check on 1,000 test images; a simulator run stops there or at its "
             "compute cap, \"not reached (cap)\"; a cluster run trains its whole budget), final accuracy (all "
             "10,000 test images), n_i = mean local iterations per round per device (slow devices first). "
             "*reused*: the run is taken from another directory (`--reuse`), same command." % TARGET, ""]
    by = {}
    for r in rows:
        by.setdefault((r["engine"], r["model"], r["profile"]), []).append(r)
    for (engine, model, profile), group in sorted(by.items()):
        unit = "virtual s" if engine == "sim" else "s (real)"
        lines += ["## %s, profile `%s`, engine `%s`" % (model, profile, engine), "",
                  "| data | variant | time to %.2f | final acc | train time (%s) | iterations | n_i per device |"
                  % (TARGET, unit), "|---|---|---|---|---|---|---|"]
        for r in sorted(group, key=lambda r: (r["dist"], list(VARIANTS).index(r["variant"]))):
            lines.append("| %s | %s%s | %s | %.3f | %.0f | %d | %s |" % (
                r["dist"], r["variant"], " *(reused)*" if r.get("reused_from") else "", _fmt(r),
                r["final_accuracy"], r["train_time_s"], r.get("iterations", 0), " ".join("%g" % x for x in r["n_i"])))
        lines.append("")
    lines += ["## Goals", ""] + goals(rows)
    return "\n".join(lines) + "\n"


def _accuracy_at(row, t):
    """The last accuracy of ``row``'s curve at or before ``t`` seconds, as text."""
    points = [acc for when, acc in row.get("curve") or [] if when <= t]
    return "%.3f" % points[-1] if points else "no point yet"


def goals(rows):
    """The issue's goals, checked on the rows: ESync (each variant) on non-i.i.d. data reaches the target and
    beats Sync to it; on AlexNet ESync ends no worse than standalone."""
    out = []
    index = {(r["engine"], r["model"], r["profile"], r["dist"], r["variant"]): r for r in rows}
    for (engine, model, profile, dist, variant), r in sorted(index.items()):
        if not variant.startswith("esync") or dist != "non-iid":
            continue
        sync = index.get((engine, model, profile, dist, "sync"))
        t, ts = r["time_to_target_s"], sync and sync["time_to_target_s"]
        if sync is None:
            verdict = "no Sync run to compare"
        elif t is not None and (ts is None or t < ts):
            verdict = "**beats Sync**" + (" (Sync not within %.0f s)" % sync["train_time_s"] if ts is None else "")
        elif t is None and r.get("capped") and (ts is None or ts > r["train_time_s"]):
            verdict = "undecided: stopped by its cap at %.0f s, where Sync was at %s" % (
                r["train_time_s"], _accuracy_at(sync, r["train_time_s"]))
        elif t is None:
            verdict = "does not reach %.2f" % TARGET
        else:
            verdict = "does not beat Sync"
        out.append("- %s %s %s non-iid %s: %s, Sync %s: %s" % (
            engine, model, profile, variant, _fmt(r), _fmt(sync) if sync else "no run", verdict))
    for (engine, model, profile, dist, variant), r in sorted(index.items()):
        if model != "alexnet" or not variant.startswith("esync"):
            continue
        local = index.get((engine, model, profile, "all", "local"))
        if local:
            out.append("- %s alexnet %s %s %s: final %.3f vs standalone %.3f: %s; time to %.2f %s vs %s" % (
                engine, profile, dist, variant, r["final_accuracy"], local["final_accuracy"],
                "no worse" if r["final_accuracy"] >= local["final_accuracy"] - 0.005 else "**worse**",
                TARGET, _fmt(r), _fmt(local)))
    return out or ["- (no runs)"]


def collect(out):
    """Every row under ``out``: simulator runs in ``runs/`` (reused ones point to their source in
    ``reused.json``), cluster runs in ``cluster/``."""
    rows = []
    reused = {}
    if os.path.exists(os.path.join(out, "reused.json")):
        with open(os.path.join(out, "reused.json")) as f:
            reused = json.load(f)
    for engine, sub in (("sim", "runs"), ("cluster", "cluster")):
        top = os.path.join(out, sub)
        names = sorted(os.listdir(top)) if os.path.isdir(top) else []
        for name in names:
            rows.append(record(os.path.join(top, name), name, engine))
    for name, source in sorted(reused.items()):
        if not os.path.isdir(os.path.join(out, "runs", name)):
            rows.append(record(source, name, "sim", reused_from=source))
    return [r for r in rows if r is not None]


def add_parser(sub):
    p = sub.add_parser("aggregation", help="ESync's aggregation options (normalized, weighted, outer Nesterov) "
                                           "vs plain ESync, Sync, Async and standalone")
    p.add_argument("--engine", choices=("sim", "cluster"), default="sim")
    p.add_argument("--models", default="resnet18_v1,alexnet")
    p.add_argument("--profiles", default="cpu,paper-sim")
    p.add_argument("--dists", default="iid,non-iid")
    p.add_argument("--norm", choices=sorted(NORM_SUFFIX), default="batch",
                   help="the models' normalization layers (group: GroupNorm for BatchNorm; the runs are named "
                        "MODEL_gn; default %(default)s)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="of: %s" % ", ".join(VARIANTS))
    p.add_argument("--cap", type=float, default=DEFAULT_CAP,
                   help="sim: virtual seconds a run may take without reaching the target (default %(default)s)")
    p.add_argument("--max-iterations", type=int, default=DEFAULT_MAX_ITERATIONS,
                   help="sim: real iterations over all devices a run may take (0: none; default %(default)s)")
    p.add_argument("--cluster-budget", type=float, default=DEFAULT_CLUSTER_BUDGET,
                   help="cluster: seconds of training per run (default %(default)s)")
    p.add_argument("--reuse", default="",
                   help="sim: comma-separated directories of finished runs; a run with the same command is taken "
                        "from there, not run again (default: none)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default %(default)s)")
    p.add_argument("--eval-samples", type=int, default=1000, help="test images per in-run check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the runs' commands and stop")
    p.add_argument("--out", default="runs/aggregation", help="output directory (default %(default)s)")
    return p


def run(args):
    models = _split(args.models, MODELS, "model")
    pnames = _split(args.profiles, profiles.BUILTIN, "profile")
    dists = _split(args.dists, ("iid", "non-iid"), "data split")
    variants = _split(args.variants, VARIANTS, "variant")
    if args.jobs < 1 or not args.cap > 0 or args.max_iterations < 0 or not args.cluster_budget > 0:
        raise ConfigError("--jobs must be >= 1, --cap and --cluster-budget > 0, --max-iterations >= 0; got %r, "
                          "%r, %r and %r" % (args.jobs, args.cap, args.cluster_budget, args.max_iterations))
    check_norms(models, args.norm)
    runs = plan(args.engine, models, pnames, dists, variants, norm=args.norm, cap=args.cap,
                max_iterations=args.max_iterations, cluster_budget=args.cluster_budget, seed=args.seed,
                eval_samples=args.eval_samples)
    sub = "runs" if args.engine == "sim" else "cluster"
    index = reuse_index([d for d in args.reuse.split(",") if d]) if args.engine == "sim" else {}
    reused, todo = {}, []
    for name, spec in runs:
        directory = os.path.join(args.out, sub, name)
        source = index.get(canonical(spec.launch_argv(directory)))
        if source and not os.path.exists(os.path.join(directory, "summary.json")):
            reused[name] = source
        else:
            todo.append((name, spec, directory))
    if args.dry_run:
        for name, source in sorted(reused.items()):
            print(name, "reused from", source)
        for name, spec, directory in todo:
            print(name, " ".join(shlex.quote(a) for a in spec.launch_argv(directory)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    if reused:
        path = os.path.join(args.out, "reused.json")
        known = json.load(open(path)) if os.path.exists(path) else {}
        known.update(reused)
        with open(path, "w") as f:
            json.dump(known, f, indent=1, sort_keys=True)
    failed = []
    lock = threading.Lock()
    with tqdm(total=len(todo), unit="run", desc="aggregation", file=sys.stderr) as bar:
        def one(item):
            name, spec, directory = item
            error, wall = _one(directory, spec)
            with lock:
                if error:
                    failed.append(name)
                    print(error, file=sys.stderr)
                bar.set_postfix_str("%s %s %.0fs" % (name, "failed" if error else "ok", wall))
                bar.update(1)

        if args.engine == "sim":
            runner.share_cores(args.jobs, [c for _, spec, _ in todo for c in spec.contexts])
        runner.run_each(todo, one, args.jobs)   # a signal ends the running simulator jobs too
    write(args.out, "mxhet-bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", []) or ["aggregation"]))
    if failed:
        print("failed runs (see their job.log): %s" % ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


def write(out, command):
    """Rebuild ``aggregation.json`` and ``aggregation.md`` from every run under ``out`` (keeps a hand-made
    ``explore`` section of the JSON)."""
    rows = collect(out)
    path = os.path.join(out, "aggregation.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    doc = {"provenance": provenance(["mxhet-bench"] + sys.argv[1:], seeds={r.get("seed", 0) for r in rows}),
           "rows": rows, "base_iter_s": BASE_ITER_S, "cluster_base_iter_s": CLUSTER_BASE_ITER_S, "models": MODELS}
    if "explore" in old:
        doc["explore"] = old["explore"]
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    text = report(rows, command)
    notes = os.path.join(out, "notes.md")
    if os.path.exists(notes):   # hand-written: the conditions of the runs, what was not run
        with open(notes) as f:
            text += "\n" + f.read()
    with open(os.path.join(out, "aggregation.md"), "w") as f:
        f.write(text)
    print(text)
