"""Snapshots are scored on a network of their own, never on a training replica (issue 36).

The simulator's replicas train (they were static_alloc/static_shape until the same race hit them);
a snapshot scored through the evaluation path must score what the same snapshot
scores in a freshly built network, with the same precise-BatchNorm protocol.
"""
import glob
import os

import mxnet as mx
import pytest

from mxhet import data, evaluation, models
from mxhet.errors import ConfigError
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)


def _fresh_score(path, model, input_size, batch_size, limit):
    """``path``'s accuracy on the first ``limit`` test images in a network built here, never trained."""
    net = models.get_model(model, classes=10, input_size=input_size)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 1, input_size, input_size)))
    loaded = {name.split("_", 1)[1]: arr for name, arr in mx.nd.load(path).items()}
    for name, p in net.collect_params().items():
        p.set_data(loaded[name.split("_", 1)[1]])
    images, labels = data.load_fashion_mnist("train")
    evaluation.recompute_batchnorm(net, evaluation.calibration_batches(
        images, labels, evaluation.DEFAULT_BN_BATCHES, batch_size, input_size))
    test_x, test_y = data.load_fashion_mnist("test")
    return data.evaluate(net, test_x, test_y, input_size=input_size, limit=limit)


@pytest.mark.parametrize("model", ["resnet18_v1", "smallcnn"])
def test_the_simulator_scores_its_snapshots_as_a_fresh_network_does(tmp_path, model):
    """A standalone run (its replica trains 80 steps), every snapshot (at 0 and 2 virtual s and the
    final model) scored after the run: the curve and the final accuracy are what a fresh network scores.
    Before the fix ResNet-18's were scored on the replica, whose BatchNorm statistics precise BN
    could not recompute (final 0.24 against 0.66 here); the small CNN has no BatchNorm."""
    out = tmp_path / model
    argv = ["-n", "1", "--sync", "local", "--base-iter", "0.05", "--time-budget", "4", "--eval-interval", "2",
            "--model", model, "--input-size", "16", "--batch-size", "16", "--lr", "0.02", "--seed", "3",
            "--eval-samples", "100", "--final-eval-samples", "300"]
    args = cli.build_parser().parse_args(argv + ["--metrics-out", str(out)])
    args.argv = argv
    summary = cli.run(args)
    snapshots = sorted(glob.glob(os.path.join(str(out), "snapshots", "*.params")))
    assert len(snapshots) == len(summary["curve"]) >= 3
    for i, (path, (_, accuracy)) in enumerate(zip(snapshots, summary["curve"])):
        limit = 300 if i == len(snapshots) - 1 else 100
        assert accuracy == pytest.approx(_fresh_score(path, model, 16, 16, limit), abs=1.01 / limit), path
    assert summary["final_accuracy"] == pytest.approx(summary["curve"][-1][1], abs=1e-4)
    assert summary["final_accuracy"] > 0.5   # trained: the comparison is not between two chance scores


def test_a_snapshot_loads_by_name_without_the_network_prefix():
    a = evaluation.evaluation_network("smallcnn", 28)
    b = models.get_model("resnet18_v1", input_size=16)
    b.initialize()
    b(mx.nd.zeros((1, 1, 16, 16)))
    c = evaluation.evaluation_network("resnet18_v1", 16)
    snapshot = {name: p.data() + 1 for name, p in b.collect_params().items()}
    assert next(iter(snapshot)).split("_", 1)[0] != next(iter(c.collect_params())).split("_", 1)[0]
    evaluation.load_snapshot(c, snapshot)
    for (_, p), (_, q) in zip(sorted(b.collect_params().items()), sorted(c.collect_params().items())):
        assert (p.data() + 1 == q.data()).min() == 1
    with pytest.raises(ConfigError, match="not the evaluation network's"):
        evaluation.load_snapshot(a, snapshot)
    with pytest.raises(ConfigError, match="shapes"):
        evaluation.load_snapshot(a, [p.data() for _, p in sorted(b.collect_params().items())][:8])
