"""Server-side updaters of kvstore_ext and the key layout (in-process)."""
import pickle

import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys
from kvstore_ext.updaters import ESyncAverage, ServerOptimizer


def _apply(updater, key, weight, merged):
    w = mx.nd.array(weight)
    state = updater.create_state(key, w)
    updater.update(key, w, mx.nd.array(merged), state)
    return w.asnumpy()


def test_esync_average_applies_epsilon_times_mean_delta():
    rng = np.random.RandomState(0)
    w = rng.randn(3, 4).astype("f")
    deltas = [rng.randn(3, 4).astype("f") for _ in range(3)]
    got = _apply(ESyncAverage(3, epsilon=0.5), 0, w, np.sum(deltas, axis=0))  # servers receive the sum
    np.testing.assert_allclose(got, w + 0.5 * np.mean(deltas, axis=0), rtol=1e-6)


def test_esync_average_survives_pickling():
    # MXNet ships the updater to the servers with pickle protocol 0.
    upd = pickle.loads(pickle.dumps(ESyncAverage(4, epsilon=0.25), 0))
    assert (upd.num_workers, upd.epsilon) == (4, 0.25)
    np.testing.assert_allclose(_apply(upd, 1, np.zeros(2), np.full(2, 4.0)), [0.25, 0.25])


def test_server_optimizer_is_the_wrapped_sgd():
    sgd = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, rescale_grad=0.5)
    upd = pickle.loads(pickle.dumps(ServerOptimizer(2, sgd), 0))
    w = mx.nd.ones((3,))
    state = upd.create_state(0, w)
    for _ in range(2):
        upd.update(0, w, mx.nd.ones((3,)), state)
    # momentum SGD by hand: v = 0.9 v - 0.1 * 0.5 g ; w += v
    v, ref = 0.0, 1.0
    for _ in range(2):
        v = 0.9 * v - 0.05
        ref += v
    np.testing.assert_allclose(w.asnumpy(), [ref] * 3, rtol=1e-6)


def test_reserved_keys():
    upd = ESyncAverage(2, epsilon=1.0)
    probe = keys.probe_keys(1)[0]
    np.testing.assert_allclose(_apply(upd, probe, [0.0], [2.0]), [2.0 + keys.PROBE_STAMP])
    np.testing.assert_allclose(_apply(upd, keys.STOP_VOTE_KEY, [5.0], [1.0]), [1.0])


@pytest.mark.parametrize("servers", [1, 2, 3, 7])
def test_probe_keys_reach_every_server(servers):
    ks = keys.probe_keys(servers)
    assert [keys.server_of(k, servers) for k in ks] == list(range(servers))
    assert all(keys.is_probe_key(k) and k * 9973 < 2 ** 31 for k in ks)


def test_bad_arguments():
    with pytest.raises(ValueError):
        ESyncAverage(0)
    with pytest.raises(ValueError):
        ESyncAverage(2, epsilon=0)
    with pytest.raises(ValueError):
        ServerOptimizer(2, "sgd")
    with pytest.raises(ValueError):
        keys.probe_keys(0)


def test_member_sum_ends_on_the_same_model_whatever_order_the_pushes_arrive_in():
    from kvstore_ext.updaters import MemberSum
    rng = np.random.RandomState(0)
    start = rng.normal(0, 0.1, 1000).astype("float32")
    pushes = [rng.normal(0, 1e-3, 1000).astype("float32") for _ in range(3)]
    finals = []
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        updater, weight = MemberSum(3), mx.nd.array(start)
        state = updater.create_state(0, weight)
        for i in order:
            updater.update(0, weight, mx.nd.array(pushes[i]), state)
        finals.append(weight.asnumpy())
    assert finals[0].dtype == np.float32
    assert all(np.array_equal(finals[0], f) for f in finals[1:])
    # the model is the float32 rounding of the exact sum
    exact = start.astype("float64") + sum(p.astype("float64") for p in pushes)
    assert np.array_equal(finals[0], exact.astype("float32"))
    # (a float32 running sum differs with the order: the reason for the float64 state)
    plain = [start + pushes[i] + pushes[j] + pushes[k] for i, j, k in ([0, 1, 2], [2, 0, 1])]
    assert not np.array_equal(plain[0], plain[1])
