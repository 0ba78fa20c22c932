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


SLOW = 20
BASE_ITER_S = 0.075
LR = 0.05
ROUNDS = 4


@pytest.fixture(scope="module")
def esync_job(tmp_path_factory, module_child_pids):
    """One ESync job for the tests below: 4 workers, slots 0 and 1 equally slow (20 x 0.075 s = 1.5 s an
    iteration), 2 and 3 fast, iteration times pinned (--base-iter): the slow iterations leave the fast
    devices room for several of theirs whatever the machine's load, as long as one small-CNN step takes
    under 0.5 s. Every round dumped. Returns ``(out, summary)``."""
    tmp_path = tmp_path_factory.mktemp("esync")
    out = tmp_path / "esync"
    proc = launch(["-n", "4", "-s", "1", "--sync", "esync", "--slowdown", "%d,%d,1,1" % (SLOW, SLOW),
                   "--base-iter", str(BASE_ITER_S)],
                  train_command(out, "--max-rounds", str(ROUNDS), "--time-budget", "120", "--dump-rounds",
                                str(ROUNDS), "--global-lr", str(GLOBAL_LR), "--lr", str(LR)),
                  tmp_path, module_child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not module_child_pids.alive()
    return out, load_summary(out)


def test_esync_heterogeneous_rounds(esync_job):
    out, summary = esync_job
    workers = {w["slot"]: w for w in summary["workers"]}
    assert sorted(workers) == [0, 1, 2, 3]
    assert sorted(w["rank"] for w in workers.values()) == [0, 1, 2, 3]
    for w in workers.values():
        assert w["rounds"] == ROUNDS and len(w["local_iters"]) == ROUNDS
        assert w["bytes_pushed"] > 0 and w["samples"] == 64 * sum(w["local_iters"])
    slow = np.mean(workers[0]["local_iters"] + workers[1]["local_iters"])
    fast = np.mean(workers[2]["local_iters"] + workers[3]["local_iters"])
    assert slow <= 1.5, (workers[0]["local_iters"], workers[1]["local_iters"])
    assert fast >= 3 * slow, (workers[2]["local_iters"], workers[3]["local_iters"])

    # After every round all workers hold the same global model w_t+1 = w_t + ε·mean(Δ_i).
    for t in range(ROUNDS):
        dumps = _dumps(out, range(4), t)
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
    last = _dumps(out, [0], ROUNDS - 1)[0]
    digest = hashlib.sha256()
    for i in range(len([k for k in last.files if k.startswith("after_")])):
        digest.update(np.ascontiguousarray(last["after_%d" % i]).tobytes())
    assert summary["curve"] and {w["final_model_sha256"] for w in workers.values()} == {digest.hexdigest()}


def _gradient(net, x, y):
    """The mean gradient of the softmax cross-entropy over one batch, per parameter (sorted by name)."""
    from mxnet import autograd, gluon
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    return [p.grad().asnumpy() / len(y) for _, p in sorted(net.collect_params().items())]


def test_esync_first_step_is_a_test_batch_whose_gradient_is_not_applied(esync_job):
    """Algorithm 1 line 3 on the real cluster: two equally slow devices (pinned
    with --base-iter) both report their test batch with k = 0, so both do one
    local iteration in round 0 (before, the first to report ran two while the
    other waited), and the delta a slow device pushes in round 0 is one SGD
    step from w_0 on its third batch (the first went to shape inference, the
    second to the test batch, whose gradient was dropped). The pushed delta is
    the worker's own (--global-lr scales only the servers' step)."""
    import mxnet as mx

    from mxhet import data, models

    out, summary = esync_job
    workers = {w["slot"]: w for w in summary["workers"]}
    assert [workers[slot]["local_iters"][0] for slot in (0, 1)] == [1, 1], [w["local_iters"] for w in workers.values()]
    assert min(workers[slot]["test_batch_s"] for slot in (0, 1)) >= SLOW * BASE_ITER_S
    for w in workers.values():
        assert w["iterations"] == sum(w["local_iters"]) and w["samples"] == 64 * w["iterations"]
        assert w["compute_s"] >= w["test_batch_s"] > 0

    images, labels = data.load_fashion_mnist("train")
    net = models.get_model("smallcnn", classes=10)
    net.initialize()
    dumps = _dumps(out, [0, 1], 0)
    keys = len([k for k in dumps[0].files if k.startswith("before_")])
    for slot, dump in zip((0, 1), dumps):
        batches = data.ShardIterator(images, labels, data.partition(labels, 4, slot, seed=0), 64, seed=1000 * slot)
        shapes, test, first = next(batches), next(batches), next(batches)
        net(shapes[0])
        params = [p for _, p in sorted(net.collect_params().items())]
        assert len(params) == keys
        for i, p in enumerate(params):
            p.set_data(mx.nd.array(dump["before_%d" % i]))   # w_0
        g_first = _gradient(net, *first)
        for i in range(keys):
            np.testing.assert_allclose(dump["delta_%d" % i], -LR * g_first[i], rtol=1e-4, atol=1e-7)
        # with the test batch's gradient applied the delta would differ by about lr x its gradient
        g_test = _gradient(net, *test)
        assert sum(np.abs(dump["delta_%d" % i] + LR * (g_first[i] + g_test[i])).sum() for i in range(keys)) > \
            100 * sum(np.abs(dump["delta_%d" % i] + LR * g_first[i]).sum() for i in range(keys))


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
