"""Checkpoints of a training job, for ``python -m mxhet.train --checkpoint-dir DIR [--resume]``.

One directory per round, ``DIR/round-00000012/``, holding

* ``global.params``: the global model (written by the worker of rank 0);
* ``slot<i>.states``: worker i's local optimizer state (``Trainer.save_states``);
* ``slot<i>.json``: worker i's data position, counters, seeds and mode state
  (e.g. ESync's round, which it gives the State Server when it registers).

Every file is written to a temporary name and renamed, so a job killed at any
moment leaves either the complete file or none. A round is resumable when all
of its files exist; resuming takes the newest such round. The two newest
rounds are kept.

Checkpoints need modes in which all workers finish the same rounds together
(``esync``, ``sync``, ``localsgd``, and ``local``).
"""
import glob
import json
import os
import re

from .errors import ConfigError

KEEP = 2
MODE_ARRAYS = "slot%d.mode.params"
"""A mode's arrays (``checkpoint_arrays()``), when it has any."""
_ROUND_RE = re.compile(r"round-(\d{8})$")


def round_dir(root, round_):
    return os.path.join(root, "round-%08d" % round_)


def _replace(tmp, path):
    os.replace(tmp, path)


def _tmp(path):
    return "%s.tmp.%d" % (path, os.getpid())


def save_worker(root, round_, slot, trainer, iterator, seed):
    """Write worker ``slot``'s state at the end of ``round_``; returns the round directory."""
    directory = round_dir(root, round_)
    os.makedirs(directory, exist_ok=True)
    states = os.path.join(directory, "slot%d.states" % slot)
    trainer.save_states(_tmp(states))
    _replace(_tmp(states), states)
    arrays = trainer.mode.checkpoint_arrays() if hasattr(trainer.mode, "checkpoint_arrays") else {}
    if arrays:  # e.g. ESync's outer momentum; written before the record that completes the round
        import mxnet as mx
        path = os.path.join(directory, MODE_ARRAYS % slot)
        mx.nd.save(_tmp(path), arrays)
        _replace(_tmp(path), path)
    record = {"round": round_, "slot": slot, "seed": seed, "iterator": iterator.state_dict(),
              "mode": trainer.mode.checkpoint_state()}
    path = os.path.join(directory, "slot%d.json" % slot)
    with open(_tmp(path), "w") as f:
        json.dump(record, f)
    _replace(_tmp(path), path)
    return directory


def save_global(root, round_, trainer):
    path = os.path.join(round_dir(root, round_), "global.params")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    trainer.save_global(_tmp(path))
    _replace(_tmp(path), path)


def complete_rounds(root, num_slots):
    """Rounds whose every file is there, newest first."""
    rounds = []
    for directory in glob.glob(os.path.join(root, "round-*")):
        m = _ROUND_RE.search(directory)
        if not m:
            continue
        needed = ["global.params"] + ["slot%d.%s" % (s, ext) for s in range(num_slots) for ext in ("json", "states")]
        if all(os.path.exists(os.path.join(directory, name)) for name in needed):
            rounds.append(int(m.group(1)))
    return sorted(rounds, reverse=True)


def prune(root, num_slots, keep=KEEP):
    """Remove complete rounds older than the ``keep`` newest ones, and partial ones older than those."""
    complete = complete_rounds(root, num_slots)
    if len(complete) <= keep:
        return
    oldest_kept = complete[keep - 1]
    for directory in glob.glob(os.path.join(root, "round-*")):
        m = _ROUND_RE.search(directory)
        if m and int(m.group(1)) < oldest_kept:
            for name in os.listdir(directory):
                os.remove(os.path.join(directory, name))
            os.rmdir(directory)


def load(root, slot, num_slots):
    """The newest complete round: ``(round, directory, this worker's record)``.

    Raises:
        ConfigError: when ``root`` holds no complete round for ``num_slots`` workers.
    """
    rounds = complete_rounds(root, num_slots)
    if not rounds:
        raise ConfigError("no complete checkpoint for %d workers in %r (it needs global.params and every "
                          "worker's slot<i>.json and slot<i>.states)" % (num_slots, root))
    directory = round_dir(root, rounds[0])
    with open(os.path.join(directory, "slot%d.json" % slot)) as f:
        record = json.load(f)
    arrays = os.path.join(directory, MODE_ARRAYS % slot)
    if os.path.exists(arrays):  # handed to the mode's restore_state with its record
        import mxnet as mx
        record["mode"]["arrays"] = mx.nd.load(arrays)
    return rounds[0], directory, record
