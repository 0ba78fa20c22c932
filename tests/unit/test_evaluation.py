"""The shared evaluation protocol (precise BatchNorm) and the element-wise NaN/Inf check."""
import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from mxhet import evaluation, models
from mxhet.config import WorkerConfig
from mxhet.errors import ConfigError, NonFiniteError
from mxhet.modes.base import nonfinite_indices
from mxhet.trainer import Trainer


def _conv_bn(hybridize, **bn_kwargs):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=1), nn.BatchNorm(in_channels=4, **bn_kwargs))
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    return net


@pytest.mark.parametrize("hybridize", [False, True])
def test_precise_bn_sets_the_average_of_the_batch_statistics(hybridize):
    mx.random.seed(1)
    net = _conv_bn(hybridize)
    batches = [mx.nd.random.normal(2, 3, shape=(8, 1, 6, 6)) for _ in range(3)]
    conv, bn = net[0], net[1]
    acts = [conv(x).asnumpy().transpose(1, 0, 2, 3).reshape(4, -1) for x in batches]
    bn.running_mean.set_data(mx.nd.full((4,), 7.0))       # stale statistics, as a slow rank 0 has
    assert evaluation.recompute_batchnorm(net, batches) == 1
    np.testing.assert_allclose(bn.running_mean.data().asnumpy(), np.mean([a.mean(1) for a in acts], 0),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_var.data().asnumpy(), np.mean([a.var(1) for a in acts], 0),
                               rtol=1e-4, atol=1e-5)


def test_layers_that_never_update_their_statistics_are_left_alone():
    for kwargs in ({"use_global_stats": True}, {"momentum": 1.0}):
        net = _conv_bn(True, **kwargs)
        net[1].running_mean.set_data(mx.nd.full((4,), 7.0))
        assert evaluation.recompute_batchnorm(net, [mx.nd.ones((2, 1, 5, 5))]) == 0
        assert net[1].running_mean.data().asnumpy().tolist() == [7.0] * 4


def test_models_without_batchnorm_and_the_zoo_models_with_it():
    assert evaluation.batchnorm_layers(models.get_model("smallcnn")) == []
    assert evaluation.batchnorm_layers(models.get_model("alexnet")) == []
    assert len(evaluation.batchnorm_layers(models.get_model("resnet18_v1"))) == 20
    assert len(evaluation.batchnorm_layers(models.get_model("mobilenet1.0"))) == 27


def test_calibration_batches_are_fixed_and_checked():
    images = np.random.RandomState(0).randint(0, 255, size=(50, 28, 28)).astype(np.uint8)
    labels = np.arange(50) % 10
    a = evaluation.calibration_batches(images, labels, 3, 8, 16)
    b = evaluation.calibration_batches(images, labels, 3, 8, 16)
    assert [x.shape for x in a] == [(8, 1, 16, 16)] * 3
    assert all((x == y).min() == 1 for x, y in zip(a, b))
    with pytest.raises(ConfigError, match="need 56 images"):
        evaluation.calibration_batches(images, labels, 7, 8, 16)
    with pytest.raises(ConfigError, match="positive integer"):
        evaluation.calibration_batches(images, labels, 0, 8, 16)


def test_nonfinite_check_is_element_wise():
    big = mx.nd.full((10,), 1e38)                     # finite, but its float32 sum is inf
    assert not np.isfinite(mx.nd.sum(big).asscalar())
    arrays = [big, mx.nd.array([1.0, np.nan]), mx.nd.array([np.inf, 0.0]), mx.nd.ones((2, 3), dtype="float16")]
    assert nonfinite_indices(arrays) == [1, 2]
    assert nonfinite_indices([]) == []


def test_a_finite_delta_with_an_overflowing_sum_is_pushed():
    net = nn.Dense(10, in_units=1)
    net.initialize()
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, config=WorkerConfig(sync="local"))
    assert trainer.mode.check_finite([mx.nd.full((10, 1), 3e38), mx.nd.zeros((10,))], "model delta", 0)
    with pytest.raises(NonFiniteError, match="in round 4: dense[0-9]*_"):
        trainer.mode.check_finite([mx.nd.zeros((10, 1)), mx.nd.array([np.nan] * 10)], "model delta", 4)


def test_a_layer_no_gradient_passes_through_keeps_its_statistics():
    """ResNet-v2 normalizes its input with a BatchNorm without scale and shift:
    MXNet never updates its statistics (no backward runs through it). It scored
    chance accuracy after a recomputation that zeroed them."""
    net = nn.HybridSequential()
    net.add(nn.BatchNorm(scale=False, center=False, in_channels=1), nn.Conv2D(4, 3, in_channels=1),
            nn.BatchNorm(in_channels=4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    before = net[0].running_var.data().asnumpy().copy()
    assert evaluation.recompute_batchnorm(net, [mx.nd.random.normal(3, 2, shape=(8, 1, 6, 6))]) == 1
    assert net[0].running_var.data().asnumpy().tolist() == before.tolist() == [1.0]
    assert net[2].running_var.data().asnumpy().min() > 0


def test_precise_bn_keeps_resnet50_v2_working():
    mx.random.seed(3)
    net = models.get_model("resnet50_v2")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.random.normal(shape=(8, 1, 16, 16))
    with mx.autograd.pause(train_mode=False):
        net(x)
    assert evaluation.recompute_batchnorm(net, [x]) == len(evaluation.batchnorm_layers(net)) - 1
    first = evaluation.batchnorm_layers(net)[0]
    assert first.running_var.data().asnumpy().tolist() == [1.0]
