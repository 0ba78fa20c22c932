"""``mxhet-bench gcada``: the G-CADA paper's experiment (its Fig. 2) on both engines.

G-CADA against CADA, distributed Adam (AMSGrad with every worker every
iteration: ``cada`` with D = 1) and synchronous SGD, as in the paper's §VI:
linear regression (the ``linear`` model) under the quadratic loss
(``--objective l2``: half the mean squared error against the one-hot label)
on Fashion-MNIST, to a training loss of 0.1, with exponentially distributed
computing times (``--slowdown-dist exp``, mean ``--base-iter``). G-CADA and
CADA run twice: with eq. (9)'s smoothness constants L_g folded into c
(``gcada``, ``cada``) and computed exactly from each shard (``gcada-shard``,
``cada-shard``: ``--smoothness shard``). Per run: the wall-clock time to the
training-loss threshold, and the communication load (eq. 5, downloads +
uploads) and computation load (eq. 6, mini-batch gradients computed) spent by
then. The training loss is the global model's mean loss on a fixed subset of
the training set, measured on every snapshot.

* ``--engines sim``: virtual time, M = 12, G = 3, mean computing time 1e-4 s as
  in the paper, messages and transfers free (``--latency-ms 0 --per-key-ms 0``,
  the paper's model counts computation only). Also checks the simulator's mean
  time per iteration against the paper's order statistics (eqs. 10, 14): given
  the s groups selected in an iteration, E[T] = (η / M_G) · H_s for G-CADA
  (the largest of s group minima, each the minimum of M_G exponentials), η·H_s
  for CADA and distributed Adam.
* ``--engines cluster``: the real parameter server, M = 6, G = 3, on the
  shared machine (mean computing time ``--cluster-base-iter``).

Results: ``OUT/gcada.json`` and ``OUT/gcada.md``.
"""
import json
import math
import os
import sys
import time

import numpy as np

from .experiment import write_outputs
from .provenance import provenance
from .runner import JobFailed, JobSpec, machine_info, run_with_bar

SIM_FREE_NETWORK = ("--latency-ms", "0", "--per-key-ms", "0", "--bandwidth-gbps", "1000000")
RUNS = {
    # name: (mode, extra train flags, lr); G-CADA's and CADA's c as in the paper's Section VI
    "gcada": ("gcada", ("--dist", "group", "--groups", "{G}"), None),
    "gcada-shard": ("gcada", ("--dist", "group", "--groups", "{G}", "--smoothness", "shard"), None),
    "cada": ("cada", ("--dist", "iid"), None),
    "cada-shard": ("cada", ("--dist", "iid", "--smoothness", "shard"), None),
    "dadam": ("cada", ("--dist", "iid", "--max-delay", "1"), None),
    "sync": ("sync", ("--dist", "iid", "--optimizer", "sgd"), "{sync_lr}"),
}


def add_parser(sub):
    p = sub.add_parser("gcada", help="G-CADA vs CADA, distributed Adam and sync SGD: time, communication and "
                                     "computation to a training-loss threshold (the G-CADA paper's Fig. 2)")
    add_arguments(p)
    return p


