"""ESync's aggregation options end to end on the real cluster (scheduler, server,
State Server, three workers on 127.0.0.1): the count exchange through the
control key, the weighted pushes, the servers' outer Nesterov momentum and the
local-step cap; and ESync's checkpoint and resume with a new State Server."""
import hashlib
import json
import os

import numpy as np
import pytest

from mxhet.policy import aggregation as agg

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)

ROUNDS = 3
GLOBAL_LR = 0.5


def _run(tmp_path, child_pids, *options, slowdown="1,1,4"):
    out = tmp_path / "esync"
    proc = launch(["-n", "3", "-s", "1", "--sync", "esync", "--slowdown", slowdown, "--base-iter", "0.05"],
                  train_command(out, "--max-rounds", str(ROUNDS), "--time-budget", "120", "--dump-rounds",
                                str(ROUNDS), "--global-lr", str(GLOBAL_LR), *options),
                  tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not child_pids.alive()
    summary = load_summary(out)
    workers = {w["slot"]: w for w in summary["workers"]}
    assert sorted(workers) == [0, 1, 2]
    for w in workers.values():
        assert w["rounds"] == ROUNDS and len(w["local_iters"]) == ROUNDS
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    return out, workers


def _dump(out, slot, t):
    return np.load(os.path.join(str(out), "dump", "slot%d_round%d.npz" % (slot, t)))


def _digests(arrays):
    return sorted(hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for a in arrays)


def _round(out, t):
    dumps = [_dump(out, s, t) for s in range(3)]
    n_keys = len([k for k in dumps[0].files if k.startswith("after_")])
    assert n_keys > 0
    rows = []
    for i in range(n_keys):
        before = [d["before_%d" % i] for d in dumps]
        after = [d["after_%d" % i] for d in dumps]
        for b, a in zip(before[1:], after[1:]):   # every worker holds the same global model
            np.testing.assert_array_equal(b, before[0])
            np.testing.assert_array_equal(a, after[0])
        rows.append((before[0], [d["delta_%d" % i] for d in dumps], after[0]))
    return rows


def test_weighted_pushes_and_a_local_step_cap_on_the_real_cluster(tmp_path, child_pids):
    """Weighted pushes, with the local-step cap and delayed ACKs in the same job (the cap acts on the local
    loop, the weights on the push; one launch checks both)."""
    out, workers = _run(tmp_path, child_pids, "--aggregation", "weighted", "--max-local-steps", "2",
                        "--ack", "delayed", slowdown="1,1,10")
    for slot in (0, 1):    # uncapped they fill the slowest's 10 x 0.05 s with about 8
        assert max(workers[slot]["local_iters"]) == 2, workers[slot]["local_iters"]
    assert workers[2]["local_iters"] == [1] * ROUNDS
    for t in range(ROUNDS):
        steps = [workers[s]["local_iters"][t] for s in range(3)]
        counts = [agg.count_vector(k, 64 * k) for k in steps]
        totals = np.sum(counts, axis=0).tolist()
        factors = [agg.push_scale("weighted", c, totals, 3) for c in counts]
        assert sum(factors) == pytest.approx(3.0)      # the weights c_i = f_i / n sum to 1
        for before, pushed, after in _round(out, t):   # the capped, weighted deltas are averaged like any others
            np.testing.assert_allclose(after, before + GLOBAL_LR * np.mean(pushed, axis=0), rtol=1e-5, atol=1e-6)
    fast = np.mean(workers[0]["local_iters"] + workers[1]["local_iters"])
    assert fast > np.mean(workers[2]["local_iters"])   # the weights were not all equal


BIGARRAY_BOUND = 5000
"""Arrays of this many elements or more are split over the servers (MXNet's
MXNET_KVSTORE_BIGARRAY_BOUND, 1e6 by default): the small CNN then has both kinds."""


@pytest.mark.timeout(600)   # two jobs one after the other
def test_normalized_with_outer_nesterov_keeps_momentum_on_the_servers_through_a_checkpoint_and_resume(
        tmp_path, child_pids, monkeypatch):
    """The first job's rounds check normalized pushes and the servers' outer Nesterov step against numpy
    (split and whole arrays, on two servers); its checkpoint must hold that momentum and the global model,
    and the resumed job (new servers and State Server) must start from that model and apply that momentum
    in its first round. (ESync's resume, also without an outer optimizer: the same restore of the model.)"""
    import mxnet as mx
    monkeypatch.setenv("MXNET_KVSTORE_BIGARRAY_BOUND", str(BIGARRAY_BOUND))
    lr, mu = 0.7, 0.9
    ckpt = tmp_path / "ckpt"
    for name, rounds, extra in (("first", ROUNDS, ()), ("second", ROUNDS + 1, ("--resume",))):
        (tmp_path / name).mkdir()
        proc = launch(["-n", "3", "-s", "2", "--sync", "esync", "--slowdown", "1,1,4", "--base-iter", "0.05"],
                      train_command(tmp_path / name / "out", "--max-rounds", str(rounds), "--time-budget", "300",
                                    "--checkpoint-dir", str(ckpt), "--checkpoint-every", str(ROUNDS),
                                    "--dump-rounds", str(ROUNDS + 1), "--global-lr", str(GLOBAL_LR),
                                    "--aggregation", "normalized", "--outer-optimizer", "nesterov",
                                    "--outer-lr", str(lr), "--outer-momentum", str(mu), *extra),
                      tmp_path / name, child_pids)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert not child_pids.alive()
    first = tmp_path / "first" / "out"
    workers = load_summary(first)["workers"]
    assert sorted(w["slot"] for w in workers) == [0, 1, 2]
    assert all(w["rounds"] == ROUNDS and len(w["local_iters"]) == ROUNDS for w in workers), workers
    assert len({w["final_model_sha256"] for w in workers}) == 1
    with open(os.path.join(str(first), "worker-0.json")) as f:
        assert json.load(f)["rounds"] == ROUNDS

    # the servers' momentum over the first job's rounds (numpy reference), each round's step checked
    momentum = None
    moved_by_momentum = False
    for t in range(ROUNDS):
        rows = _round(first, t)
        if momentum is None:
            momentum = [np.zeros_like(before, dtype="f8") for before, _, _ in rows]
        for i, (before, pushed, after) in enumerate(rows):
            combined = GLOBAL_LR * np.mean(np.asarray(pushed, dtype="f8"), axis=0)
            expected, momentum[i] = agg.nesterov_step(before.astype("f8"), momentum[i], combined, lr, mu)
            np.testing.assert_allclose(after, expected, rtol=1e-4, atol=1e-5)
            if t > 0 and not np.allclose(after, before + lr * (1 + mu) * combined, atol=1e-6):
                moved_by_momentum = True   # the state of earlier rounds counted
    assert moved_by_momentum
    n_keys = len(momentum)
    saved = mx.nd.load(str(ckpt / ("round-%08d" % ROUNDS) / "slot0.mode.params"))
    assert len(saved) == n_keys
    sizes = [v.size for v in saved.values()]
    assert max(sizes) >= BIGARRAY_BOUND > min(sizes)   # split over the two servers, and whole on one
    for i in range(n_keys):   # the worker's mirror is the servers' momentum
        np.testing.assert_allclose(saved["outer_momentum_%d" % i].asnumpy(), momentum[i], rtol=1e-3, atol=1e-5)
    # the resumed job (new servers, a new State Server) trains only the rounds after the checkpoint's, from
    # its global model: the first job's last, parameter for parameter
    second = tmp_path / "second" / "out"
    assert all(w["rounds"] == ROUNDS + 1 and len(w["local_iters"]) == 1 for w in load_summary(second)["workers"])
    saved_global = mx.nd.load(str(ckpt / ("round-%08d" % ROUNDS) / "global.params"))
    assert len(saved_global) == n_keys
    for slot in range(3):
        ended, resumed = _dump(first, slot, ROUNDS - 1), _dump(second, slot, ROUNDS)
        for i in range(n_keys):
            np.testing.assert_array_equal(resumed["before_%d" % i], ended["after_%d" % i])
        assert _digests(resumed["before_%d" % i] for i in range(n_keys)) == \
            _digests(a.asnumpy() for a in saved_global.values())
        assert not os.path.exists(os.path.join(str(second), "dump", "slot%d_round%d.npz" % (slot, ROUNDS - 1)))
    # and its first round applies the checkpoint's momentum on the new servers
    for i, (before, pushed, after) in enumerate(_round(second, ROUNDS)):
        combined = GLOBAL_LR * np.mean(np.asarray(pushed, dtype="f8"), axis=0)
        expected, _ = agg.nesterov_step(before.astype("f8"), momentum[i], combined, lr, mu)
        np.testing.assert_allclose(after, expected, rtol=1e-4, atol=1e-5)
