"""ESync and Sync end to end: real scheduler, server, State Server and workers on 127.0.0.1."""
import glob
import hashlib
import os

import numpy as np
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)

GLOBAL_LR = 0.5


def _dumps(metrics_out, slots, round_):
    return [np.load(os.path.join(str(metrics_out), "dump", "slot%d_round%d.npz" % (s, round_))) for s in slots]


def test_esync_heterogeneous_rounds(tmp_path, child_pids):
    out = tmp_path / "esync"
    # Iteration times pinned (--base-iter): the slow device's 1.5 s iterations leave the fast ones room for
    # several of theirs whatever the machine's load, as long as one small-CNN step takes under 0.5 s.
    proc = launch(["-n", "3", "-s", "1", "--sync", "esync", "--slowdown", "1,1,10", "--base-iter", "0.15"],
                  train_command(out, "--max-rounds", "4", "--time-budget", "120", "--dump-rounds", "4",
                                "--global-lr", str(GLOBAL_LR)),
                  tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not child_pids.alive()
    summary = load_summary(out)
    workers = {w["slot"]: w for w in summary["workers"]}
    assert sorted(workers) == [0, 1, 2]
    assert sorted(w["rank"] for w in workers.values()) == [0, 1, 2]
    for w in workers.values():
        assert w["rounds"] == 4 and len(w["local_iters"]) == 4
        assert w["bytes_pushed"] > 0 and w["samples"] == 64 * sum(w["local_iters"])
    slow = np.mean(workers[2]["local_iters"])
    fast = np.mean(workers[0]["local_iters"] + workers[1]["local_iters"])
    assert slow <= 1.5, workers[2]["local_iters"]
    assert fast >= 3 * slow, (workers[0]["local_iters"], workers[1]["local_iters"])

    # After every round all workers hold the same global model w_t+1 = w_t + ε·mean(Δ_i).
    for t in range(4):
        dumps = _dumps(out, [0, 1, 2], t)
        n_keys = len([k for k in dumps[0].files if k.startswith("after_")])
        assert n_keys > 0
        for i in range(n_keys):
            before = [d["before_%d" % i] for d in dumps]
            after = [d["after_%d" % i] for d in dumps]
            deltas = [d["delta_%d" % i] for d in dumps]
            for b, a in zip(before[1:], after[1:]):
                np.testing.assert_array_equal(b, before[0])
                np.testing.assert_array_equal(a, after[0])
            expected = before[0] + GLOBAL_LR * np.mean(deltas, axis=0)
            np.testing.assert_allclose(after[0], expected, rtol=1e-5, atol=1e-6)
        if t > 0:  # the model a round starts from is the one the previous round ended with
            prev = _dumps(out, [0], t - 1)[0]
            np.testing.assert_array_equal(dumps[0]["before_0"], prev["after_0"])
    # Four rounds are too few to learn; what they must give is one model: every worker ends with the
    # global model of the last round, w_4.
    last = _dumps(out, [0], 3)[0]
    digest = hashlib.sha256()
    for i in range(len([k for k in last.files if k.startswith("after_")])):
        digest.update(np.ascontiguousarray(last["after_%d" % i]).tobytes())
    assert summary["curve"] and {w["final_model_sha256"] for w in workers.values()} == {digest.hexdigest()}


def test_sync_keeps_workers_identical(tmp_path, child_pids):
    out = tmp_path / "sync"
    proc = launch(["-n", "2", "-s", "1", "--sync", "sync", "--slowdown", "1,3"],
                  train_command(out, "--max-rounds", "5", "--time-budget", "120", "--dump-rounds", "5"),
                  tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = load_summary(out)
    for w in summary["workers"]:
        assert w["rounds"] == 5
    files = sorted(glob.glob(str(out / "dump" / "slot0_round*.npz")))
    assert len(files) == 5
    previous = None
    for t in range(5):
        a, b = _dumps(out, [0, 1], t)
        for key in a.files:
            if key != "loss":  # each worker's own batch
                np.testing.assert_array_equal(a[key], b[key])
        if previous is not None:  # the model moves every step
            assert not np.array_equal(previous, a["after_0"])
        previous = a["after_0"]
