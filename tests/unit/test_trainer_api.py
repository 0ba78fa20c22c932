"""mxhet.Trainer keeps gluon.Trainer's API: parameters ordered by name, their
names in the model signature, allreduce_grads() then update() in local mode."""
import mxnet as mx
import pytest
from mxnet import autograd, gluon

import mxhet
from mxhet.control import messages as m
from mxhet.control.server import StateService
from mxhet.errors import ConfigError
from mxhet.gluon_private import trainer_params
from mxhet.modes.base import portable_names


class TwoLayers(gluon.Block):
    """Two same-shaped layers, registered in the order given."""

    def __init__(self, names, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            for name in names:
                setattr(self, name, gluon.nn.Dense(4, in_units=4, prefix=name + "_"))

    def forward(self, x):
        return x


def _trainer(names, prefix="net_"):
    net = TwoLayers(names, prefix=prefix)
    net.initialize()
    return mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, sync="local")


def test_parameters_ordered_by_name_whatever_the_registration_order():
    forward = _trainer(["alpha", "beta"])
    backward = _trainer(["beta", "alpha"])
    expected = ["net_alpha_bias", "net_alpha_weight", "net_beta_bias", "net_beta_weight"]
    assert [p.name for p in trainer_params(forward)] == expected
    assert [p.name for p in trainer_params(backward)] == expected
    assert forward.mode.model_signature() == backward.mode.model_signature()


def test_signature_catches_same_shaped_parameters_with_other_names():
    # Shapes and dtypes agree key by key: a shapes-only signature would pass.
    a, b = _trainer(["alpha", "beta"]), _trainer(["alpha", "gamma"])
    assert [p.shape for p in trainer_params(a)] == [p.shape for p in trainer_params(b)]
    assert a.mode.model_signature() != b.mode.model_signature()
    service = StateService(2)
    first = service.handle(m.Register(rank=0, seq=1, slot=0, signature=a.mode.model_signature(),
                                      incarnation=1), 0.0)
    second = service.handle(m.Register(rank=1, seq=1, slot=1, signature=b.mode.model_signature(),
                                       incarnation=2), 0.0)
    assert first.ok
    assert not second.ok and "differs" in second.error


def test_signature_ignores_the_top_level_instance_counter():
    assert _trainer(["alpha"], "net3_").mode.model_signature() == _trainer(["alpha"], "net0_").mode.model_signature()
    assert portable_names(["resnet7_conv0_weight", "resnet7_dense0_bias"]) == ["resnet_conv0_weight",
                                                                              "resnet_dense0_bias"]
    # no common counted prefix: names unchanged (conv0 and conv1 must stay apart)
    assert portable_names(["conv0_weight", "conv1_weight"]) == ["conv0_weight", "conv1_weight"]


def test_duplicate_parameter_names_are_refused():
    params = [gluon.Parameter("same", shape=(2,)), gluon.Parameter("same", shape=(2,))]
    with pytest.raises(ConfigError, match="same"):
        mxhet.Trainer(params, "sgd", sync="local")


def test_allreduce_grads_then_update_clips_like_gluon():
    """Local mode: the clipping pattern gives gluon.Trainer's result."""
    results = []
    for cls in (mxhet.Trainer, gluon.Trainer):
        net = gluon.nn.Dense(1, in_units=2, use_bias=False)
        net.initialize(mx.init.One())
        extra = {"sync": "local"} if cls is mxhet.Trainer else {}
        trainer = cls(net.collect_params(), "sgd", {"learning_rate": 0.1}, **extra)
        with autograd.record():
            loss = net(mx.nd.array([[3.0, 4.0]])).sum()
        loss.backward()
        trainer.allreduce_grads()
        gluon.utils.clip_global_norm([net.weight.grad()], 1.0)
        trainer.update(1)
        results.append(net.weight.data().asnumpy()[0].tolist())
    assert results[0] == pytest.approx(results[1])
    assert results[0] == pytest.approx([1 - 0.1 * 0.6, 1 - 0.1 * 0.8], abs=1e-6)
