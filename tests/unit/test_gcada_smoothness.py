"""The quadratic loss (``--loss l2``) and eq. (9)'s smoothness constants L_g."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from mxhet import data, losses
from mxhet.control import messages as m
from mxhet.control.gcada import GroupCoordinator, GroupRule, lazy_selection
from mxhet.control.server import StateService
from mxhet.errors import ConfigError, ProtocolError


def test_l2_loss_is_half_the_mean_squared_error_against_the_one_hot_label():
    rng = np.random.RandomState(0)
    pred, label = rng.randn(6, 4).astype(np.float32), np.array([0, 3, 1, 1, 2, 0], np.float32)
    got = losses.get_loss("l2", classes=4)(mx.nd.array(pred), mx.nd.array(label)).asnumpy()
    np.testing.assert_allclose(got, 0.5 * np.mean((pred - np.eye(4)[label.astype(int)]) ** 2, axis=1), rtol=1e-6)
    assert isinstance(losses.get_loss("softmax"), gluon.loss.SoftmaxCrossEntropyLoss)
    with pytest.raises(ConfigError, match="'hinge'"):
        losses.get_loss("hinge")


def test_shard_smoothness_needs_the_linear_model_under_the_quadratic_loss():
    assert losses.check_smoothness("shard", "linear", "l2") == "shard"
    for model, loss in (("smallcnn", "l2"), ("linear", "softmax"), ("resnet18_v1", "softmax")):
        losses.check_smoothness("folded", model, loss)   # folding works for any model and loss
        with pytest.raises(ConfigError, match="--model linear --loss l2"):
            losses.check_smoothness("shard", model, loss)
    with pytest.raises(ConfigError, match="'exact'"):
        losses.check_smoothness("exact", "linear", "l2")


def test_smoothness_of_a_small_matrix_equals_numpys_largest_eigenvalue():
    rng = np.random.RandomState(1)
    x = rng.randn(40, 6) + 0.5
    xt = np.hstack([x, np.ones((40, 1))])   # the bias
    expect = np.linalg.eigvalsh(xt.T @ xt / 40)[-1]
    assert losses.quadratic_smoothness(x, outputs=1) == pytest.approx(expect, rel=1e-8)
    assert losses.quadratic_smoothness(x, outputs=10) == pytest.approx(expect / 10, rel=1e-8)
    with pytest.raises(ValueError, match="shape"):
        losses.quadratic_smoothness(np.zeros((0, 3)))


def test_smoothness_is_the_lipschitz_constant_of_the_linear_models_l2_gradient():
    """With the real Dense layer and loss block: the gradient of the mean loss
    changes by exactly L·‖Δθ‖ along the top eigenvector, and by less along
    random directions."""
    rng = np.random.RandomState(2)
    n, d, k = 30, 5, 3
    x, y = rng.randn(n, d).astype(np.float32) + 0.3, rng.randint(0, k, n).astype(np.float32)
    lip = losses.quadratic_smoothness(x, outputs=k)
    net = gluon.nn.Dense(k, in_units=d)
    net.initialize(mx.init.Xavier())
    loss_fn = losses.get_loss("l2", classes=k)

    def grad_at(w, b):
        net.weight.set_data(mx.nd.array(w))
        net.bias.set_data(mx.nd.array(b))
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y)).mean()
        loss.backward()
        return np.concatenate([net.weight.grad().asnumpy().ravel(), net.bias.grad().asnumpy()]).astype(np.float64)

    w0, b0 = rng.randn(k, d), rng.randn(k)
    g0 = grad_at(w0, b0)
    xt = np.hstack([x, np.ones((n, 1))]).astype(np.float64)
    top = np.linalg.eigh(xt.T @ xt)[1][:, -1]   # the top eigenvector, one row of (W, b)
    dw, db = np.zeros((k, d)), np.zeros(k)
    dw[1], db[1] = top[:-1] * 0.1, top[-1] * 0.1
    change = np.linalg.norm(grad_at(w0 + dw, b0 + db) - g0)
    assert change == pytest.approx(lip * 0.1, rel=1e-4)
    for _ in range(3):
        dw, db = rng.randn(k, d) * 0.1, rng.randn(k) * 0.1
        step = np.sqrt(np.sum(dw ** 2) + np.sum(db ** 2))
        assert np.linalg.norm(grad_at(w0 + dw, b0 + db) - g0) <= lip * step * (1 + 1e-4)


def test_shard_smoothness_sees_the_inputs_as_the_model_does():
    rng = np.random.RandomState(3)
    images = rng.randint(0, 256, size=(25, 28, 28)).astype(np.uint8)
    shard = np.array([3, 7, 1, 20, 11, 5])
    batch = data._to_batch(images[shard], 28, mx.cpu()).asnumpy().reshape(len(shard), -1)
    assert losses.shard_smoothness(images, shard, 28) == pytest.approx(losses.quadratic_smoothness(batch), rel=1e-5)
    with pytest.raises(ConfigError, match="input-size 32"):
        losses.shard_smoothness(images, shard, 32)


def test_smoothness_scales_the_left_hand_side_of_eq_9():
    # τ 1 < D 3; eq. (9): select g when L_g² · lhs_g > c · Σ history = 0.5 · 2 = 1
    aoi, lhs, history = [1, 1, 1], [0.5, 0.5, 0.5], [1.0, 1.0]
    assert lazy_selection(aoi, lhs, history, c=0.5, max_delay=3) == []                   # folded: L_g = 1
    assert lazy_selection(aoi, lhs, history, c=0.5, max_delay=3, smoothness=[1.0, 1.5, 1.4]) == [1]
    assert lazy_selection(aoi, lhs, history, c=0.5, max_delay=3, smoothness=[2.0, 2.0, 2.0]) == [0, 1, 2]


def test_groups_of_equal_age_are_selected_apart_when_their_constants_differ():
    """Folded, two groups with the same age and norms are always selected
    together; with L_0 > L_1 the rule separates them."""
    def run(smoothness):
        rule = GroupRule(2, max_delay=4, c=1.0, smoothness=smoothness)
        picks = []
        for k in range(6):
            for g in rule.selected:
                assert rule.claim(g, g, k)
                rule.upload_done(g, g, k)
            picks.append(list(rule.selected))
            rule.stepped(k, delta_sq=1.0, group_sq=[1.0 if g in rule.selected else 4.0 for g in range(2)])
        return picks

    folded = run(None)
    assert all(p in ([], [0, 1]) for p in folded)
    apart = run([3.0, 0.5])
    assert any(p == [0] for p in apart)
    with pytest.raises(ValueError, match="one L_g per group"):
        GroupRule(2, smoothness=[1.0])
    with pytest.raises(ValueError, match="finite number > 0"):
        GroupRule(2, smoothness=[1.0, 0.0])


def test_the_state_server_takes_l_g_from_group_begin_and_checks_the_members_agree():
    coord = GroupCoordinator(4, groups=2, max_delay=2, c=0.3)
    assert coord.rule.smoothness == [1.0, 1.0]
    coord.smoothness(0, 0, 30.5)
    coord.smoothness(1, 0, 30.5)
    coord.smoothness(2, 1, 29.9)
    assert coord.rule.smoothness == [30.5, 29.9] and coord.stats()["smoothness"] == [30.5, 29.9]
    with pytest.raises(ValueError, match="rank 3 sends L_g = 1.0 for group 1, rank 2 sent 29.9"):
        coord.smoothness(3, 1, 1.0)

    svc = StateService(2)
    for r in range(2):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r)
    rule = dict(groups=2, max_delay=2, c=0.3, want_stop=False)
    wire = m.decode(m.encode(m.GroupBegin(rank=0, seq=2, iteration=0, group=0, smoothness=12.5, **rule)))
    assert svc.handle(wire, 0.0, sender=0).download
    refused = svc.handle(m.GroupBegin(rank=1, seq=2, iteration=0, group=0, smoothness=2.0, **rule), 0.0, sender=1)
    assert not refused.ok and "same shard" in refused.error
    assert svc.stats()["gcada"]["smoothness"] == [12.5, 1.0]
    with pytest.raises(ProtocolError, match="smoothness"):
        m.GroupBegin(rank=1, seq=3, iteration=0, group=1, smoothness=0.0, **rule).validate()
