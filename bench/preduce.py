"""``mxhet-bench preduce``: the P-Reduce paper's Table 1 trend at small scale.

The paper (CIFAR-10, 8 GPUs) finds Partial Reduce with P = 3 and dynamic
weights fastest to the target under heterogeneity (ResNet-34 at HL = 3: 603 s
against 1150 s for all-reduce): many more, much cheaper updates. Here, on the
small CNN and Fashion-MNIST:

* N workers (``--workers``, default 4 and 8) at two heterogeneity levels
  (``--levels``): HL workers share one device, emulated as HL workers at
  slowdown HL (HL = 1: homogeneous);
* ``preduce`` with P in ``--group-sizes`` (``N`` = all workers) and constant
  or dynamic weights, against ``sync``, ``async``, ``localsgd`` and ``esync``;
* per run: time to the target accuracy, updates (partial reduces, averages,
  steps or pushes: what changes a model the others will see), training time
  per update, compute ratio (compute / (compute + wait), mean over workers),
  the group filter's interventions.

The simulator (virtual time, each run stopped at the target) runs the whole
grid; the real cluster a subset (``--cluster-*``; its runs go their whole
budget, its timings come from a shared, loaded machine). Results go to
``OUT/preduce.json`` and ``OUT/preduce.md``.
"""
import json
import os
import sys
import time

from mxhet.errors import ConfigError

from .experiment import RESUME, comma_list, failures_block, run_dir, run_jobs, write_outputs
from .metrics import run_record
from .provenance import provenance
from .runner import JobSpec, machine_info

BASELINES = ("sync", "async", "localsgd", "esync")
ENGINES = ("sim", "cluster")


def add_parser(sub):
    p = sub.add_parser("preduce", help="Partial Reduce: the P-Reduce paper's Table 1 trend (time to target, "
                                       "updates, time per update, compute ratio, interventions) against sync, "
                                       "async, localsgd and esync")
    p.add_argument("--engines", default="sim,cluster", help="sim, cluster or both (default %(default)s)")
    p.add_argument("--workers", default="4,8", help="simulator: worker counts N (default %(default)s)")
    p.add_argument("--levels", default="1,3", help="simulator: heterogeneity levels HL (default %(default)s)")
    p.add_argument("--group-sizes", default="2,3,N", help="simulator: P values; N = all (default %(default)s)")
    p.add_argument("--weights", default="constant,dynamic", help="preduce weights (default %(default)s)")
    p.add_argument("--baselines", default=",".join(BASELINES), help="other modes, or none (default %(default)s)")
    p.add_argument("--budget", type=float, default=300.0,
                   help="simulator: virtual seconds per run at most (each stops at the target; default %(default)s)")
    p.add_argument("--max-iterations", type=int, default=8000,
                   help="simulator: real iterations per run at most, all devices (default %(default)s)")
    p.add_argument("--cluster-workers", type=int, default=4, help="cluster: N (default %(default)s)")
    p.add_argument("--cluster-level", type=int, default=3, help="cluster: HL (default %(default)s)")
    p.add_argument("--cluster-runs", default="preduce:3:constant,preduce:3:dynamic,preduce:2:dynamic,sync,async,"
                                             "localsgd,esync",
                   help="cluster: runs, 'preduce:P:weights' or a mode (default %(default)s)")
    p.add_argument("--cluster-budget", type=float, default=40.0, help="cluster: seconds per run (default %(default)s)")
    p.add_argument("--jitter", type=float, default=0.1,
                   help="simulator: sigma of a log-normal factor on every iteration time (default %(default)s)")
    p.add_argument("--eval-interval", type=float, default=0.25,
                   help="simulator: seconds between snapshots (default %(default)s)")
    p.add_argument("--eval-samples", type=int, default=2000, help="test images per curve point (default %(default)s)")
    p.add_argument("--base-iter", type=float, default=0.05,
                   help="seconds of a slowdown-1 iteration, both engines (default %(default)s)")
    p.add_argument("--local-steps", type=int, default=8, help="localsgd's tau (default %(default)s)")
    p.add_argument("--alpha", type=float, default=0.5, help="preduce's dynamic-weight alpha (default %(default)s)")
    p.add_argument("--model", default="smallcnn")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--target-accuracy", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/preduce", help="output directory (default %(default)s)")
    p.add_argument("--resume", choices=RESUME, default="off",
                   help="on: reuse runs that finished under OUT/runs; only: run nothing, report the finished runs "
                        "(default %(default)s)")
    return p


