"""Confirmed time to target: a crossing counts only when it holds on the whole test set.

During a run the global model's snapshots are scored on a cheap subset of the
test set (``--eval-samples``, 1,000 images: a standard error of about 0.013
near 0.8), so a single lucky snapshot can "reach" the target. After the run,
:func:`confirm_run` takes the curve's candidate crossings in time order, scores
each candidate's snapshot on all 10,000 test images through the evaluation
entry point every run uses (:func:`mxhet.train.evaluate_run`, precise BN
included, on a network built for it alone), and stops at the first one that
reaches the target there. The final point is scored on all images already and
needs no second pass. Everything tried is recorded in the run's
``confirmation.json`` (so ``--resume`` and rebuilds do not score again):

* ``candidates``: every candidate tried, ``{index, time_s, curve_accuracy, full_accuracy}``;
* ``time_to_target_s`` / ``accuracy``: the first confirmed one's time and its
  full-test-set accuracy (None when no candidate held: the run did not reach
  the target, and is reported as censored at its training time);
* ``curve_time_to_target_s``: the unconfirmed first crossing, for comparison.

Scoring runs in a child process per run (``python -m bench.confirm RUN_DIR``),
so every model gets a fresh network and fresh parameter names.
"""
import json
import os
import subprocess
import sys

from mxhet.errors import ConfigError

FILE = "confirmation.json"
"""The confirmation record in a run's directory."""


def candidates(curve, target):
    """Indices of the curve points ``[[seconds, accuracy], ...]`` at or above ``target``, in time order."""
    return [i for i, (_, accuracy) in enumerate(curve) if accuracy >= target]


def confirm(summary, score, target=None):
    """The confirmation record of a run (pure: ``score(index) -> accuracy on the whole test set``).

    Args:
        summary: the run's summary.json (``curve``, ``final_accuracy``, ``evaluation``,
            ``train_time_s``, ``time_to_target_s``).
        score: scores the snapshot of curve point ``index`` on every test image.
        target: the accuracy to confirm (default: the run's own target).
    """
    target = summary["target_accuracy"] if target is None else target
    curve = summary["curve"]
    evaluation = summary.get("evaluation") or {}
    last = len(curve) - 1
    tried, confirmed = [], None
    for i in candidates(curve, target):
        # the final point was scored on the whole test set already (its curve value may be rounded)
        full = summary["final_accuracy"] if i == last else float(score(i))
        tried.append({"index": i, "time_s": curve[i][0], "curve_accuracy": curve[i][1], "full_accuracy": full})
        if full >= target:
            confirmed = tried[-1]
            break
    return {"target_accuracy": target, "test_samples": evaluation.get("final_samples"),
            "curve_samples": evaluation.get("curve_samples", summary.get("eval_samples")),
            "candidates": tried,
            "time_to_target_s": confirmed and confirmed["time_s"],
            "accuracy": confirmed and confirmed["full_accuracy"],
            "curve_time_to_target_s": summary.get("time_to_target_s"),
            "final_accuracy": summary["final_accuracy"], "train_time_s": summary["train_time_s"],
            "curve_points": len(curve)}


def confirm_run(run_dir, target=None):
    """Confirm the run in ``run_dir`` (in this process) and write its ``confirmation.json``; returns it.

    Raises:
        ConfigError: when the run's snapshots do not match its curve (e.g. they were deleted).
    """
    import mxnet as mx

    from mxhet import train

    from .rescore import evaluation_setup, snapshot_paths
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    target = summary["target_accuracy"] if target is None else target
    last = len(summary["curve"]) - 1
    state = {}

    def score(index):
        if not state:   # only when some candidate needs it: building the network and the test set costs
            snapshots = snapshot_paths(run_dir, summary)
            state.update(zip(("args", "config", "net", "train_set"), evaluation_setup(summary, run_dir)),
                         snapshots=snapshots)
        if index == last:
            raise ValueError("the final point needs no confirmation")
        t = summary["curve"][index][0]
        # one snapshot: evaluate_run scores its last (here: only) snapshot on every test image
        scored = train.evaluate_run(state["args"], state["config"], summary["mode"],
                                    [(t, state["snapshots"][index])], mx.cpu(), summary["input_size"],
                                    summary["train_time_s"], [], train_set=state["train_set"],
                                    eval_net=state["net"])
        return scored["final_accuracy"]

    record = confirm(summary, score, target)
    _write(os.path.join(run_dir, FILE), record)
    return record


def _write(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def recorded(run_dir, summary):
    """``--report-only``'s confirmation: the one the run recorded, else an error (scoring costs CPU).

    Raises:
        ConfigError: when the run has no confirmation of its own yet.
    """
    record = load(run_dir, summary)
    if record is None:
        raise ConfigError("%s finished but is not confirmed yet (--report-only scores nothing)" % run_dir)
    return record


def load(run_dir, summary=None):
    """The run's confirmation record, or None when there is none or it belongs to another run
    (a run made again since: its curve differs)."""
    path = os.path.join(run_dir, FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        record = json.load(f)
    if summary is not None and (record.get("curve_points") != len(summary["curve"])
                                or record.get("train_time_s") != summary["train_time_s"]):
        return None
    return record


def ensure(run_dir, summary, target=None, timeout=7200):
    """The run's confirmation: the recorded one when it is this run's, else computed now in a child process.

    Raises:
        ConfigError: when scoring failed (its error output is included).
    """
    record = load(run_dir, summary)
    if record is not None and (target is None or record["target_accuracy"] == target):
        return record
    argv = [sys.executable, "-m", "bench.confirm", run_dir] + (["--target", repr(target)] if target else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ConfigError("confirming %s on the whole test set failed: %s" % (run_dir, proc.stderr[-2000:]))
    return load(run_dir)


def main(argv=None):
    """``python -m bench.confirm RUN_DIR [--target ACC]``: confirm one run (the child process of :func:`ensure`)."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m bench.confirm", description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--target", type=float, default=None, help="accuracy to confirm (default: the run's target)")
    args = p.parse_args(argv)
    record = confirm_run(args.run_dir, args.target)
    print("%s: time to %.2f on %s test images: %s (%d candidate(s) tried; on the curve: %s)" % (
        args.run_dir, record["target_accuracy"], record["test_samples"],
        "%.1f s" % record["time_to_target_s"] if record["time_to_target_s"] is not None else "not reached",
        len(record["candidates"]), record["curve_time_to_target_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
