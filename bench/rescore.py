"""``mxhet-bench rescore``: score a finished bench's runs again with the current
evaluation protocol, and rebuild its JSON, report and figures.

Evaluation happens after training, from the snapshots every run keeps in
``runs/<run>/snapshots``, so a change of the evaluation protocol (e.g. precise
BatchNorm) needs no new training: each selected run's snapshots are scored
again (one child process per run) on a network of its own,
its ``summary.json`` is rewritten, and the experiments are rebuilt from the
runs with the calibration recorded at the time (no new measurement).
"""
import argparse
import glob
import json
import os
import subprocess
import sys

from mxhet.errors import ConfigError

from . import presets, profiles, suite


def evaluation_setup(old, run_dir):
    """What :func:`mxhet.train.evaluate_run` needs to score the snapshots of the run in ``run_dir`` whose
    summary is ``old``, on a network of its own (freshly built, never trained, in this process):
    ``(args, config, net, train_set)``."""
    import mxnet as mx

    from mxhet import data
    from mxhet.evaluation import evaluation_network
    from mxhet.config import WorkerConfig
    from mxhet.evaluation import DEFAULT_BN_BATCHES

    args = argparse.Namespace(
        model=old["model"], norm=old.get("norm") or "batch", input_size=old["input_size"],
        batch_size=old["batch_size"], dist=old["dist"],
        lr=old["lr"], seed=old["seed"], ack=old.get("ack") or "blocking", target_accuracy=old["target_accuracy"],
        loss=old.get("loss") or "softmax",
        eval_samples=old["eval_samples"], final_eval_samples=0, bn_batches=DEFAULT_BN_BATCHES, data_dir=None,
        metrics_out=run_dir)
    net = evaluation_network(args.model, args.input_size, args.norm, mx.cpu())
    images, labels = data.load_fashion_mnist("train")
    return args, WorkerConfig(num_slots=old["num_workers"]), net, (images, labels)


def snapshot_paths(run_dir, old):
    """The snapshot files of the run in ``run_dir``, one per point of its curve, in order.

    Raises:
        ConfigError: when they do not match the curve of its summary ``old``.
    """
    snapshots = sorted(glob.glob(os.path.join(run_dir, "snapshots", "*.params")))
    if len(snapshots) != len(old["curve"]):
        raise ConfigError("%s: %d snapshots for %d curve points" % (run_dir, len(snapshots), len(old["curve"])))
    return snapshots


def rescore_run(run_dir):
    """Score ``run_dir``'s snapshots again (in this process) and rewrite its summary.json."""
    import mxnet as mx

    from mxhet import train

    path = os.path.join(run_dir, "summary.json")
    with open(path) as f:
        old = json.load(f)
    snapshots = snapshot_paths(run_dir, old)
    args, config, net, train_set = evaluation_setup(old, run_dir)
    times = [t for t, _ in old["curve"]]
    new = train.evaluate_run(args, config, old["mode"], list(zip(times, snapshots)), mx.cpu(),
                             args.input_size, old["train_time_s"], old["train_loss"], train_set=train_set,
                             eval_net=net)
    for key in ("engine", "time_unit", "sim"):
        if key in old:
            new[key] = old[key]
    new["rescored_from"] = {"final_accuracy": old["final_accuracy"], "curve": old["curve"],
                            "evaluation": old.get("evaluation")}
    suite.write_json(path, new)
    from . import confirm
    stale = os.path.join(run_dir, confirm.FILE)   # confirmed with the old scores: the rebuild confirms again
    if os.path.exists(stale):
        os.remove(stale)
    return new


def rescore(out, models=None, log=print, score=True):
    """Re-score the runs of the bench in ``out`` (only ``models`` if given) and rebuild every experiment
    (``score=False``: only rebuild, from the runs' summaries as they are)."""
    results = {}
    for name in suite.EXPERIMENTS + (suite.SWEEP,):
        path = os.path.join(out, "%s.json" % name)
        if os.path.exists(path):
            with open(path) as f:
                results[name] = json.load(f)
    if not results:
        raise ConfigError("no experiment JSON in %r" % out)
    first = next(iter(results.values()))
    records = {}
    for data in results.values():
        for run in data["runs"]:
            records[run["run_dir"]] = run
    chosen = [r for r in records.values() if score and (models is None or r["model"] in models)]
    for run in chosen:
        run_dir = os.path.join(out, run["run_dir"])
        log("re-scoring %s" % run["run_dir"])
        proc = subprocess.run([sys.executable, "-m", "bench.rescore", run_dir], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ConfigError("re-scoring %s failed: %s" % (run_dir, proc.stderr[-2000:]))

    calibration = first["profile"]["calibration"]
    seconds = {m: rec["seconds_per_iteration"] for m, rec in calibration.items()}
    for skipped in first.get("skipped", []):
        if "seconds_per_iteration" in skipped:
            seconds[skipped["model"]] = skipped["seconds_per_iteration"]

    def recorded(model, size, batch, context):
        return seconds[model][context]

    def finished(spec, run_dir, desc, position, leave):
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        old = records[os.path.relpath(run_dir, out)]
        summary["command"], summary["wall_s"] = old["command"], old.get("wall_s")
        summary["resumed"] = old.get("resumed", False)
        return summary

    preset = presets.for_result(first)
    profile = profiles.Profile(first["profile"]["name"], tuple(
        profiles.Device(d["context"], d["slowdown"], d.get("label", "")) for d in first["profile"]["devices"]))
    models_run = tuple(dict.fromkeys([m for m in preset.models if m in seconds]
                                     + [m for m in seconds if m not in preset.models]))
    budget = None if first.get("time_budgets_s") else first["time_budget_s"]  # None: the preset's per model
    return suite.run_suite(tuple(results), preset, profile, out, models=models_run, budget=budget,
                           seeds=first.get("seeds") or [first["seed"]], command=first["command"], measure=recorded,
                           run=finished,
                           log=log, engine=first.get("engine", "cluster"), jobs=first.get("jobs", 1),
                           wall_s=first.get("suite_wall_s"),
                           only={os.path.basename(r) for r in records})


def main(argv=None):
    """``python -m bench.rescore RUN_DIR``: re-score one run (the child process of :func:`rescore`)."""
    run_dir = (argv if argv is not None else sys.argv[1:])[0]
    new = rescore_run(run_dir)
    print("%s: final accuracy %.4f" % (run_dir, new["final_accuracy"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