def slowdowns(n, level):
    """HL of the N workers share one device: the last HL at slowdown HL (HL = 1: all at 1).

    Raises:
        ConfigError: unless 1 <= HL <= N.
    """
    if not 1 <= level <= n:
        raise ConfigError("heterogeneity level %d must be in [1, N=%d]" % (level, n))
    return tuple([1.0] * (n - level) + [float(level)] * level) if level > 1 else (1.0,) * n


def _group_sizes(text, n):
    sizes = []
    for v in comma_list(text, "group-sizes"):
        p = n if v == "N" else int(v) if v.isdigit() else None
        if p is None or p < 2:
            raise ConfigError("--group-sizes: %r is neither N nor an integer >= 2" % v)
        if p <= n and p not in sizes:
            sizes.append(p)
    return sizes


def _variant(mode, p=None, weights=None, args=None):
    """(mode, P, weights, extra train args)."""
    if mode == "preduce":
        return mode, p, weights, ("--group-size", str(p), "--weights", weights, "--alpha", "%g" % args.alpha)
    if mode == "localsgd":
        return mode, None, None, ("--local-steps", str(args.local_steps))
    return mode, None, None, ()


def plan(args):
    """The runs, as ``(label, engine, N, HL, mode, P, weights, JobSpec)``.

    Raises:
        ConfigError: for a bad engine, mode, count, level or P.
    """
    from mxhet.modes import mode_names
    engines = comma_list(args.engines, "engines", ENGINES)
    weights = comma_list(args.weights, "weights", ("constant", "dynamic"))
    baselines = ([] if str(args.baselines).strip() in ("", "none")
                 else comma_list(args.baselines, "baselines", mode_names()))
    if not args.base_iter > 0 or not args.budget > 0 or not args.cluster_budget > 0:
        raise ConfigError("--base-iter, --budget and --cluster-budget must be > 0")
    common = dict(model=args.model, lr=args.lr, target_accuracy=args.target_accuracy, seed=args.seed)
    runs = []

    def add(engine, n, level, variant, budget, sim_args, eval_interval):
        mode, p, w, extra = variant
        name = "%s-n%d-hl%d-%s" % (engine, n, level, mode if p is None else "p%d-%s" % (p, w[:3]))
        launcher = ("--base-iter", "%g" % args.base_iter, "--omp-threads", "1")
        spec = JobSpec(mode=mode, slowdowns=slowdowns(n, level), time_budget=budget, eval_interval=eval_interval,
                       engine=engine, extra_train_args=("--eval-samples", str(args.eval_samples)) + extra,
                       launcher_args=launcher, sim_args=sim_args, startup_allowance=300.0, **common)
        runs.append((name, engine, n, level, mode, p, w, spec))

    if "sim" in engines:
        sim_args = ("--stop-at-target", "--max-iterations", str(args.max_iterations), "--jitter", "%g" % args.jitter)
        for n in comma_list(args.workers, "workers", parse=int):
            for level in comma_list(args.levels, "levels", parse=int):
                slowdowns(n, level)
                for mode in baselines:
                    add("sim", n, level, _variant(mode, args=args), args.budget, sim_args, args.eval_interval)
                for p in _group_sizes(args.group_sizes, n):
                    # P = N: every member continues with k = max k_j, so all N share one k and the dynamic
                    # weights are 1/N, the constant ones: one run covers both.
                    for w in weights if p < n else weights[:1]:
                        add("sim", n, level, _variant("preduce", p, w, args), args.budget, sim_args,
                            args.eval_interval)
    if "cluster" in engines:
        n, level = args.cluster_workers, args.cluster_level
        slowdowns(n, level)
        for item in comma_list(args.cluster_runs, "cluster-runs"):
            parts = item.split(":")
            if parts[0] == "preduce":
                if len(parts) != 3 or not parts[1].isdigit() or not 2 <= int(parts[1]) <= n:
                    raise ConfigError("--cluster-runs: %r is not preduce:P:weights with 2 <= P <= %d" % (item, n))
                variant = _variant("preduce", int(parts[1]), parts[2], args)
            elif parts[0] in mode_names():
                variant = _variant(parts[0], args=args)
            else:
                raise ConfigError("--cluster-runs: unknown run %r" % item)
            add("cluster", n, level, variant, args.cluster_budget, (), max(0.5, args.cluster_budget / 40))
    return runs


def updates(summary, mode, controller=None):
    """Model updates the others can see: partial reduces (preduce), rounds of a
    synchronous mode (sync, localsgd, esync: all workers share them), pushes (async)."""
    workers = summary["workers"]
    if mode == "preduce":
        if controller:
            return controller["groups"]
        return None
    if mode in ("async", "dcasgd", "adsp", "ssp"):
        return sum(w["rounds"] for w in workers)
    return max(w["rounds"] for w in workers)


