"""Mode dcasgd and the script's optimizer: the gradient modes run the script's
own optimizer on the servers; dcasgd can honour only SGD (its compensation is
an SGD rule) and refuses any other when the Trainer is made, before any
communication, instead of silently training with SGD at another optimizer's
learning rate. Its servers run :class:`kvstore_ext.updaters.DelayCompensatedSGD`,
MXNet's rule with momentum that works."""
import pickle

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import mxhet
from kvstore_ext.updaters import DelayCompensatedSGD
from mxhet.errors import ConfigError
from mxhet.modes.gradient import DCASGD, Async, Sync


def _params():
    net = gluon.nn.Dense(4, in_units=4)
    net.initialize()
    return net.collect_params()


@pytest.mark.parametrize("name", ["adam", "rmsprop", "nag"])
def test_dcasgd_refuses_another_optimizer_when_the_trainer_is_made(name):
    with pytest.raises(ConfigError, match="dcasgd.*%s" % name):
        mxhet.Trainer(_params(), name, {"learning_rate": 0.001}, sync="dcasgd")


def test_dcasgd_keeps_the_scripts_sgd_settings_on_the_servers():
    schedule = mx.lr_scheduler.FactorScheduler(step=10, factor=0.5)
    trainer = mxhet.Trainer(_params(), "sgd", {"learning_rate": 0.2, "momentum": 0.9, "wd": 1e-4,
                                               "clip_gradient": 5.0, "lr_scheduler": schedule}, sync="dcasgd")
    updater = DCASGD.updater_for(3, 32, trainer._optimizer, {"lamda": 0.1})
    dc = updater.inner
    assert type(dc) is DelayCompensatedSGD
    assert (dc.learning_rate, dc.momentum, dc.wd, dc.clip_gradient, dc.lamda) == (0.2, 0.9, 1e-4, 5.0, 0.1)
    assert dc.lr_scheduler is schedule
    assert dc.rescale_grad == pytest.approx(1.0 / 32)


@pytest.mark.parametrize("mode", [Async, Sync])
def test_the_other_gradient_modes_run_the_scripts_optimizer_on_the_servers(mode):
    optimizer = mx.optimizer.create("adam", learning_rate=0.001)
    updater = mode.updater_for(3, 32, optimizer, {})
    assert type(updater.inner) is mx.optimizer.Adam and updater.inner.learning_rate == 0.001


@pytest.mark.parametrize("mode", ["gcada", "cada"])
def test_gcada_and_cada_say_the_scripts_optimizer_is_not_used(mode):
    """Their servers run AMSGrad at --step-size; a script's Adam at 0.01 would
    otherwise be replaced without a word."""
    with pytest.warns(UserWarning, match=r"mode %s runs AMSGrad.*step size 0\.0003.*'adam' \(learning_rate 0\.01\)"
                      % mode):
        mxhet.Trainer(_params(), "adam", {"learning_rate": 0.01}, sync=mode, step_size=3e-4)


# A conv kernel, a dense matrix, a bias: the shapes a server updates.
SHAPES = [(8, 3, 3, 3), (10, 32), (10,)]


def _arrays(seed, scale=1.0):
    rs = np.random.RandomState(seed)
    return [(rs.normal(size=shape) * scale).astype("float32") for shape in SHAPES]


def _train(optimizer, steps=4):
    """The weights after ``steps`` updates of every shape with fixed gradients, each time from a weight
    another worker's push moved (so ``w - w_prev`` is not zero)."""
    weights = [mx.nd.array(w) for w in _arrays(0)]
    states = [optimizer.create_state(i, w) for i, w in enumerate(weights)]
    for step in range(steps):
        for i, (w, g, nudge) in enumerate(zip(weights, _arrays(10 + step, 20.0), _arrays(20 + step, 0.01))):
            optimizer.update(i, w, mx.nd.array(g), states[i])
            w += mx.nd.array(nudge)
    return [w.asnumpy() for w in weights]


@pytest.mark.parametrize("clip", [None, 0.5])
def test_the_servers_rule_is_mxnets_dcasgd_bit_for_bit(clip):
    settings = dict(learning_rate=0.1, lamda=0.5, wd=1e-3, rescale_grad=1 / 32., clip_gradient=clip)
    ours, theirs = _train(DelayCompensatedSGD(**settings)), _train(mx.optimizer.DCASGD(**settings))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ours, theirs))
    assert not np.array_equal(ours[0], _arrays(0)[0])


def test_with_momentum_it_follows_the_rule_where_mxnets_class_raises():
    """MXNet 1.9.1's ``if mom:`` on a many-element array raises: mode dcasgd with a script's
    momentum SGD crashed its servers at their first update."""
    settings = dict(learning_rate=0.1, momentum=0.9, lamda=0.5, wd=1e-3, rescale_grad=1 / 32.)
    with pytest.raises(ValueError, match="truth value"):
        _train(mx.optimizer.DCASGD(**settings), steps=1)
    lr, mu, lamda, wd, rescale = 0.1, 0.9, 0.5, 1e-3, 1 / 32.
    weights = _arrays(0)
    previous = [w.copy() for w in weights]
    moms = [np.zeros_like(w) for w in weights]
    for step in range(4):
        for w, prev, m, g, nudge in zip(weights, previous, moms, _arrays(10 + step, 20.0), _arrays(20 + step, 0.01)):
            g = g * np.float32(rescale)
            m *= np.float32(mu)
            m += np.float32(-lr) * (g + np.float32(wd) * w + np.float32(lamda) * g * g * (w - prev))
            prev[:] = w
            w += m
            w += nudge
    for ours, reference in zip(_train(DelayCompensatedSGD(**settings)), weights):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-7)


def test_a_pickled_optimizer_leaves_its_scratch_arrays_behind_and_goes_on_the_same():
    """Servers receive the optimizer pickled, and checkpoints keep it: the scratch arrays (three
    copies of the model) must not travel; an unpickled copy continues exactly as the original."""
    settings = dict(learning_rate=0.1, momentum=0.9, lamda=0.5, rescale_grad=1 / 32.)
    optimizer = DelayCompensatedSGD(**settings)
    weight, grad = mx.nd.array(_arrays(0)[0]), mx.nd.array(_arrays(1)[0])
    state = optimizer.create_state(0, weight)
    optimizer.update(0, weight, grad, state)
    text = pickle.dumps(optimizer)
    copy = pickle.loads(text)
    assert "_scratch" not in copy.__dict__ and len(text) < 4 * weight.size
    twin = weight.copy(), (state[0].copy(), state[1].copy())
    optimizer.update(0, weight, grad, state)
    copy.update(0, twin[0], grad, twin[1])
    assert weight.asnumpy().tobytes() == twin[0].asnumpy().tobytes()
