"""``mxhet-bench``: measured comparisons of sync modes on an emulated heterogeneous cluster.

``mxhet-bench all --preset cpu`` reproduces the ESync paper's Table 1 and
Figures 3-5 (``table1``, ``curves``, ``throughput``, ``compute-ratio``; ``all``
runs each needed run once and feeds every experiment from it): JSON per
experiment, ``report.md`` and PNG figures in ``--out``. See :mod:`bench.presets`
and :mod:`bench.profiles`.

``mxhet-bench demo`` runs the comparison a user faces on the same emulated
cluster (by default 3 workers, the third 10x slower) training the small CNN on
Fashion-MNIST: ESync, Sync, one fast device alone (``local``) and Sync over
the fast devices only (``sync-fast``), and prints time to target accuracy
(confirmed on all 10,000 test images), final accuracy, throughput,
per-device local iterations per round (n_i) and compute ratio, then ESync's
speedup over Sync and over the best alternative (one seed: no interval).
Results go to ``--out`` as JSON, with each job's log.
"""
import argparse
import json
import os
import signal
import sys
import time

from tqdm import tqdm

from mxhet.errors import ConfigError
from mxhet.sim.checkpoint import add_flags as add_checkpoint_flags

from . import aggregation, heterogeneity, presets, profiles
from . import nodelay as nodelay_bench
from . import preduce as preduce_bench
from . import gcada as gcada_bench
from . import faults as faults_bench
from .confirm import recorded as recorded_confirmation
from .metrics import run_record
from .provenance import provenance
from . import runner
from .experiment import comma_list
from .runner import JobFailed, JobSpec, machine_info, not_run, run_with_bar as _with_bar


def _floats(text):
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated numbers, got %r" % text) from None
    if not values or any(not v >= 1 for v in values):
        raise argparse.ArgumentTypeError("slowdown factors must be >= 1, got %r" % text)
    return values


def _common(parser, out, slowdown, budget, what):
    """Options every experiment takes."""
    parser.add_argument("--out", default=out, help="output directory (default %(default)s)")
    parser.add_argument("--slowdown", type=_floats, default=slowdown,
                        help="one slowdown factor per worker (default %s)" % ",".join("%g" % f for f in slowdown))
    parser.add_argument("--time-budget", type=float, default=budget,
                        help="training seconds %s (default %%(default)s)" % what)
    parser.add_argument("--seed", type=int, default=0, help="seed of every run (default 0)")
    return parser


