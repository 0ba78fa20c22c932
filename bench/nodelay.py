"""``mxhet-bench nodelay``: the claims of "Asynchronous SGD without gradient
delay" at small scale, on the simulator and on the real cluster.

* ``tau``: the compute ratio (compute / (compute + wait)) of every device
  against the maximal staleness τ, on homogeneous devices with an emulated
  link delay (``--delay-ms`` each way, on the State Server messages and on
  nodelay's pushes and pulls). The paper measured practically zero idle time
  for τ >= 8. Also the final accuracy after the same time, and (simulator,
  ``--equal-iterations``) after the same number of gradients in all: that
  isolates what staleness does to learning from what it does to speed.
* ``target``: time to ``--target-accuracy`` on the ``cpu`` profile (2 devices
  at slowdown 10, 2 at 1) against esync, localsgd and async.

Each run is one :class:`bench.runner.JobSpec`; the results go to
``OUT/nodelay.json`` and ``OUT/nodelay.md``.
"""
import os
import sys
import time

from mxhet.errors import ConfigError

from . import profiles
from .experiment import comma_list, failures_block, run_jobs, write_outputs
from .metrics import run_record
from .provenance import provenance
from .runner import JobSpec, machine_info

TAUS = (1, 2, 4, 8, 16)
COMPARED = ("esync", "localsgd", "async", "nodelay")
PARTS = ("tau", "target")
ENGINES = ("sim", "cluster")


def add_parser(sub):
    p = sub.add_parser("nodelay", help="asynchronous SGD without gradient delay: compute ratio against tau with "
                                       "a slow link, and time to the target on the cpu profile against esync, "
                                       "localsgd and async")
    p.add_argument("--parts", default="tau,target", help="tau, target or both (default %(default)s)")
    p.add_argument("--engines", default="sim,cluster", help="sim, cluster or both (default %(default)s)")
    p.add_argument("--taus", default=",".join(map(str, TAUS)), help="tau values (default %(default)s)")
    p.add_argument("--workers", type=int, default=4, help="tau sweep: homogeneous devices (default %(default)s)")
    p.add_argument("--delay-ms", type=float, default=50.0,
                   help="tau sweep: one-way delay of every link, ms (default %(default)s)")
    p.add_argument("--tau-budget", type=float, default=20.0, help="tau sweep: seconds per run (default %(default)s)")
    p.add_argument("--equal-iterations", type=int, default=0,
                   help="tau sweep, simulator: also run each tau to this many gradients in all (0: no)")
    p.add_argument("--modes", default=",".join(COMPARED), help="target: modes (default %(default)s)")
    p.add_argument("--target-budget", type=float, default=60.0,
                   help="target: seconds per run at most (default %(default)s)")
    p.add_argument("--profile", default="cpu", help="target: a built-in profile (default %(default)s)")
    p.add_argument("--staleness", type=int, default=16, help="target: nodelay's tau (default %(default)s)")
    p.add_argument("--local-steps", type=int, default=8, help="target: localsgd's tau (default %(default)s)")
    p.add_argument("--base-iter", type=float, default=0.05,
                   help="seconds of a slowdown-1 iteration, both engines (default %(default)s)")
    p.add_argument("--model", default="smallcnn")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--target-accuracy", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/nodelay", help="output directory (default %(default)s)")
    return p




def plan(args):
    """The runs, as ``(part, label, JobSpec)``, in order.

    Raises:
        ConfigError: for a bad part, engine, tau, mode or profile.
    """
    from mxhet.modes import mode_names
    parts = comma_list(args.parts, "parts", PARTS)
    engines = comma_list(args.engines, "engines", ENGINES)
    try:
        taus = [int(t) for t in str(args.taus).split(",")]
    except ValueError:
        raise ConfigError("--taus must be comma-separated integers, got %r" % args.taus) from None
    if not taus or any(t < 1 for t in taus):
        raise ConfigError("--taus must be positive integers, got %r" % args.taus)
    if args.workers < 1 or not args.delay_ms >= 0 or not args.base_iter > 0:
        raise ConfigError("--workers must be >= 1, --delay-ms >= 0 and --base-iter > 0")
    modes = comma_list(args.modes, "modes", mode_names())
    profile = profiles.load(args.profile)
    common = dict(model=args.model, lr=args.lr, target_accuracy=args.target_accuracy, seed=args.seed)
    runs = []
    for engine in engines:
        if "tau" in parts:
            for tau in taus:
                launcher = ("--base-iter", "%g" % args.base_iter, "--net-delay-ms", "%g" % args.delay_ms)
                spec = JobSpec(mode="nodelay", slowdowns=(1.0,) * args.workers, time_budget=args.tau_budget,
                               eval_interval=max(1.0, args.tau_budget / 10), engine=engine,
                               extra_train_args=("--max-staleness", str(tau)), launcher_args=launcher, **common)
                runs.append(("tau", "tau%d-%s" % (tau, engine), spec))
                if engine == "sim" and args.equal_iterations:
                    spec = JobSpec(mode="nodelay", slowdowns=(1.0,) * args.workers,
                                   time_budget=args.tau_budget * 100, eval_interval=args.tau_budget, engine=engine,
                                   extra_train_args=("--max-staleness", str(tau)), launcher_args=launcher,
                                   sim_args=("--max-iterations", str(args.equal_iterations)), **common)
                    runs.append(("tau-equal", "tau%d-equal-%s" % (tau, engine), spec))
        if "target" in parts:
            for mode in modes:
                extra = {"nodelay": ("--max-staleness", str(args.staleness)),
                         "localsgd": ("--local-steps", str(args.local_steps))}.get(mode, ())
                spec = JobSpec(mode=mode, slowdowns=profile.slowdowns, time_budget=args.target_budget,
                               eval_interval=1.0, engine=engine, extra_train_args=extra,
                               launcher_args=("--base-iter", "%g" % args.base_iter),
                               sim_args=("--stop-at-target",), **common)
                runs.append(("target", "%s-%s" % (mode, engine), spec))
    return runs


