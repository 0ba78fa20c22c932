"""Several contexts per worker (gluon's split_and_load pattern): gradients are
summed over the contexts as gluon.Trainer does locally, and every context ends
each step holding the same weights. Standalone mode, in-process."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhet


def _train(contexts, steps=5, batch=8):
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
        xs, ys = gluon.utils.split_and_load(data, contexts), gluon.utils.split_and_load(label, contexts)
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
        for loss in losses:
            loss.backward()
        trainer.step(batch)
    return {name: [p.data(c).asnumpy() for c in contexts] for name, p in net.collect_params().items()}


def test_two_contexts_train_as_one_and_stay_equal():
    one = _train([mx.cpu(0)])
    two = _train([mx.cpu(0), mx.cpu(1)])
    for (name, [w]), (name2, copies) in zip(sorted(one.items()), sorted(two.items())):
        np.testing.assert_allclose(copies[0], w, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(copies[1], copies[0], err_msg=name)

