"""Several contexts per worker (gluon's split_and_load pattern): gradients are
summed over the contexts as gluon.Trainer does locally, and every context ends
each step holding the same weights. Standalone mode, in-process."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import mxhet


def _train(contexts, steps=5, batch=8, split=None):
    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
    net.initialize(mx.init.Xavier(), ctx=contexts)
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, sync="local")
    rng = np.random.RandomState(0)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        data = mx.nd.array(rng.randn(batch, 10))
        label = mx.nd.array(rng.randint(0, 4, batch))
        split = split or gluon.utils.split_and_load
        xs, ys = split(data, contexts), split(label, contexts)
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
        for loss in losses:
            loss.backward()
        trainer.step(batch)
    # in the network's order: Gluon numbers layer names per process (dense9 then dense10), so two nets
    # built one after the other need not sort their names alike
    return [(name, [p.data(c).asnumpy() for c in contexts]) for name, p in net.collect_params().items()]


def test_two_contexts_train_as_one_and_stay_equal():
    one = _train([mx.cpu(0)])
    two = _train([mx.cpu(0), mx.cpu(1)])
    assert len(one) == len(two)
    for (name, [w]), (name2, copies) in zip(one, two):
        np.testing.assert_allclose(copies[0], w, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(copies[1], copies[0], err_msg=name)



def test_a_split_by_speed_trains_as_one_context():
    """Unequal parts (3:1) change which context does how much, not the update:
    the step sums the parts' gradients."""
    one = _train([mx.cpu(0)])
    two = _train([mx.cpu(0), mx.cpu(1)], split=lambda data, ctx: mxhet.split_by_speed(data, ctx, [3.0, 1.0]))
    assert len(one) == len(two)
    for (name, [w]), (name2, copies) in zip(one, two):
        np.testing.assert_allclose(copies[0], w, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(copies[1], copies[0], err_msg=name)


def test_split_by_speed_loads_parts_sized_by_speed_on_their_contexts():
    data = mx.nd.arange(16).reshape((8, 2))
    parts = mxhet.split_by_speed(data, [mx.cpu(0), mx.cpu(1)], [3.0, 1.0])
    assert [p.shape[0] for p in parts] == [6, 2] and [p.context for p in parts] == [mx.cpu(0), mx.cpu(1)]
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts]), data.asnumpy())
    with pytest.raises(ValueError):
        mxhet.split_by_speed(data, [mx.cpu(0), mx.cpu(1)], [1.0])


def test_measuring_speeds_leaves_the_model_and_its_gradients_as_they_were():
    contexts = [mx.cpu(0), mx.cpu(1)]
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8), gluon.nn.BatchNorm(), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier(), ctx=contexts)
    data, label = mx.nd.ones((16, 5)), mx.nd.zeros((16,))
    net(data.as_in_context(contexts[0]))
    before = {name: p.data(contexts[1]).asnumpy() for name, p in net.collect_params().items()}
    speeds = mxhet.measure_speeds(net, gluon.loss.SoftmaxCrossEntropyLoss(), data, label, contexts, repeats=1)
    assert len(speeds) == 2 and min(speeds) > 0
    for name, p in net.collect_params().items():
        np.testing.assert_array_equal(p.data(contexts[1]).asnumpy(), before[name], err_msg=name)  # BatchNorm too
        if p.grad_req != "null":
            assert not any(g.asnumpy().any() for g in p.list_grad()), name


def _two_context_trainer(**options):
    contexts = [mx.cpu(0), mx.cpu(1)]
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, sync="local", **options)
    return net, trainer, contexts


def _backward(net, contexts):
    data = mx.nd.ones((4, 4))
    with autograd.record():
        losses = [net(x).sum() for x in gluon.utils.split_and_load(data, contexts)]
    autograd.backward(losses)


def test_a_model_pulled_in_on_setup_reaches_every_context():
    """A mode may replace the first copy while it sets up (gcada downloads the
    iteration it is selected for): the other contexts get it before the first
    gradient is computed on them."""
    net, trainer, contexts = _two_context_trainer()

    def on_setup(batch_size):
        for w in trainer.mode.weights():
            w[:] = 7.0
    trainer.mode.on_setup = on_setup
    trainer.setup(4)
    for p in net.collect_params().values():
        for c in contexts:
            np.testing.assert_array_equal(p.data(c).asnumpy(), np.full(p.shape, 7.0), err_msg=str(c))


def test_the_mode_runs_once_per_worker_with_the_whole_workers_iteration_time():
    """With two contexts, communicate() runs once per step, and the capability
    it gets (what ESync reports to the State Server) is the time since the last
    step: the forward and backward passes on every context, not one context's."""
    now = [0.0]
    net, trainer, contexts = _two_context_trainer(clock=lambda: now[0])
    seen = []
    trainer.mode.communicate = lambda batch_size, capability, compute_end: seen.append(capability)
    trainer.setup(4)
    for spent in (0.25, 0.5):
        _backward(net, contexts)
        now[0] += spent   # the loop's forward and backward passes on both contexts
        trainer.step(4)
    assert seen == [0.25, 0.5]


def test_worker_contexts_number_the_cpus_in_order():
    from mxhet.config import mx_contexts
    from mxhet.errors import ConfigError
    assert mx_contexts("cpu,cpu") == [mx.cpu(0), mx.cpu(1)]
    assert mx_contexts("cpu") == [mx.cpu(0)]
    for bad in ("", "cpu,,cpu", "tpu", "cpu(1)"):
        with pytest.raises(ConfigError):
            mx_contexts(bad)


def test_worker_contexts_do_not_override_a_gpu_the_launcher_gave():
    from mxhet.config import WorkerConfig
    from mxhet.errors import ConfigError
    from mxhet.train import build_parser, worker_contexts
    args = build_parser().parse_args(["--metrics-out", "x", "--worker-contexts", "cpu,cpu"])
    assert worker_contexts(args, WorkerConfig()) == [mx.cpu(0), mx.cpu(1)]
    with pytest.raises(ConfigError, match="give one of them"):
        worker_contexts(args, WorkerConfig(context="gpu(0)"))