def portable(argv):
    """``argv`` without this machine's paths: the interpreter as ``python``, paths under the working directory
    relative to it."""
    cwd = os.getcwd() + os.sep
    return ["python" if a == sys.executable else a.replace(cwd, "") for a in argv or ()]


def _row(part, label, spec, summary):
    record = run_record(summary)
    ratios = record["compute_ratio"]
    return {"part": part, "label": label, "engine": spec.engine, "mode": spec.mode,
            "tau": int(spec.extra_train_args[1]) if spec.mode == "nodelay" else None,
            "compute_ratio_min": min(r for r in ratios if r is not None),
            "compute_ratio_mean": sum(ratios) / len(ratios),
            "waited_iterations": [w["waited_iterations"] for w in sorted(summary["workers"],
                                                                         key=lambda w: w["slot"])],
            "iterations": sum(w["iterations"] for w in summary["workers"]),
            **{k: record[k] for k in ("time_to_target_s", "final_accuracy", "compute_ratio", "rounds",
                                      "local_iters_mean", "train_time_s", "samples_per_s", "slowdown")},
            "command": portable(record["command"])}


def format_report(result):
    """The markdown report of a finished experiment."""
    lines = ["# mxhet-bench nodelay", "",
             "Command: `%s`" % " ".join(result["command"]), "",
             "Machine: %s, %s cores (shared with other jobs: cluster timings are noisy)."
             % (result["machine"]["cpu"], result["machine"]["cores"]), ""]
    tau_rows = [r for r in result["runs"] if r["part"] in ("tau", "tau-equal")]
    if tau_rows:
        lines += ["## Compute ratio against tau (%d homogeneous devices, %g ms link delay each way, "
                  "T = %g s)" % (result["settings"]["workers"], result["settings"]["delay_ms"],
                                 result["settings"]["base_iter"]), "",
                  "| engine | run | tau | compute ratio (min / mean) | waits at the bound | gradients | "
                  "final accuracy |", "|---|---|---|---|---|---|---|"]
        for r in tau_rows:
            lines.append("| %s | %s | %d | %.3f / %.3f | %d | %d | %.4f |" % (
                r["engine"], "equal gradients" if r["part"] == "tau-equal" else "equal time", r["tau"],
                r["compute_ratio_min"], r["compute_ratio_mean"], sum(r["waited_iterations"]), r["iterations"],
                r["final_accuracy"]))
        lines.append("")
    target_rows = [r for r in result["runs"] if r["part"] == "target"]
    if target_rows:
        lines += ["## Time to %.2f on the %s profile (slowdowns %s, T = %g s)"
                  % (result["settings"]["target_accuracy"], result["settings"]["profile"],
                     ",".join("%g" % f for f in target_rows[0]["slowdown"]), result["settings"]["base_iter"]), "",
                  "| engine | mode | time to target (s) | final accuracy | compute ratio per device | rounds |",
                  "|---|---|---|---|---|---|"]
        for r in target_rows:
            t = r["time_to_target_s"]
            lines.append("| %s | %s | %s | %.4f | %s | %s |" % (
                r["engine"], r["mode"] + (" (tau %d)" % r["tau"] if r["tau"] else ""),
                "%.1f" % t if t is not None else "not reached", r["final_accuracy"],
                " ".join("%.2f" % c for c in r["compute_ratio"]), max(r["rounds"])))
        lines.append("")
    lines += failures_block(result["failures"])
    return "\n".join(lines)


def run(args):
    try:
        runs = plan(args)
    except ConfigError as exc:
        print("mxhet-bench nodelay: error: %s" % exc, file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    rows, failures = run_jobs([(label, spec, part) for part, label, spec in runs], args.out,
                              lambda label, spec, summary, _dir, part: _row(part, label, spec, summary), width=18)
    result = {"experiment": "nodelay", "command": ["mxhet-bench"] + sys.argv[1:], "machine": machine_info(),
              "provenance": provenance(["mxhet-bench"] + sys.argv[1:], seeds=[args.seed]),
              "settings": {k: getattr(args, k) for k in ("parts", "engines", "taus", "workers", "delay_ms",
                                                         "tau_budget", "equal_iterations", "modes", "target_budget",
                                                         "profile", "staleness", "local_steps", "base_iter", "model",
                                                         "lr", "target_accuracy", "seed")},
              "runs": rows, "failures": failures, "started_unix": started, "wall_s": time.time() - started}
    report = format_report(result)
    write_outputs(args.out, "nodelay", result, report)
    print(report)
    return 1 if failures else 0
