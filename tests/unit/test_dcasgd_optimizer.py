"""Mode dcasgd and the script's optimizer: the gradient modes run the script's
own optimizer on the servers; dcasgd can honour only SGD (its compensation is
an SGD rule) and refuses any other when the Trainer is made, before any
communication, instead of silently training with SGD at another optimizer's
learning rate."""
import mxnet as mx
import pytest
from mxnet import gluon

import mxhet
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
    assert type(dc) is mx.optimizer.DCASGD
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