def add_arguments(p):
    p.add_argument("--engines", default="sim,cluster", help="sim, cluster or both (default %(default)s)")
    p.add_argument("--runs", default=",".join(RUNS), help="runs (default %(default)s)")
    p.add_argument("--objective", choices=["l2", "softmax"], default="l2",
                   help="the training loss (default %(default)s: the paper's quadratic loss, linear regression)")
    p.add_argument("--loss", type=float, default=0.1, help="simulator: training-loss threshold (default %(default)s)")
    p.add_argument("--cluster-loss", type=float, default=0.1,
                   help="cluster: training-loss threshold (default %(default)s)")
    p.add_argument("--reanalyse", action="store_true",
                   help="do not run: analyse the runs already in OUT/runs again (e.g. with another threshold)")
    p.add_argument("--loss-samples", type=int, default=5000,
                   help="training samples the loss is measured on (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="μ, samples per mini-batch (default %(default)s)")
    p.add_argument("--max-delay", type=int, default=10, help="D for gcada and cada (default %(default)s)")
    p.add_argument("--sync-lr", type=float, default=0.05,
                   help="sync SGD's learning rate (default %(default)s; the l2 loss's L is about 30 on each "
                        "third of the data, so SGD is stable below 2/30)")
    p.add_argument("--step-size", type=float, default=0.01,
                   help="α of gcada, cada and distributed Adam (default %(default)s, the paper's; under "
                        "--objective softmax it made the loss oscillate between 0.65 and 2.3: use 0.001 there)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=12, help="simulator: M (default %(default)s)")
    p.add_argument("--groups", type=int, default=3, help="simulator: G (default %(default)s)")
    p.add_argument("--base-iter", type=float, default=1e-4,
                   help="simulator: η, mean computing time, virtual seconds (default %(default)s)")
    p.add_argument("--budget", type=float, default=0.15,
                   help="simulator: virtual seconds per run (default %(default)s)")
    p.add_argument("--gcada-budget", type=float, default=0.03,
                   help="simulator: virtual seconds of the gcada runs (default %(default)s)")
    p.add_argument("--eval-interval", type=float, default=0.001,
                   help="simulator: virtual seconds between snapshots (default %(default)s)")
    p.add_argument("--cluster-workers", type=int, default=6, help="cluster: M (default %(default)s)")
    p.add_argument("--cluster-groups", type=int, default=3, help="cluster: G (default %(default)s)")
    p.add_argument("--cluster-base-iter", type=float, default=0.05,
                   help="cluster: η, mean computing time, seconds (default %(default)s)")
    p.add_argument("--cluster-budget", type=float, default=40.0, help="cluster: seconds per run (default %(default)s)")
    p.add_argument("--cluster-eval-interval", type=float, default=1.0,
                   help="cluster: seconds between snapshots (default %(default)s)")
    p.add_argument("--out", default="bench/results/gcada", help="output directory (default %(default)s)")


def harmonic(n):
    return sum(1.0 / i for i in range(1, n + 1))


def expected_iteration_time(selected, group_size, eta):
    """Eqs. (10)/(14): the mean of the largest of ``selected`` group times, each
    the smallest of ``group_size`` exponentials of mean ``eta``: (η / M_G) · H_s."""
    return eta / group_size * harmonic(selected)


def specs_for(args, engine):
    """``[(name, JobSpec)]`` of one engine's runs."""
    sim = engine == "sim"
    m = args.workers if sim else args.cluster_workers
    g = args.groups if sim else args.cluster_groups
    base = args.base_iter if sim else args.cluster_base_iter
    out = []
    for name in [r for r in args.runs.split(",") if r]:
        if name not in RUNS:
            raise ValueError("unknown run %r; known: %s" % (name, ", ".join(RUNS)))
        mode, flags, lr = RUNS[name]
        flags = tuple(f.format(G=g) for f in flags)
        if mode in ("gcada", "cada"):
            flags += ("--step-size", "%g" % args.step_size)
            if "--max-delay" not in flags:
                flags += ("--max-delay", str(args.max_delay))
        launcher = ("--base-iter", "%g" % base)
        sim_args = ("--slowdown-dist", "exp", "--eval-growth", "0") + SIM_FREE_NETWORK + ("--no-progress",)
        if not sim:
            launcher += ("--slowdown-dist", "exp", "--state-stats", "STATE")
        spec = JobSpec(mode=mode, slowdowns=(1.0,) * m, model="linear", batch_size=args.batch_size,
                       lr=float(lr.format(sync_lr=args.sync_lr)) if lr else 0.01, seed=args.seed,
                       time_budget=(args.gcada_budget if mode == "gcada" else args.budget) if sim
                       else args.cluster_budget,
                       eval_interval=args.eval_interval if sim else args.cluster_eval_interval,
                       target_accuracy=0.99,
                       extra_train_args=flags + ("--loss", args.objective, "--eval-samples", "500"),
                       launcher_args=launcher, engine=engine, sim_args=sim_args if sim else ())
        out.append((name, spec))
    return out


def training_losses(run_dir, curve, images, labels, model="linear", objective="l2"):
    """The mean training loss (``objective``, :mod:`mxhet.losses`) of every
    snapshot of ``run_dir`` on ``images``, as ``[(time, loss)]`` (snapshot i
    at ``curve[i]``'s time)."""
    import mxnet as mx

    from mxhet import data, losses, models
    net = models.get_model(model)
    net.initialize(mx.init.Xavier())
    x, y = next(iter(data.eval_batches(images, labels, len(labels))))
    net(x)
    params = [p for _, p in sorted(net.collect_params().items())]
    loss_fn = losses.get_loss(objective)
    out = []
    for i, (t, _) in enumerate(curve):
        saved = mx.nd.load(os.path.join(run_dir, "snapshots", "%06d.params" % i))
        arrays = [saved[k] for k in sorted(saved)]
        if [a.shape for a in arrays] != [p.shape for p in params]:
            raise ValueError("snapshot %d of %s does not fit the %s model" % (i, run_dir, model))
        for p, a in zip(params, arrays):
            p.set_data(a)
        out.append((t, float(loss_fn(net(x), y).mean().asscalar())))
    return out


def loads_at(iterations, t, batch_size):
    """Eqs. (5)-(6) summed over the iterations finished by time ``t``."""
    done = [r for r in iterations if r["t"] <= t]
    d = sum(r["downloads"] for r in done)
    u = sum(r["uploads"] for r in done)
    return {"iterations": len(done), "communication": d + u, "computation": d * batch_size, "downloads": d}


def analyse(name, spec, summary, losses, threshold, state, m, g):
    """One run's record: time, communication and computation to ``threshold``."""
    reached = next((t for t, loss in losses if loss <= threshold), None)
    record = {"run": name, "mode": spec.mode, "engine": spec.engine, "workers": m,
              "groups": g if spec.mode == "gcada" else (None if spec.mode == "sync" else m),
              "final_loss": losses[-1][1], "loss_curve": [[round(t, 6), round(v, 5)] for t, v in losses],
              "time_to_loss_s": reached, "train_time_s": summary["train_time_s"],
              "final_accuracy": summary["final_accuracy"]}
    if state is not None:
        iterations = state["iterations"]
        t0 = 0.0
        if spec.engine == "cluster" and iterations:
            # the State Server logs its own monotonic clock: its first step is at the first iteration's end
            t0 = iterations[0]["t"] - (iterations[1]["t"] - iterations[0]["t"] if len(iterations) > 1 else 0.0)
        iterations = [dict(r, t=r["t"] - t0) for r in iterations]
        record["iterations"] = len(iterations)
        record["smoothness"] = state.get("smoothness")   # eq. (9)'s L_g per group
        record["selected_per_iteration"] = float(np.mean([len(r["selected"]) for r in iterations]))
        record["totals"] = state["totals"]
        if reached is not None:
            record["at_threshold"] = loads_at(iterations, reached, spec.batch_size)
        group_size = m // (g if spec.mode == "gcada" else m)
        times = np.diff([0.0] + [r["t"] for r in iterations])
        predicted = [expected_iteration_time(len(r["selected"]), group_size, spec_base(spec)) for r in iterations]
        record["time_per_iteration_s"] = float(times.mean())
        record["predicted_time_per_iteration_s"] = float(np.mean(predicted))
        record["prediction_gap"] = float(times.mean() / np.mean(predicted) - 1.0) if np.mean(predicted) else None
    else:   # sync SGD: every worker downloads and uploads once per step, at an even pace
        steps = summary["workers"][0]["rounds"]
        per_step = summary["train_time_s"] / max(1, steps)
        record["iterations"] = steps
        record["time_per_iteration_s"] = per_step
        record["predicted_time_per_iteration_s"] = spec_base(spec) * harmonic(m)
        record["prediction_gap"] = per_step / record["predicted_time_per_iteration_s"] - 1.0
        if reached is not None:
            k = min(steps, int(math.ceil(reached / per_step)))
            record["at_threshold"] = {"iterations": k, "communication": 2 * m * k,
                                      "computation": m * k * spec.batch_size, "downloads": m * k,
                                      "estimated": "from the mean step time"}
    return record


def spec_base(spec):
    return float(spec.launcher_args[spec.launcher_args.index("--base-iter") + 1])


def report(result):
    lines = ["# G-CADA, CADA, distributed Adam and sync SGD (the G-CADA paper's Fig. 2)", "",
             "Linear model on Fashion-MNIST, exponential computing times; training loss = the global model's "
             "mean %s loss on %d training samples; threshold %.3g (simulator) and %.3g (cluster). "
             "`-shard` runs: eq. (9)'s L_g computed from each shard (`--smoothness shard`), else folded into c. "
             "Communication = downloads + uploads (eq. 5), computation = mini-batch gradients x μ = %d samples "
             "(eq. 6), both counted up to the threshold. `eqs. 10/14`: the mean iteration time the paper's "
             "order statistics give for the groups each iteration selected; `gap`: measured / predicted - 1."
             % (result.get("objective", "softmax"), result["loss_samples"], result["loss"],
                result.get("cluster_loss", result["loss"]),
                result["batch_size"]), ""]
    for engine in ("sim", "cluster"):
        rows = [r for r in result["runs"] if r["engine"] == engine]
        if not rows:
            continue
        lines += ["## %s" % ("Virtual time (simulator)" if engine == "sim" else
                             "Real cluster (shared, loaded 2-core machine)"), "",
                  "| run | M | G | time to loss (s) | communication | computation (samples) | iterations | "
                  "groups/iter | final loss | time/iter (s) | eqs. 10/14 (s) | gap |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            at = r.get("at_threshold") or {}
            lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %.4f | %.3g | %.3g | %s |" % (
                r["run"], r["workers"], r["groups"] or "-",
                "%.4g" % r["time_to_loss_s"] if r["time_to_loss_s"] is not None else "not reached",
                at.get("communication", "-"), at.get("computation", "-"), at.get("iterations", "-"),
                "%.2f" % r["selected_per_iteration"] if "selected_per_iteration" in r else "-",
                r["final_loss"], r["time_per_iteration_s"], r["predicted_time_per_iteration_s"],
                "%+.1f%%" % (100 * r["prediction_gap"]) if r["prediction_gap"] is not None else "-"))
        lines.append("")
    lines += ["Command: `%s`" % " ".join(result["command"]), ""]
    return "\n".join(lines)


def run(args):
    from mxhet import data
    images, labels = data.load_fashion_mnist("train")
    images, labels = images[:args.loss_samples], labels[:args.loss_samples]
    os.makedirs(args.out, exist_ok=True)
    result = {"experiment": "gcada", "objective": args.objective, "loss": args.loss, "cluster_loss": args.cluster_loss,
              "loss_samples": args.loss_samples,
              "batch_size": args.batch_size, "runs": [], "failures": [], "machine": machine_info(),
              "provenance": provenance(["mxhet-bench"] + sys.argv[1:], seeds=[args.seed]),
              "command": ["mxhet-bench", "gcada"] + [a for a in getattr(args, "argv", []) if a != "gcada"],
              "started": time.time()}
    for engine in [e for e in args.engines.split(",") if e]:
        m = args.workers if engine == "sim" else args.cluster_workers
        g = args.groups if engine == "sim" else args.cluster_groups
        for name, spec in specs_for(args, engine):
            run_dir = os.path.join(args.out, "runs", "%s-%s" % (engine, name))
            state_path = os.path.join(os.path.abspath(run_dir), "state.json")
            spec.launcher_args = tuple(state_path if a == "STATE" else a for a in spec.launcher_args)
            try:
                if args.reanalyse:
                    with open(os.path.join(run_dir, "summary.json")) as f:
                        summary = json.load(f)
                else:
                    summary = run_with_bar(spec, run_dir, "%s %s" % (engine, name))
            except (JobFailed, OSError) as exc:
                result["failures"].append({"run": name, "engine": engine, "error": str(exc)})
                continue
            state = summary.get("gcada")
            if state is None and os.path.exists(state_path):
                with open(state_path) as f:
                    state = json.load(f).get("gcada")
            losses = training_losses(run_dir, summary["curve"], images, labels, objective=args.objective)
            threshold = args.loss if engine == "sim" else args.cluster_loss
            result["runs"].append(analyse(name, spec, summary, losses, threshold, state, m, g))
            _write(args.out, result)
    _write(args.out, result)
    print(report(result))
    return 1 if result["failures"] else 0


def _write(out, result):
    write_outputs(out, "gcada", result, report(result))


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m bench.gcada", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
