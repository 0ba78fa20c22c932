"""Model builders: every name runs on 1-channel input; smallcnn learns."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from mxhet import data, models
from mxhet.errors import ConfigError


def _forward(net, size, batch=2):
    return net(mx.nd.random.uniform(shape=(batch, 1, size, size)))


def test_model_names():
    assert models.MODEL_NAMES == ("smallcnn", "alexnet", "resnet18_v1", "resnet50_v1",
                                  "resnet50_v2", "mobilenet1.0", "inceptionv3", "linear")


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_every_model_runs_on_one_channel(name):
    size = models.default_input_size(name)
    assert size >= models.min_input_size(name)
    net = models.get_model(name, input_size=size)
    assert isinstance(net, gluon.HybridBlock)
    net.initialize(mx.init.Xavier())
    out = _forward(net, size)
    assert out.shape == (2, 10)
    assert np.isfinite(out.asnumpy()).all()


@pytest.mark.parametrize("name", ["smallcnn", "alexnet", "inceptionv3"])
def test_min_input_size_is_tight(name):
    """The smallest size runs; one pixel less fails (the ResNets/MobileNet accept any size)."""
    size = models.min_input_size(name)
    net = models.get_model(name, input_size=size)
    net.initialize(mx.init.Xavier())
    assert _forward(net, size).shape == (2, 10)
    smaller = models.get_model(name)
    smaller.initialize(mx.init.Xavier())
    # MXNetError from the operator, or ValueError from deferred initialization
    with pytest.raises((mx.base.MXNetError, ValueError)):
        _forward(smaller, size - 1).wait_to_read()


def test_get_model_refuses_small_input():
    with pytest.raises(ConfigError, match="alexnet needs input_size >= 63, got 32"):
        models.get_model("alexnet", input_size=32)


def test_unknown_model_lists_names():
    with pytest.raises(ConfigError, match="resnet18_v1") as info:
        models.get_model("vgg16")
    assert "vgg16" in str(info.value)
    with pytest.raises(ConfigError):
        models.default_input_size("vgg16")
    with pytest.raises(ConfigError):
        models.min_input_size("vgg16")


def test_classes_argument():
    net = models.get_model("smallcnn", classes=3)
    net.initialize(mx.init.Xavier())
    assert _forward(net, 28).shape == (2, 3)
    with pytest.raises(ConfigError, match="classes"):
        models.get_model("smallcnn", classes=0)


def test_batchnorm_statistics_are_kept():
    net = models.get_model("resnet18_v1")
    net.initialize(mx.init.Xavier())
    _forward(net, 32)
    params = net.collect_params()
    stats = [n for n in params.keys() if n.endswith(("running_mean", "running_var"))]
    assert stats
    assert all(params[n].grad_req == "null" for n in stats)


def test_smallcnn_learns_fashion_mnist():
    images, labels = data.load_fashion_mnist("train")
    t_images, t_labels = data.load_fashion_mnist("test")
    mx.random.seed(0)
    net = models.get_model("smallcnn")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    stream = data.ShardIterator(images, labels, data.partition(labels, 1, 0), 64, seed=0)
    before = data.evaluate(net, t_images, t_labels, limit=2000)
    for _ in range(300):
        x, y = next(stream)
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(x.shape[0])
    after = data.evaluate(net, t_images, t_labels, limit=2000)
    assert after > 0.6, "accuracy %.3f after 300 steps (%.3f before)" % (after, before)


@pytest.mark.parametrize("name, size", [("resnet18_v1", 32), ("resnet50_v2", 32), ("mobilenet1.0", 32),
                                        ("inceptionv3", 75)])
def test_group_norm_replaces_every_batchnorm_layer(name, size):
    """--norm group: no BatchNorm layer and no batch statistics are left; the network still runs (ResNet-v2's
    normalization of the 1-channel input image takes one group, Inception-v3's 48-channel layers 16)."""
    net = models.get_model(name, input_size=size, norm="group")
    net.initialize(mx.init.Xavier())
    with autograd.record():
        out = _forward(net, size, batch=4)
    assert out.shape == (4, 10) and np.isfinite(out.asnumpy()).all()
    params = net.collect_params()
    assert not [n for n in params.keys() if "batchnorm" in n]
    assert not [n for n in params.keys() if n.endswith(("running_mean", "running_var"))]
    fixed = [n for n, p in params.items() if p.grad_req != "write"]   # the input's norm: no scale, no shift
    assert len(fixed) == (2 if name == "resnet50_v2" else 0)
    norms = [n for n in params.keys() if "groupnorm" in n]
    assert len(norms) == sum(1 for n in models.get_model(name).collect_params().keys() if n.endswith("_gamma")) * 2


def test_group_norm_output_does_not_depend_on_the_rest_of_the_batch():
    """The property that matters on non-i.i.d. data: in training mode a sample's output is its own, whatever
    else the device's batch holds (with BatchNorm it changes with the batch)."""
    x = mx.nd.array(np.random.RandomState(3).uniform(size=(4, 1, 32, 32)))
    other = mx.nd.concat(x[:1], mx.nd.zeros((3, 1, 32, 32)), dim=0)
    for norm, independent in (("group", True), ("batch", False)):
        net = models.get_model("resnet18_v1", norm=norm)
        net.initialize(mx.init.Xavier())
        with autograd.record():
            a, b = net(x)[0].asnumpy(), net(other)[0].asnumpy()
        assert np.allclose(a, b, rtol=1e-4, atol=1e-5) == independent, norm


@pytest.mark.parametrize("name", ["smallcnn", "alexnet", "linear"])
def test_group_norm_is_refused_for_a_model_without_batchnorm(name):
    with pytest.raises(ConfigError, match="%s has no BatchNorm layers" % name):
        models.get_model(name, norm="group")
    with pytest.raises(ConfigError, match="unknown norm 'layer'"):
        models.get_model("resnet18_v1", norm="layer")


def _loss_and_grads(net, x, y):
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    return loss.asnumpy(), {name.split("_", 1)[1]: p.grad().asnumpy()
                            for name, p in net.collect_params().items() if p.grad_req != "null"}


@pytest.mark.parametrize("name,size,expected", [
    ("resnet18_v1", 32, ["stage4_conv1", "stage4_conv3", "stage4_conv4"]),   # the last stage's 3x3, stride 1
    ("resnet18_v1", 64, []),                                                 # 2 x 2 there: nothing to change
    ("mobilenet1.0", 32, ["conv25"]),                                        # a depthwise 3x3 (deferred shape)
])
def test_convolutions_on_one_pixel_compute_as_before_through_their_center_taps(name, size, expected):
    stock = models.get_model(name)   # no input size: every layer as the zoo builds it
    net = models.get_model(name, input_size=size)
    assert [c.name.split("_", 1)[1] for c, _ in models.one_pixel_convs(models.get_model(name), size)] == expected
    x = mx.nd.random.uniform(shape=(8, 1, size, size), ctx=mx.cpu())
    y = mx.nd.array([i % 10 for i in range(8)])
    net.initialize(mx.init.Xavier())
    stock.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)   # before its first pass, as the simulator's replicas
    net(x), stock(x)
    for (k, p), (k_stock, p_stock) in zip(net.collect_params().items(), stock.collect_params().items()):
        assert k.split("_", 1)[1] == k_stock.split("_", 1)[1] and p.shape == p_stock.shape   # names, shapes kept
        p_stock.set_data(p.data())
    loss, grads = _loss_and_grads(net, x, y)
    stock_loss, stock_grads = _loss_and_grads(stock, x, y)
    np.testing.assert_allclose(loss, stock_loss, rtol=1e-5, atol=1e-6)
    scale = max(np.abs(g).max() for g in stock_grads.values())
    for key, grad in grads.items():   # equal up to rounding, against the network's gradient scale
        np.testing.assert_allclose(grad, stock_grads[key], rtol=0, atol=1e-5 * scale, err_msg=key)
    for conv in expected:   # the taps that meet only padding get exactly no gradient, as before
        grad = grads[conv + "_weight"]
        assert np.count_nonzero(grad[:, :, 1, 1]) > 0 and np.count_nonzero(grad) == np.count_nonzero(grad[:, :, 1, 1])
