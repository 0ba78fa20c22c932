"""A script that creates its own dist kvstore, as MXNet's distributed examples
do (``store = kv.create('dist')`` for ``store.rank`` and ``store.num_workers``,
``kvstore=store`` given to the Trainer), under ``mxhet-launch``.

A second dist kvstore in one worker process would register with PS-LITE again
and wait forever in its start-up barrier: mxhet uses the script's kvstore when
its servers merge pushes as the mode needs, and refuses it otherwise before any
communication (the job fails at once, not at ``--timeout``).
"""
import json
import sys
import textwrap

import pytest

from .jobs import ROOT, launch

pytestmark = pytest.mark.timeout(300)

# MXNet's example/distributed_training/cifar10_dist.py (split_and_load over the worker's contexts), CPU
# contexts, Fashion-MNIST from local files; the only mxhet line is the Trainer's (plus a stop condition:
# every worker leaves the loop together)
SCRIPT = textwrap.dedent('''
    import json, os, sys
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon, kv
    import mxhet
    from mxhet.data import load_fashion_mnist
    from mxhet.models import get_model

    def mine(arg):   # an argument for every worker, or "a,b,c": one per slot
        parts = arg.split(",")
        return parts[int(os.environ["MXHET_SLOT"])] if len(parts) > 1 else arg

    store = kv.create(mine(sys.argv[1]))
    out_dir, steps, given = sys.argv[2], int(sys.argv[3]), mine(sys.argv[4]) == "given"
    ctx = [mx.cpu(i) for i in range(int(mine(sys.argv[5])))]

    class SplitSampler(gluon.data.sampler.Sampler):
        """The part of the data set of worker part_index of num_parts (MXNet's example)."""
        def __init__(self, length, num_parts=1, part_index=0):
            self.part_len = length // num_parts
            self.start = self.part_len * part_index
        def __iter__(self):
            indices = list(range(self.start, self.start + self.part_len))
            np.random.shuffle(indices)
            return iter(indices)
        def __len__(self):
            return self.part_len

    def dataset(split):
        images, labels = load_fashion_mnist(split)
        return gluon.data.ArrayDataset(mx.nd.array(images[:, None] / 255.0), mx.nd.array(labels))

    train = dataset("train")
    train_data = gluon.data.DataLoader(train, batch_size=32, last_batch="discard",
                                       sampler=SplitSampler(len(train), store.num_workers, store.rank))
    mx.random.seed(1)
    net = get_model("smallcnn")
    net.initialize(mx.init.Xavier(), ctx=ctx)
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05},
                            **({"kvstore": store} if given else {}))
    trainer.set_stop_condition(lambda stats: stats.rounds >= steps)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    while not trainer.should_stop:
        for data, label in train_data:
            data_parts = gluon.utils.split_and_load(data, ctx)
            label_parts = gluon.utils.split_and_load(label, ctx)
            with autograd.record():
                losses = [loss_fn(net(x), y) for x, y in zip(data_parts, label_parts)]
            for loss in losses:
                loss.backward()
            trainer.step(data.shape[0])
            if trainer.should_stop:
                break
    trainer.finish()
    test_images, test_labels = load_fashion_mnist("test")
    x, y = mx.nd.array(test_images[:1000, None] / 255.0), test_labels[:1000]
    accuracy = float((net(x.as_in_context(ctx[0])).argmax(axis=1).asnumpy() == y).mean())
    same = all((p.data(c).asnumpy() == p.data(ctx[0]).asnumpy()).all()
               for p in net.collect_params().values() for c in ctx)
    with open(os.path.join(out_dir, "rank%d.json" % store.rank), "w") as f:
        json.dump({"store_rank": store.rank, "trainer_rank": trainer.rank, "num_workers": store.num_workers,
                   "slot": int(os.environ["MXHET_SLOT"]), "slowdown": float(os.environ["MXHET_SLOWDOWN"]),
                   "trainer_num_workers": trainer.num_workers, "accuracy": accuracy,
                   "contexts": len(ctx), "copies_equal": bool(same)}, f)
    trainer.close()
''')


def _per_slot(value, convert=str):
    """A value for every worker, or a tuple of one per slot: the script's argument."""
    return ",".join(map(convert, value)) if isinstance(value, tuple) else convert(value)


def _run(tmp_path, child_pids, mode, store_type, given=True, steps=60, slowdown="1,1,2", contexts=1):
    """``store_type``, ``given`` and ``contexts``: one for every worker, or a tuple of one per slot."""
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    return launch(["-n", "3", "-s", "1", "--sync", mode, "--slowdown", slowdown, "--base-iter", "0.03",
                   "--timeout", "200"],
                  [sys.executable, str(script), _per_slot(store_type), str(tmp_path), str(steps),
                   _per_slot(given, lambda g: "given" if g else "alive"), _per_slot(contexts)], tmp_path, child_pids,
                  timeout=240)


def _results(tmp_path):
    return [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(3)]


@pytest.mark.parametrize("mode, store_type, given, contexts, rounds", [
    ("sync", "dist", True, 2, 60),
    # each worker its own way, in one job: slot 0 'dist', which under the launcher is the dist_async its
    # servers need (kvstore_alias), one context; slot 1 created for store.rank only, not given to the Trainer:
    # found, used; slot 2 a dist_async given to the Trainer
    pytest.param("esync", ("dist", "dist_async", "dist_async"), (True, False, True), (1, 2, 2), 60,
                 id="esync-dist,dist_async,dist_async-given,alive,given-1,2,2-60"),
    ("localsgd", "dist_async", True, 2, 8),   # 8 local steps a round: 64 iterations; its servers add every push
    ("async", "dist_async", True, 2, 60),
])
def test_the_scripts_kvstore_is_used_when_it_fits_the_mode(tmp_path, child_pids, mode, store_type, given, contexts,
                                                           rounds):
    """With two contexts per worker, the gradients are summed over them, the
    mode's protocol runs once per worker and both contexts end with the weights."""
    proc = _run(tmp_path, child_pids, mode, store_type, given, steps=rounds, contexts=contexts)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "are ignored" not in proc.stderr   # no warning: the script's kvstore carried the mode
    results = _results(tmp_path)
    for r in results:
        assert r["trainer_rank"] == r["store_rank"] and r["num_workers"] == r["trainer_num_workers"] == 3
        assert r["store_rank"] == r["slot"], r   # store.rank names the device --slowdown named (one host)
        expected = contexts[r["slot"]] if isinstance(contexts, tuple) else contexts
        assert r["contexts"] == expected and r["copies_equal"], r
    assert sorted(r["store_rank"] for r in results) == [0, 1, 2]
    assert [r["slowdown"] for r in results] == [1.0, 1.0, 2.0]   # rank 2 is the slow worker
    # every worker's shard (SplitSampler over store.rank) trained the one global model
    assert min(r["accuracy"] for r in results) > 0.35, [r["accuracy"] for r in results]   # chance: 0.1
    assert not child_pids.alive()


def test_a_kvstore_that_does_not_fit_the_mode_is_refused_before_any_communication(tmp_path, child_pids):
    # kv.create('dist_sync') (explicit, so kept) put the servers in synchronous mode; async needs them asynchronous
    proc = _run(tmp_path, child_pids, "async", "dist_sync")
    assert proc.returncode == 1, proc.stderr[-4000:]   # not 124: no worker waits for --timeout
    assert "sync mode 'async' needs a 'dist_async' kvstore, but this worker already created a 'dist_sync' one" \
        in proc.stderr, proc.stderr[-4000:]
    assert not list(tmp_path.glob("rank*.json"))
    assert not child_pids.alive()