def _controller(summary, run_dir):
    sim = summary.get("sim") or {}
    if sim.get("preduce"):
        return sim["preduce"]
    path = os.path.join(run_dir, "state.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f).get("preduce")
    return None


def _portable(argv, out):
    """A run's command without this machine's paths: ``python``, paths relative to ``out``."""
    root = os.path.abspath(out)
    return ["python" if a == sys.executable else
            os.path.relpath(a, root) if os.path.isabs(a) and a.startswith(root) else a for a in argv or ()]


def row(name, engine, n, level, mode, p, weights, summary, run_dir, out):
    record = run_record(summary)
    controller = _controller(summary, run_dir) if mode == "preduce" else None
    count = updates(summary, mode, controller)
    ratios = [r for r in record["compute_ratio"] if r is not None]
    train = summary["train_time_s"]
    return {"label": name, "engine": engine, "workers": n, "level": level, "mode": mode, "group_size": p,
            "weights": weights, "time_to_target_s": summary["time_to_target_s"],
            "final_accuracy": summary["final_accuracy"], "train_time_s": train, "updates": count,
            "time_per_update_s": train / count if count else None,
            "compute_ratio": sum(ratios) / len(ratios) if ratios else None,
            "interventions": controller["interventions"] if controller else None,
            "holds": controller["holds"] if controller else None,
            "window": controller["window"] if controller else None,
            "iterations": sum(w["iterations"] for w in summary["workers"]),
            "eval_interval_s": _spacing(summary["curve"]), "stopped_at_cap_s": record["stopped_at_cap_s"],
            "slowdown": record["slowdown"], "command": _portable(record["command"], out)}


def _spacing(curve):
    """Seconds between curve points (the resolution of the time to target), or None."""
    gaps = sorted(b[0] - a[0] for a, b in zip(curve, curve[1:]))
    return round(gaps[len(gaps) // 2], 6) if gaps else None


def fastest(rows):
    """Per (engine, N, HL): the runs that reached the target, fastest first, as ``(key, ranked rows)``."""
    groups = {}
    for r in rows:
        groups.setdefault((r["engine"], r["workers"], r["level"]), []).append(r)
    return [(key, sorted([r for r in group if r["time_to_target_s"] is not None],
                         key=lambda r: r["time_to_target_s"])) for key, group in sorted(groups.items())]


def _name(r):
    if r["mode"] != "preduce":
        return r["mode"]
    return "preduce P=%d %s" % (r["group_size"], "(either)" if r["group_size"] == r["workers"] else r["weights"])


def _fmt(value, pattern):
    return "-" if value is None else pattern % value


def format_report(result):
    lines = ["# mxhet-bench preduce: Partial Reduce against sync, async, localsgd and esync", "",
             "Command: `%s`" % " ".join(result["command"]), "",
             "Machine: %s, %s cores, shared with other jobs: cluster timings are noisy; simulator times are "
             "virtual seconds." % (result["machine"]["cpu"], result["machine"]["cores"]), "",
             "Model %s, lr %g, batch 64, T = %g s per slowdown-1 iteration, target %.2f. Updates: partial reduces "
             "(preduce), rounds (sync, localsgd, esync), pushes (async); time per update = training time / "
             "updates. HL of the N workers run at slowdown HL." % (
                 result["settings"]["model"], result["settings"]["lr"], result["settings"]["base_iter"],
                 result["settings"]["target_accuracy"]), ""]
    ranked = fastest(result["runs"])
    if len(ranked) > 1:
        lines += ["## Fastest to the target per setting", "",
                  "Ties are within the curve's resolution (the time between curve points). P = N runs once: "
                  "with P = N the dynamic weights are the constant ones.", "",
                  "| engine | N | HL | fastest | 2nd | 3rd | preduce P=3 dynamic: time (rank) |",
                  "|---|---|---|---|---|---|---|"]
        for (engine, n, level), rows in ranked:
            top = ["%s %.1f" % (_name(r), r["time_to_target_s"]) for r in rows[:3]] + ["-"] * 3
            p3 = [(i, r) for i, r in enumerate(rows) if r["mode"] == "preduce" and r["group_size"] == 3
                  and r["weights"] == "dynamic"]
            lines.append("| %s | %d | %d | %s | %s | %s | %s |" % (
                engine, n, level, top[0], top[1], top[2],
                "%.1f (%d of %d)" % (p3[0][1]["time_to_target_s"], p3[0][0] + 1, len(rows)) if p3 else "-"))
        lines.append("")
    groups = {}
    for r in result["runs"]:
        groups.setdefault((r["engine"], r["workers"], r["level"]), []).append(r)
    for (engine, n, level), rows in sorted(groups.items()):
        lines += ["## %s, N = %d, HL = %d (slowdowns %s)" % (
            engine, n, level, ",".join("%g" % f for f in rows[0]["slowdown"])), "",
            "| mode | P | weights | time to target (s) | updates | time per update (s) | compute ratio | "
            "interventions | final accuracy |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %.4f |" % (
                r["mode"], _fmt(r["group_size"], "%d"), r["weights"] or "-",
                _fmt(r["time_to_target_s"], "%.1f") if r["time_to_target_s"] is not None else "not reached",
                _fmt(r["updates"], "%d"), _fmt(r["time_per_update_s"], "%.4f"), _fmt(r["compute_ratio"], "%.2f"),
                _fmt(r["interventions"], "%d"), r["final_accuracy"]))
        lines.append("")
    lines += failures_block(result["failures"])
    return "\n".join(lines)


def run(args):
    try:
        runs = plan(args)
    except ConfigError as exc:
        print("mxhet-bench preduce: error: %s" % exc, file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    jobs = []
    for name, engine, n, level, mode, p, weights, spec in runs:
        if engine == "cluster" and mode == "preduce":
            spec.launcher_args = spec.launcher_args + ("--state-stats",
                                                       os.path.join(run_dir(args.out, name), "state.json"))
        jobs.append((name, spec, (engine, n, level, mode, p, weights)))
    rows, failures = run_jobs(jobs, args.out, lambda name, _spec, summary, directory, c: row(
        name, *c, summary, directory, args.out), width=28, resume=args.resume)
    result = {"experiment": "preduce", "command": ["mxhet-bench"] + sys.argv[1:], "machine": machine_info(),
              "provenance": provenance(["mxhet-bench"] + sys.argv[1:], seeds=[args.seed]),
              "settings": {k: getattr(args, k) for k in ("engines", "workers", "levels", "group_sizes", "weights",
                                                         "baselines", "budget", "max_iterations", "cluster_workers",
                                                         "cluster_level", "cluster_runs", "cluster_budget",
                                                         "base_iter", "jitter", "eval_interval", "eval_samples",
                                                         "local_steps", "alpha", "model", "lr",
                                                         "target_accuracy", "seed")},
              "runs": rows, "failures": failures, "started_unix": started, "wall_s": time.time() - started}
    report = format_report(result)
    write_outputs(args.out, "preduce", result, report)
    if rows:
        plot(result, os.path.join(args.out, "preduce.png"))
    print(report)
    return 1 if failures else 0


def plot(result, path):
    """Time to the target against P, one panel per (engine, N) and a line per HL and weighting; the
    baselines as horizontal lines. Returns ``path``, or None when no run reached the target."""
    from .plots import _plt, _save
    plt = _plt()
    panels = sorted({(r["engine"], r["workers"]) for r in result["runs"]})
    levels = sorted({r["level"] for r in result["runs"]})
    if not any(r["time_to_target_s"] is not None for r in result["runs"]):
        return None
    fig, axes = plt.subplots(len(levels), len(panels), figsize=(3.6 * len(panels), 3.0 * len(levels)),
                             squeeze=False)
    colors = {"sync": "tab:red", "async": "tab:gray", "localsgd": "tab:brown", "esync": "tab:green"}
    for row_i, level in enumerate(levels):
        for col, (engine, n) in enumerate(panels):
            ax = axes[row_i][col]
            rows = [r for r in result["runs"] if r["engine"] == engine and r["workers"] == n and r["level"] == level]
            for weights, style in (("constant", "o--"), ("dynamic", "s-")):
                pts = sorted((r["group_size"], r["time_to_target_s"]) for r in rows
                             if r["mode"] == "preduce" and r["time_to_target_s"] is not None
                             and (r["weights"] == weights or r["group_size"] == n))
                if pts:
                    ax.plot([p for p, _ in pts], [t for _, t in pts], style, label="preduce %s" % weights)
            for r in rows:
                if r["mode"] in colors and r["time_to_target_s"] is not None:
                    ax.axhline(r["time_to_target_s"], color=colors[r["mode"]], lw=1, ls=":", label=r["mode"])
            ax.set_xticks(sorted({r["group_size"] for r in rows if r["group_size"]}))
            ax.set_title("%s, N = %d, HL = %d" % (engine, n, level), fontsize=9)
            ax.set_xlabel("P")
            ax.set_ylabel("time to %.2f (s)" % result["settings"]["target_accuracy"])
            ax.legend(fontsize=6)
    return _save(fig, path)