def build_parser():
    p = argparse.ArgumentParser(prog="mxhet-bench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="experiment", required=True)
    demo = _common(sub.add_parser("demo", help="ESync vs Sync, one fast device alone and Sync over the fast "
                                               "devices only, on one emulated heterogeneous cluster"),
                   "runs/demo", (1.0, 1.0, 10.0), 45.0, "per mode")
    demo.add_argument("--modes", default="esync,sync,local,sync-fast",
                      help="comma-separated modes; local: the fastest device alone, sync-fast: Sync over the "
                           "fastest devices only (default %(default)s)")
    demo.add_argument("--model", default="smallcnn")
    demo.add_argument("--lr", type=float, default=0.05)
    demo.add_argument("--target-accuracy", type=float, default=0.8)
    demo.add_argument("--dist", choices=["iid", "non-iid"], default="iid")
    eps = _common(sub.add_parser("epsilon", help="ESync: sweep the State Server's ε (Algorithm 2)"),
                  "runs/epsilon", (1.0, 1.0, 10.0), 25.0, "per value")
    eps.add_argument("--values", default="0,0.01,0.05,0.2", help="ε values in seconds (default %(default)s)")
    acks = _common(sub.add_parser("acks", help="ESync: blocking vs delayed-ACK queries, with link delays"),
                   "runs/acks", (1.0, 1.0, 10.0), 25.0, "per run")
    acks.add_argument("--delays-ms", default="0,30", help="one-way delays to try, ms (default %(default)s)")
    dyn = _common(sub.add_parser("dynamic", help="ESync: a device slowed down mid-run; n_i per round"),
                  "runs/dynamic", (1.0, 1.0, 3.0), 25.0, "")
    dyn.add_argument("--schedule", default="0:10-=12",
                     help="launcher --slowdown-schedule, SLOT:SPEC (default %(default)s)")
    dyn.add_argument("--ack", choices=["blocking", "delayed"], default="blocking")
    dyn.add_argument("--window", type=float, default=2.5, help="seconds per line of the printed table")
    sub.add_parser("scale", add_help=False,
                   help="ESync, SSP and ADSP with 100 to 10,000 simulated devices (options: mxhet-bench scale -h)")
    sub.add_parser("estimate", add_help=False,
                   help="the cost of a simulator bench on this machine: predicted for whole presets (--preset) "
                        "or estimated for a finished one (options: mxhet-bench estimate -h)")
    cp = sub.add_parser("control-plane", help="State Server: queries/s and latency under closed-loop load")
    load = cp.add_argument_group("load")
    load.add_argument("--clients", type=int, default=64, help="closed-loop client sockets (default %(default)s)")
    load.add_argument("--registered", default="64,2000,10000",
                      help="registered ranks, one run each (default %(default)s)")
    load.add_argument("--active-ranks", default="0",
                      help="ranks issuing queries, spread over the clients; 0 = one per client "
                           "(comma-separated: one run each; default %(default)s)")
    load.add_argument("--generators", type=int, default=max(1, min(4, (os.cpu_count() or 2) - 1)),
                      help="load-generator processes (default %(default)s)")
    load.add_argument("--auth", choices=["off", "on", "both"], default="off",
                      help="CURVE authentication of the control plane (default %(default)s)")
    load.add_argument("--client", choices=["zmtp", "zmq"], default="zmtp",
                      help="clients: ZMTP on plain TCP sockets (cheap for the generator) or libzmq DEALER "
                           "sockets; authenticated runs always use libzmq (default %(default)s)")
    load.add_argument("--server-cpus", default="",
                      help="pin the State Server process to these CPUs, e.g. 0 (default: not pinned)")
    load.add_argument("--generator-cpus", default="",
                      help="pin the load generators to these CPUs, e.g. 1 (default: not pinned)")
    timing = cp.add_argument_group("timing")
    timing.add_argument("--duration", type=float, default=5.0, help="measured seconds per run (default %(default)s)")
    timing.add_argument("--warmup", type=float, default=1.0, help="seconds of load before (default %(default)s)")
    timing.add_argument("--repeat", type=int, default=1,
                        help="runs per configuration, interleaved; the report shows the median (default %(default)s)")
    where = cp.add_argument_group("code and output")
    where.add_argument("--baseline", default="",
                       help="a directory holding another mxhet package: also run it, labelled 'before'")
    where.add_argument("--profile", default="",
                       help="comma-separated registered counts to profile the server at (cProfile)")
    where.add_argument("--profile-duration", type=float, default=3.0)
    where.add_argument("--out", default="runs/control-plane", help="output directory (default %(default)s)")
    val = sub.add_parser("validate-sim", help="the same jobs on the cluster and in the simulator, compared")
    val.add_argument("--model", default="smallcnn")
    val.add_argument("--modes", default="esync,sync,async", help="comma-separated modes (default %(default)s)")
    val.add_argument("--cases", default="cpu,mixed",
                     help="profiles: cpu (10,10,1,1) and mixed (1,2,4,8, slot 0 slowed to 12x at half "
                          "time) (default %(default)s)")
    val.add_argument("--time-budget", type=float, default=60.0, help="seconds per run (default %(default)s)")
    val.add_argument("--base-iter", type=float, default=0.05,
                     help="seconds of a slowdown-1 iteration, on both engines (default %(default)s)")
    val.add_argument("--lr", type=float, default=0.05)
    val.add_argument("--seed", type=int, default=0)
    val.add_argument("--out", default="runs/validate-sim", help="output directory (default %(default)s)")
    aggregation.add_parser(sub)
    heterogeneity.add_parser(sub)
    nodelay_bench.add_parser(sub)
    preduce_bench.add_parser(sub)
    gcada_bench.add_parser(sub)
    faults_bench.add_parser(sub)
    mem = sub.add_parser("members-plot", help="figure of a `python -m mxhet.sim --score-members N` run: members' "
                                              "scores, their mean and the global model's, per round")
    mem.add_argument("run_dir", help="the run's --metrics-out directory (with summary.json)")
    mem.add_argument("--out", default=None, help="the PNG (default RUN_DIR/members.png)")
    res = sub.add_parser("rescore", help="score a finished bench's runs again with the current evaluation "
                                         "protocol and rebuild its JSON, report and figures")
    res.add_argument("--out", required=True, help="the bench's output directory (with runs/)")
    res.add_argument("--models", default=None, help="only the runs of these models (default: every run)")
    res.add_argument("--rebuild-only", action="store_true",
                     help="score nothing again: rebuild the JSON, report and figures from the runs' summaries")
    for name in EXPERIMENT_NAMES:
        help_text = {"table1": "Table 1: ESync vs Sync speedup to the target, ESync vs standalone accuracy",
                     "curves": "Figure 3: test accuracy over time, i.i.d. and non-i.i.d.",
                     "throughput": "Figure 4: samples and bytes per second per mode",
                     "compute-ratio": "Figure 5: computing-time ratio per device per mode",
                     "all": "every experiment above, each run once",
                     "sweep": "open division: each variant's learning rate sweep on one model (sweep.json; "
                              "the open preset's other experiments take each variant's best rate from it)"}[name]
        e = sub.add_parser(name, help=help_text)
        e.add_argument("--preset", default="cpu", choices=sorted(presets.PRESETS),
                       help="smoke: pipeline check in minutes; cpu: reduced models for a CPU machine; "
                            "paper-sim: the closed division, the paper's 117x profile and lr 0.001 in virtual "
                            "time, 3 seeds, times confirmed on all test images (Inception-v3 only with "
                            "--models); paper-sim-open: the open division, each variant at its best lr from "
                            "`sweep`; paper-sim-lr0.1: the earlier single-seed lr-0.1 bench; paper-sim-gpu: "
                            "that at the paper's sizes on a GPU; "
                            "paper: the paper's sizes and 117x profile on a GPU machine (default %(default)s)")
        e.add_argument("--models", default=None, help="comma-separated models (default: the preset's)")
        e.add_argument("--modes", default=None, help="comma-separated modes, replacing each experiment's "
                                                     "(add 'local' for the standalone run)")
        e.add_argument("--profile", default=None,
                       help="a built-in profile (%s) or a JSON file of devices (default: the preset's)"
                            % ", ".join(sorted(profiles.BUILTIN)))
        e.add_argument("--out", default=None, help="output directory (default runs/bench-PRESET)")
        e.add_argument("--time-budget", type=float, default=None, help="training seconds per run "
                                                                       "(default: the preset's)")
        seeds = e.add_mutually_exclusive_group()
        seeds.add_argument("--seed", type=int, default=None, help="one seed for every run (default: the preset's)")
        seeds.add_argument("--seeds", default=None,
                           help="comma-separated seeds for every model, e.g. 0,1,2 (default: the preset's: "
                                "paper-sim runs 0,1,2, the ResNet-50s 0)")
        e.add_argument("--engine", choices=["cluster", "sim"], default=None,
                       help="cluster: real processes on this machine; sim: python -m mxhet.sim in virtual "
                            "time (default: the preset's, cluster but for paper-sim and paper-sim-gpu)")
        e.add_argument("--jobs", type=int, default=1,
                       help="simulator runs at once, each a process with one compute thread "
                            "(default 1; the cluster engine runs one job at a time)")
        add_checkpoint_flags(
            e, 10.0,
            "a simulator run saves a checkpoint every MINUTES of wall time, on SIGTERM and at the end of training, "
            "in its run directory; --resume continues it with the same final model (default %(default)s; 0: none)",
            "keep simulator runs already finished in --out with the same command, and continue a simulator run "
            "from its checkpoint (a long bench stopped part-way goes on where it was; see docs/bench.md)")
        e.add_argument("--reuse", action="append", default=[], metavar="DIR",
                       help="another bench's output directory (e.g. the heterogeneity bench's, whose 117x runs "
                            "are the open division's): a simulator run not finished in --out that is one of its "
                            "finished runs (the same command) is copied from there instead of run again; "
                            "repeatable")
        e.add_argument("--report-only", action="store_true",
                       help="run and score nothing: write the JSON, report and figures from the simulator runs "
                            "finished and confirmed in --out (the others are listed as not finished), e.g. "
                            "to commit a bench that goes on over several sessions")
    return p


EXPERIMENT_NAMES = ("table1", "curves", "throughput", "compute-ratio", "all", "sweep")


def run_paper_experiment(args):
    from mxhet.models import MODEL_NAMES
    from mxhet.modes import mode_names

    from . import suite
    try:
        preset = presets.get(args.preset)
        profile = profiles.load(args.profile or preset.profile)
        model_list = tuple(comma_list(args.models, "models", MODEL_NAMES)) if args.models else None
        mode_list = (tuple(comma_list(args.modes, "modes", tuple(mode_names()) + presets.VARIANTS[1:]))
                     if args.modes else None)
        seed_list = _ints(args.seeds, "seeds") if args.seeds else None
        if args.seeds is not None and not seed_list:
            raise ConfigError("--seeds is empty")
        if args.time_budget is not None and not args.time_budget > 0:
            raise ConfigError("--time-budget must be > 0 seconds")
        if args.jobs < 1:
            raise ConfigError("--jobs must be >= 1, got %d" % args.jobs)
        if not args.checkpoint_every_min >= 0:
            raise ConfigError("--checkpoint-every-min must be >= 0 minutes (0: none), got %r"
                              % args.checkpoint_every_min)
        if args.jobs > 1 and (args.engine or preset.engine) != "sim":
            raise ConfigError("--jobs %d: only simulator runs may share the machine (the cluster's timings "
                              "would not be the emulated ones); use --engine sim or --jobs 1" % args.jobs)
        experiments = suite.EXPERIMENTS if args.experiment == "all" else (args.experiment,)
        if args.experiment == suite.SWEEP and not preset.lr_sweep:
            raise ConfigError("preset %s has no learning-rate sweep; use --preset paper-sim-open" % preset.name)
        out = args.out or os.path.join("runs", "bench-%s" % preset.name)
        if args.report_only and (args.engine or preset.engine) != "sim":
            raise ConfigError("--report-only reports simulator runs (the cluster's are never kept); "
                              "use --engine sim or a simulator preset")
        started = time.time()
        result = suite.run_suite(experiments, preset, profile, out, models=model_list, modes=mode_list,
                                 budget=args.time_budget, seed=args.seed, seeds=seed_list,
                                 command=["mxhet-bench"] + args.argv,
                                 engine=args.engine, jobs=args.jobs, resume=args.resume or args.report_only,
                                 checkpoint_every_min=args.checkpoint_every_min, reuse=args.reuse,
                                 **(dict(run=not_run, confirm_fn=recorded_confirmation) if args.report_only else {}))
    except ConfigError as exc:
        print("mxhet-bench: error: %s" % exc, file=sys.stderr)
        return 2
    print()
    with open(os.path.join(out, "report.md")) as f:
        print(f.read())
    print("wrote (in %.0f min): %s" % ((time.time() - started) / 60, ", ".join(result.files)))
    if result.failures:
        print("%d run(s) %s; see the report's last section"
              % (result.failures, "not finished" if args.report_only else "failed"), file=sys.stderr)
    return 1 if result.failures and not args.report_only else 0


def _fmt_time(t):
    return "%.1f s" % t if t is not None else "not reached"


def format_table(records, target):
    """A plain-text table of the runs."""
    head = ["mode", "time to %.2f" % target, "final acc", "samples/s", "MB/s",
            "n_i per device", "compute ratio per device"]
    rows = [head]
    for r in records:
        rows.append([r.get("variant", r["mode"]), _fmt_time(r["time_to_target_s"]), "%.4f" % r["final_accuracy"],
                     "%.0f" % r["samples_per_s"], "%.2f" % (r["bytes_per_s"] / 1e6),
                     " ".join("%.1f" % x for x in r["local_iters_mean"]),
                     " ".join("%.2f" % x for x in r["compute_ratio"])])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def best_alternative_line(records, target):
    """ESync against the variant other than ESync that reached ``target`` soonest (one seed: no interval)."""
    from . import report
    by_variant = {r.get("variant", r["mode"]): r for r in records}
    es = by_variant.get("esync")
    others = [r for v, r in by_variant.items() if v != "esync" and r["time_to_target_s"] is not None]
    if not es or not others:
        return ""
    best = min(others, key=lambda r: r["time_to_target_s"])
    value, kind = report.speedup(es, best)
    name = report.VARIANT_NAMES.get(best.get("variant", best["mode"]), best["mode"])
    if kind == "measured":
        verdict = "faster" if value > 1 else "slower"
        return ("Best alternative: %s reached %.2f in %.1f s; ESync is %.2fx %s (one seed: no interval)."
                % (name, target, best["time_to_target_s"], value if value > 1 else 1 / value, verdict))
    return "Best alternative: %s reached %.2f in %.1f s; ESync did not reach it." % (
        name, target, best["time_to_target_s"])


def speedup_line(records, target):
    by_mode = {r.get("variant", r["mode"]): r for r in records}
    es, sy = by_mode.get("esync"), by_mode.get("sync")
    if not es or not sy:
        return ""
    if es["time_to_target_s"] is None:
        return "ESync did not reach %.2f within the budget." % target
    if sy["time_to_target_s"] is None:
        return ("ESync reached %.2f in %.1f s; Sync did not reach it within %.0f s of training "
                "(speedup > %.1fx)." % (target, es["time_to_target_s"], sy["train_time_s"],
                                         sy["train_time_s"] / es["time_to_target_s"]))
    return "ESync reached %.2f %.1fx faster than Sync (%.1f s vs %.1f s)." % (
        target, sy["time_to_target_s"] / es["time_to_target_s"], es["time_to_target_s"], sy["time_to_target_s"])


def run_demo(args):
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    from mxhet.modes import get_mode

    from . import confirm
    for m in modes:
        if m != presets.FAST_SYNC:
            get_mode(m)  # fail early on an unknown name
    fastest = min(args.slowdown)

    def devices(mode):
        if mode == presets.STANDALONE:
            return (fastest,)
        if mode == presets.FAST_SYNC:
            return tuple(f for f in args.slowdown if f == fastest)
        return args.slowdown
    specs = [(m, JobSpec(mode="sync" if m == presets.FAST_SYNC else m, slowdowns=devices(m), model=args.model,
                         time_budget=args.time_budget, lr=args.lr, dist=args.dist,
                         target_accuracy=args.target_accuracy, seed=args.seed)) for m in modes]
    os.makedirs(args.out, exist_ok=True)
    print("mxhet-bench demo: %d workers, slowdown %s, model %s, %g s of training per run"
          % (len(args.slowdown), ",".join("%g" % f for f in args.slowdown), args.model, args.time_budget))
    records, failures = [], []
    started = time.time()
    for variant, spec in specs:
        out_dir = os.path.join(args.out, variant)
        try:
            summary = _with_bar(spec, out_dir, "%-9s" % variant)
            confirmation = confirm.ensure(out_dir, summary)   # the time to target on all test images
        except (JobFailed, ConfigError) as exc:
            failures.append({"mode": variant, "error": str(exc)})
            tqdm.write("FAILED: %s" % exc, file=sys.stderr)
            continue
        record = run_record(summary)
        record.update(variant=variant, curve_time_to_target_s=record["time_to_target_s"],
                      time_to_target_s=confirmation["time_to_target_s"], confirmation=confirmation)
        records.append(record)
    result = {"experiment": "demo", "command": ["mxhet-bench"] + args.argv, "machine": machine_info(),
              "provenance": provenance(["mxhet-bench"] + args.argv, seeds=[args.seed]),
              "profile": {"slowdown": list(args.slowdown), "contexts": ["cpu"] * len(args.slowdown)},
              "target_accuracy": args.target_accuracy, "seed": args.seed, "runs": records,
              "failures": failures, "started_unix": started}
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump(result, f, indent=1)
    print()
    print(format_table(records, args.target_accuracy))
    for line in (speedup_line(records, args.target_accuracy), best_alternative_line(records, args.target_accuracy)):
        if line:
            print(line)
    curve_samples = next((r["evaluation"]["curve_samples"] for r in records if r.get("evaluation")), None)
    print("Times to %.2f are confirmed on all test images (the curve scores %s per point); one seed."
          % (args.target_accuracy, curve_samples or "a subset"))
    print("results: %s" % os.path.join(args.out, "demo.json"))
    return 1 if failures else 0


def run_epsilon(args):
    try:
        values = [float(v) for v in args.values.split(",")]
    except ValueError:
        raise SystemExit("mxhet-bench epsilon: --values must be comma-separated seconds, got %r" % args.values)
    if any(not v >= 0 for v in values):
        raise SystemExit("mxhet-bench epsilon: every ε must be >= 0 seconds")
    os.makedirs(args.out, exist_ok=True)
    rows, runs, failures = [], [], []
    for eps in values:
        spec = JobSpec(mode="esync", slowdowns=args.slowdown, time_budget=args.time_budget, seed=args.seed,
                       launcher_args=("--epsilon", repr(eps)))
        try:
            summary = _with_bar(spec, os.path.join(args.out, "eps-%g" % eps), "eps %-5g" % eps)
        except JobFailed as exc:
            failures.append({"epsilon": eps, "error": str(exc)})
            tqdm.write("FAILED: %s" % exc, file=sys.stderr)
            continue
        record = run_record(summary)
        workers = sorted(summary["workers"], key=lambda w: w["slot"])
        record["epsilon"] = eps
        record["sync_wait_per_round_s"] = [w["sync_s"] / max(1, w["rounds"]) for w in workers]
        runs.append(record)
        rows.append([eps, record["compute_ratio"], record["sync_wait_per_round_s"], record["rounds"][0],
                     record["local_iters_mean"], record["final_accuracy"]])
    with open(os.path.join(args.out, "epsilon.json"), "w") as f:
        json.dump({"experiment": "epsilon", "command": ["mxhet-bench"] + args.argv, "machine": machine_info(),
                   "provenance": provenance(["mxhet-bench"] + args.argv, seeds=[args.seed]),
                   "profile": {"slowdown": list(args.slowdown)}, "runs": runs, "failures": failures}, f, indent=1)
    print("\neps (s)  compute ratio per device  push/pull wait per round (ms)  rounds  n_i per device  final acc")
    for eps, ratio, wait, rounds, n_i, acc in rows:
        print("%-8g %-25s %-30s %-7d %-15s %.4f" % (
            eps, " ".join("%.2f" % r for r in ratio), " ".join("%.0f" % (1000 * w) for w in wait),
            rounds, " ".join("%.1f" % n for n in n_i), acc))
    print("results: %s" % os.path.join(args.out, "epsilon.json"))
    return 1 if failures else 0


def _write(out, name, payload, argv, seeds=()):
    path = os.path.join(out, name)
    with open(path, "w") as f:
        json.dump(dict(payload, command=["mxhet-bench"] + argv, machine=machine_info(),
                       provenance=provenance(["mxhet-bench"] + argv, seeds=seeds)), f, indent=1)
    return path


def run_acks(args):
    try:
        delays = [float(v) for v in args.delays_ms.split(",")]
    except ValueError:
        raise SystemExit("mxhet-bench acks: --delays-ms must be comma-separated milliseconds") from None
    os.makedirs(args.out, exist_ok=True)
    runs, failures, rows = [], [], []
    for delay in delays:
        for ack in ("blocking", "delayed"):
            spec = JobSpec(mode="esync", slowdowns=args.slowdown, time_budget=args.time_budget, seed=args.seed,
                           launcher_args=("--net-delay-ms", "%g" % delay), extra_train_args=("--ack", ack))
            name = "%s-%gms" % (ack, delay)
            try:
                summary = _with_bar(spec, os.path.join(args.out, name), "%-15s" % name)
            except JobFailed as exc:
                failures.append({"ack": ack, "delay_ms": delay, "error": str(exc)})
                tqdm.write("FAILED: %s" % exc, file=sys.stderr)
                continue
            record = run_record(summary)
            workers = sorted(summary["workers"], key=lambda w: w["slot"])
            record.update(ack=ack, delay_ms=delay,
                          blocked_per_round_s=[sum(w["round_blocked_s"]) / max(1, w["rounds"]) for w in workers],
                          aborted=[w["aborted"] for w in workers], rtt_s=[w["rtt_s"] for w in workers],
                          waited_iterations=[w["waited_iterations"] for w in workers])
            runs.append(record)
            rows.append(record)
    path = _write(args.out, "acks.json", {"experiment": "acks", "profile": {"slowdown": list(args.slowdown)},
                                          "runs": runs, "failures": failures}, args.argv, seeds=[args.seed])
    print("\nack       delay  compute ratio per device  blocked per round (ms)  aborted   rounds  final acc")
    for r in rows:
        print("%-9s %3g ms  %-25s %-23s %-9s %-7d %.4f" % (
            r["ack"], r["delay_ms"], " ".join("%.2f" % x for x in r["compute_ratio"]),
            " ".join("%.0f" % (1000 * x) for x in r["blocked_per_round_s"]),
            " ".join(str(a) for a in r["aborted"]), r["rounds"][0], r["final_accuracy"]))
    print("results: %s" % path)
    return 1 if failures else 0


def format_dynamic(rounds, window):
    """Rounds grouped into ``window``-second spans: mean n_i per slot, slowest slot(s)."""
    lines = ["training time  rounds  mean n_i per slot  slowest slot"]
    groups = {}
    for r in rounds:
        groups.setdefault(int(r["end_s"] // window), []).append(r)
    for index in sorted(groups):
        group = groups[index]
        means = [sum(r["local_iters"][i] for r in group) / len(group) for i in range(len(group[0]["local_iters"]))]
        slowest = sorted({r["slowest_slot"] for r in group}, key=str)
        lines.append("%5.1f-%-5.1f s  %-7d %-18s %s" % (
            index * window, (index + 1) * window, len(group), " ".join("%.1f" % x for x in means),
            ",".join(str(x) for x in slowest)))
    return "\n".join(lines)


def run_dynamic(args):
    os.makedirs(args.out, exist_ok=True)
    spec = JobSpec(mode="esync", slowdowns=args.slowdown, time_budget=args.time_budget, seed=args.seed,
                   launcher_args=("--slowdown-schedule", args.schedule), extra_train_args=("--ack", args.ack))
    try:
        summary = _with_bar(spec, args.out, "dynamic")
    except JobFailed as exc:
        print("FAILED: %s" % exc, file=sys.stderr)
        return 1
    workers = sorted(summary["workers"], key=lambda w: w["slot"])
    slot_of = {w["rank"]: w["slot"] for w in workers}
    rounds = []
    for t in range(min(w["rounds"] for w in workers)):
        rounds.append({"round": t, "end_s": workers[0]["round_end_s"][t],
                       "local_iters": [w["local_iters"][t] for w in workers],
                       "slowest_slot": slot_of.get(workers[0]["round_slowest"][t])})
    path = _write(args.out, "dynamic.json", {"experiment": "dynamic", "schedule": args.schedule,
                                             "profile": {"slowdown": list(args.slowdown)}, "rounds": rounds,
                                             "run": run_record(summary)}, args.argv, seeds=[args.seed])
    print("\nschedule %s, base slowdown %s" % (args.schedule, ",".join("%g" % f for f in args.slowdown)))
    print(format_dynamic(rounds, args.window))
    print("results: %s" % path)
    return 0


def _ints(text, what):
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError("--%s must be comma-separated integers, got %r" % (what, text)) from None


def run_control_plane(args):
    from . import control_plane
    try:
        registered = _ints(args.registered, "registered")
        active = _ints(args.active_ranks, "active-ranks") or (0,)
        profile = _ints(args.profile, "profile")
        if args.repeat < 1:
            raise ConfigError("--repeat must be >= 1, got %d" % args.repeat)
        if args.baseline and not os.path.isdir(os.path.join(args.baseline, "mxhet")):
            raise ConfigError("--baseline %s holds no mxhet package" % args.baseline)
        configs = control_plane.plan(registered, clients=args.clients, active_ranks=active,
                                     duration=args.duration, warmup=args.warmup, generators=args.generators,
                                     auth=("off", "on") if args.auth == "both" else (args.auth,),
                                     labels=("before", "after") if args.baseline else ("after",),
                                     server_cpus=_ints(args.server_cpus, "server-cpus"),
                                     generator_cpus=_ints(args.generator_cpus, "generator-cpus"),
                                     client=args.client)
    except (ConfigError, ValueError) as exc:
        print("mxhet-bench control-plane: error: %s" % exc, file=sys.stderr)
        return 2
    result = control_plane.run_experiment(configs, args.out, baseline=args.baseline, profile_registered=profile,
                                          profile_duration=args.profile_duration, repeat=args.repeat,
                                          command=["mxhet-bench"] + args.argv)
    print(control_plane.format_report(result))
    print("results: %s" % ", ".join(os.path.join(args.out, "control-plane." + x) for x in ("json", "md")))
    return 1 if result["failures"] else 0


def _terminate(signum, frame):
    # SystemExit unwinds through run_job, which ends the running launcher (its
    # own session: a signal to the bench does not reach it).
    runner.interrupt(SystemExit(128 + signum))


def run_validate_sim(args):
    from mxhet.models import MODEL_NAMES
    from mxhet.modes import mode_names

    from . import validate
    try:
        modes = tuple(comma_list(args.modes, "modes", tuple(mode_names())))
        comma_list(args.model, "model", MODEL_NAMES)
        cases = {c.name: c for c in validate.default_cases(args.time_budget)}
        chosen = [cases[n] for n in comma_list(args.cases, "cases", tuple(cases))]
        if not args.time_budget > 0 or not args.base_iter > 0:
            raise ConfigError("--time-budget and --base-iter must be > 0 seconds")
    except ConfigError as exc:
        print("mxhet-bench: error: %s" % exc, file=sys.stderr)
        return 2
    result = validate.run(chosen, modes, args.model, args.time_budget, args.base_iter, args.out, seed=args.seed,
                          lr=args.lr, command=["mxhet-bench"] + args.argv, log=tqdm.write)
    with open(os.path.join(args.out, "validate-sim.md")) as f:
        print(f.read())
    return 0 if result["agree"] else 1


def run_rescore(args):
    from mxhet.models import MODEL_NAMES

    from . import rescore
    try:
        models = tuple(comma_list(args.models, "models", MODEL_NAMES)) if args.models else None
        result = rescore.rescore(args.out, models=models, log=tqdm.write, score=not args.rebuild_only)
    except ConfigError as exc:
        print("mxhet-bench: error: %s" % exc, file=sys.stderr)
        return 2
    print("rebuilt: %s" % ", ".join(result.files))
    return 0


def run_members_plot(args):
    """``mxhet-bench members-plot RUN_DIR``: :func:`bench.plots.members_plot` of the run's summary."""
    from .plots import members_plot
    try:
        path = members_plot(os.path.join(args.run_dir, "summary.json"),
                            args.out or os.path.join(args.run_dir, "members.png"))
    except ValueError as exc:
        raise ConfigError(str(exc))
    print(path)
    return 0


def main(argv=None):
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["scale"]:  # its own parser (bench/scale.py)
        from . import scale
        return scale.main(raw[1:])
    if raw[:1] == ["estimate"]:  # its own parser (bench/estimate.py)
        from . import estimate
        return estimate.main(raw[1:])
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _terminate)
    runners = {"demo": run_demo, "epsilon": run_epsilon, "acks": run_acks, "dynamic": run_dynamic,
               "control-plane": run_control_plane, "validate-sim": run_validate_sim, "rescore": run_rescore,
               "aggregation": aggregation.run, "members-plot": run_members_plot}
    runners["nodelay"] = nodelay_bench.run
    runners["preduce"] = preduce_bench.run
    runners["gcada"] = gcada_bench.run
    runners["faults"] = faults_bench.run
    runners["heterogeneity"] = heterogeneity.run
    try:
        return runners.get(args.experiment, run_paper_experiment)(args)
    except ConfigError as exc:   # bad input an experiment found: a message, not a traceback
        print("mxhet-bench: error: %s" % exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
