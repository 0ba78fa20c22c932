"""ESync's aggregation options: the pure maths against numpy references, the
servers' updater, and the worker-side scaling (in-process)."""
import pickle

import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys
from kvstore_ext.updaters import ESyncAggregate, ESyncAverage, server_part
from mxhet.errors import ConfigError
from mxhet.policy import aggregation as agg
from mxhet.policy import get_spec


def test_effective_steps_is_the_displacement_of_momentum_sgd_in_plain_steps():
    # FedNova's a_i: tau steps of momentum SGD (fresh buffer) under a constant
    # gradient move the weight a_i times as far as one plain step.
    for rho in (0.0, 0.5, 0.9):
        for tau in (1, 3, 17):
            opt = mx.optimizer.SGD(learning_rate=0.1, momentum=rho)
            w = mx.nd.zeros((1,))
            state = opt.create_state(0, w)
            for _ in range(tau):
                opt.update(0, w, mx.nd.ones((1,)), state)
            moved = -float(w.asscalar()) / 0.1
            assert agg.effective_steps(tau, rho) == pytest.approx(moved, rel=1e-5)
            assert agg.effective_steps(tau, rho) == pytest.approx(
                sum((1 - rho ** k) / (1 - rho) for k in range(1, tau + 1)))
    assert agg.effective_steps(0, 0.9) == 0
    with pytest.raises(ValueError):
        agg.effective_steps(-1)
    with pytest.raises(ValueError):
        agg.effective_steps(3, 1.0)


def _combined(aggregation, steps, deltas, momentum=0.0, batch=64):
    """What the servers end up adding with weighted pushes: sum(push_scale_i * delta_i) / n."""
    n = len(steps)
    counts = [agg.count_vector(k, k * batch, momentum) for k in steps]
    totals = np.sum(counts, axis=0).tolist()
    return sum(agg.push_scale(aggregation, c, totals, n) * d for c, d in zip(counts, deltas)) / n


def test_normalized_is_fednova():
    rng = np.random.RandomState(0)
    steps = [1, 1, 12, 9]
    deltas = [rng.randn(5) for _ in steps]
    for rho in (0.0, 0.9):
        a = np.array([agg.effective_steps(k, rho) for k in steps])
        p = np.full(len(steps), 1.0 / len(steps))          # equal data shares
        tau_eff = np.sum(p * a)
        reference = tau_eff * np.sum([pi * d / ai for pi, d, ai in zip(p, deltas, a)], axis=0)
        np.testing.assert_allclose(_combined("normalized", steps, deltas, rho), reference, rtol=1e-10)


def test_normalized_leaves_out_devices_that_did_no_step():
    rng = np.random.RandomState(1)
    steps = [0, 2, 6]
    deltas = [np.zeros(4), rng.randn(4), rng.randn(4)]
    a = np.array([2.0, 6.0])
    reference = a.mean() * np.mean([deltas[1] / 2.0, deltas[2] / 6.0], axis=0)
    np.testing.assert_allclose(_combined("normalized", steps, deltas), reference, rtol=1e-10)


def test_weighted_is_by_samples_and_mean_is_algorithm_1():
    rng = np.random.RandomState(2)
    steps = [1, 3, 8]
    deltas = [rng.randn(3) for _ in steps]
    np.testing.assert_allclose(_combined("weighted", steps, deltas),
                               np.sum([k * d for k, d in zip(steps, deltas)], axis=0) / sum(steps), rtol=1e-10)
    np.testing.assert_allclose(_combined("mean", steps, deltas), np.mean(deltas, axis=0), rtol=1e-10)
    assert agg.coefficient("weighted", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 3) == 0.0
    with pytest.raises(ConfigError, match="median"):
        agg.coefficient("median", [1, 1, 1], [2, 2, 2], 2)


def test_options_are_checked_by_name():
    good = get_spec("esync").defaults()
    agg.check_options(good)
    for name, bad in (("aggregation", "median"), ("outer_optimizer", "adam"), ("outer_lr", 0),
                      ("outer_momentum", 1.0), ("outer_momentum", -0.1), ("outer_lr", True)):
        with pytest.raises(ConfigError, match=name):
            agg.check_options(dict(good, **{name: bad}))


def _server(updater, key, w, rounds):
    """Apply the updater to ``w`` for each round's summed push; returns the weights after each."""
    weight = mx.nd.array(w)
    state = updater.create_state(key, weight)
    out = []
    for pushed in rounds:
        updater.update(key, weight, mx.nd.array(pushed), state)
        out.append(weight.asnumpy().copy())
    return out


def test_outer_none_equals_esync_average():
    rng = np.random.RandomState(3)
    w = rng.randn(4).astype("f")
    rounds = [rng.randn(4).astype("f") for _ in range(3)]
    new = _server(ESyncAggregate(3, epsilon=0.5), 0, w, rounds)
    old = _server(ESyncAverage(3, epsilon=0.5), 0, w, rounds)
    for a, b in zip(new, old):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_outer_nesterov_matches_the_numpy_reference_and_pytorch_nesterov():
    rng = np.random.RandomState(4)
    n, eps, lr, mu = 3, 0.5, 0.7, 0.9
    w0 = rng.randn(6).astype("f")
    rounds = [rng.randn(6).astype("f") for _ in range(4)]
    got = _server(pickle.loads(pickle.dumps(ESyncAggregate(n, eps, "nesterov", lr, mu), 0)), 0, w0, rounds)
    w, m = w0.astype("f8"), np.zeros(6)
    for pushed, after in zip(rounds, got):
        aggregate = eps * pushed / n
        w, m = agg.nesterov_step(w, m, aggregate, lr, mu)
        # torch.optim.SGD(nesterov=True) on the pseudo-gradient, written out
        np.testing.assert_allclose(after, w, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[-1], _server(ESyncAggregate(n, eps), 0, w0, rounds)[-1])


def test_outer_optimizer_leaves_plain_keys_and_control_keys_alone():
    upd = ESyncAggregate(2, 1.0, "nesterov", 0.7, 0.9, plain_keys=[1])
    w = np.ones(3, dtype="f")
    after = _server(upd, 1, w, [np.full(3, 2.0, dtype="f")] * 2)
    np.testing.assert_allclose(after[-1], w + 2.0)           # plain mean, twice
    control = _server(upd, keys.ESYNC_COUNT_KEY, np.zeros(3, dtype="f"), [np.array([3.0, 64.0, 1.0], "f")])
    np.testing.assert_allclose(control[0], [3.0, 64.0, 1.0])  # control keys store the sum
    assert keys.is_control_key(keys.ESYNC_COUNT_KEY)


def test_a_global_lr_moves_the_weights_and_leaves_batchnorm_statistics_at_their_mean():
    """ε scales the step of the weights only: a running variance that shrinks by 0.6 on average, moved
    ε = 4 times that, would be negative. The simulator's servers apply this rule to every key; with
    ε = 1 (the paper's ESync) statistics and weights take the same arithmetic, bit for bit."""
    var, pushed = np.ones(3, dtype="f"), [np.full(3, -1.2, dtype="f")]   # two workers' deltas, summed
    for outer in ("none", "nesterov"):
        upd = ESyncAggregate(2, 4.0, outer, 0.7, 0.9, plain_keys=[1])
        np.testing.assert_allclose(_server(upd, 1, var, pushed)[-1], var - 0.6)   # the mean delta
    np.testing.assert_allclose(_server(ESyncAggregate(2, 4.0, plain_keys=[1]), 0, var, pushed)[-1], var - 2.4)
    rng = np.random.RandomState(6)
    w, rounds = rng.randn(5).astype("f"), [rng.randn(5).astype("f") for _ in range(3)]
    paper = ESyncAggregate(3, 1.0, plain_keys=[1])
    for a, b in zip(_server(paper, 1, w, rounds), _server(paper, 0, w, rounds)):
        np.testing.assert_array_equal(a, b)


def test_initial_momentum_resumes_where_the_servers_left_off():
    rng = np.random.RandomState(5)
    w0 = rng.randn(4).astype("f")
    rounds = [rng.randn(4).astype("f") for _ in range(4)]
    full = _server(ESyncAggregate(2, 1.0, "nesterov", 0.5, 0.8), 0, w0, rounds)
    # replay the first two rounds on the numpy side, keeping the momentum
    w, m = w0.astype("f8"), np.zeros(4)
    for pushed in rounds[:2]:
        w, m = agg.nesterov_step(w, m, pushed / 2, 0.5, 0.8)
    resumed = _server(ESyncAggregate(2, 1.0, "nesterov", 0.5, 0.8, initial_momentum={0: m.astype("f")}),
                      0, full[1], rounds[2:])
    np.testing.assert_allclose(resumed[-1], full[-1], rtol=1e-5, atol=1e-6)
    # a server holds every array flat: a saved (2, 2) buffer fits its 4 elements
    flat = ESyncAggregate(2, outer="nesterov", initial_momentum={0: np.arange(4.0).reshape(2, 2)})
    np.testing.assert_allclose(flat.create_state(0, mx.nd.zeros((4,))).asnumpy(), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="elements"):
        ESyncAggregate(2, outer="nesterov", initial_momentum={0: np.zeros(3)}).create_state(0, mx.nd.zeros((4,)))


def test_initial_momentum_is_cut_as_mxnet_splits_a_large_array_over_the_servers():
    saved = np.arange(7.0).reshape(7, 1)
    assert server_part(5, 2, 0) == (0, 3)   # C's round: 2.5 -> 3 (Python's round would give 2)
    for num_servers in (2, 3):
        parts = []
        for rank in range(num_servers):
            lo, hi = server_part(7, num_servers, rank)
            upd = pickle.loads(pickle.dumps(ESyncAggregate(2, outer="nesterov", initial_momentum={0: saved}), 0))
            upd.bind_server(rank, num_servers)
            parts.append(upd.create_state(0, mx.nd.zeros((hi - lo,))).asnumpy())
            with pytest.raises(ValueError, match="server %d of %d" % (rank, num_servers)):
                upd.create_state(0, mx.nd.zeros((hi - lo + 1,)))
        np.testing.assert_array_equal(np.concatenate(parts), saved.ravel())   # contiguous parts, in rank order
    whole = ESyncAggregate(2, outer="nesterov", initial_momentum={0: saved})
    whole.bind_server(1, 2)   # a small array lives whole on one server
    np.testing.assert_array_equal(whole.create_state(0, mx.nd.zeros((7,))).asnumpy(), saved.ravel())
    for rank, num_servers in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="rank"):
            whole.bind_server(rank, num_servers)


def test_workers_recover_the_servers_momentum_from_the_updates():
    rng = np.random.RandomState(6)
    lr, mu = 0.7, 0.9
    w, m, mirror = rng.randn(5), np.zeros(5), np.zeros(5)
    for _ in range(20):
        new_w, m = agg.nesterov_step(w, m, rng.randn(5) * 0.1, lr, mu)
        mirror = agg.recover_momentum(mirror, new_w - w, lr, mu)
        w = new_w
    np.testing.assert_allclose(mirror, m, rtol=1e-8, atol=1e-10)


def test_updater_rejects_bad_arguments():
    for kwargs in ({"outer": "adam"}, {"outer_lr": 0}, {"outer_momentum": 1.0}):
        with pytest.raises(ValueError, match=list(kwargs)[0]):
            ESyncAggregate(2, **kwargs)


class _FakeChannel:
    """Sums the count vectors of several (pretend) workers, as dist_sync would."""
    num_workers = 3

    def __init__(self, others):
        self.others = others


class _FakeMode:
    def __init__(self, weights, globals_, grad_reqs, others, momentum=0.0):
        net_params = []
        for w, req in zip(weights, grad_reqs):
            p = mx.gluon.Parameter("p%d" % len(net_params), shape=w.shape, grad_req=req)
            p.initialize(ctx=mx.cpu())
            p.set_data(mx.nd.array(w))
            net_params.append(p)
        self.trainer = mx.gluon.Trainer(net_params, "sgd", {"learning_rate": 0.1, "momentum": momentum},
                                        kvstore=None)
        self.wbufs = [mx.nd.array(g) for g in globals_]
        self.channel = _FakeChannel(others)

    def weights(self):
        return [p.data() for p in self.trainer._params]

    def push_pull(self, keys_, values, outs):
        assert keys_ == [keys.ESYNC_COUNT_KEY]
        outs[0][:] = values[0] + mx.nd.array(np.sum(self.channel.others, axis=0))


def test_cluster_worker_scales_its_delta_and_keeps_statistics_plain():
    from mxhet.dataplane.weighting import DeltaWeighting
    rng = np.random.RandomState(7)
    g = [rng.randn(3), rng.randn(2)]
    w = [g[0] + rng.randn(3), g[1] + rng.randn(2)]
    others = [agg.count_vector(1, 64), agg.count_vector(10, 640)]
    mode = _FakeMode(w, g, ["write", "null"], others)
    weighting = DeltaWeighting("normalized")
    own = weighting.counts(4, 64, mode.trainer)
    assert own == agg.count_vector(4, 256)
    totals = [mx.nd.zeros((agg.COUNT_FIELDS,))]
    mode.push_pull([keys.ESYNC_COUNT_KEY], [mx.nd.array(own)], totals)
    weighting.scale(own, totals[0].asnumpy(), 3, mode.trainer._params, mode.weights(), mode.wbufs)
    expected = agg.push_scale("normalized", own, np.sum(others + [own], axis=0).tolist(), 3)
    assert weighting.last_factor == pytest.approx(expected)
    got = [a.asnumpy() for a in mode.weights()]
    np.testing.assert_allclose(got[0] - g[0], expected * (w[0] - g[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], w[1], rtol=1e-6)   # grad_req null: BatchNorm-like statistics
    assert not DeltaWeighting("mean").active


def test_worker_mirror_follows_the_servers_momentum_and_resumes_it():
    from mxhet.modes.esync_outer import OuterMomentumMirror
    rng = np.random.RandomState(8)
    lr, mu = 0.7, 0.9
    upd = ESyncAggregate(2, 1.0, "nesterov", lr, mu, plain_keys=[1])
    apply = mx.optimizer.get_updater(upd)           # MXNet's server-side path
    server = [mx.nd.array(rng.randn(4)), mx.nd.array(rng.randn(3))]
    mirror = OuterMomentumMirror(lr, mu, keys=[0])
    for _ in range(6):
        before = mirror.before(server)
        for key, w in enumerate(server):
            apply(key, mx.nd.array(rng.randn(*w.shape) * 0.1), w)
        mirror.after(before, server)
    np.testing.assert_allclose(mirror.buffers[0].asnumpy(), apply.states[0].asnumpy(), rtol=1e-4, atol=1e-6)
    assert 1 not in mirror.buffers and apply.states[1] is None
    # a checkpoint's arrays start a new updater where this one is
    resumed = OuterMomentumMirror(lr, mu, keys=[0])
    resumed.restore(mirror.arrays())
    upd2 = ESyncAggregate(2, 1.0, "nesterov", lr, mu, plain_keys=[1], initial_momentum=resumed.restored)
    text = pickle.dumps(upd2, 0).decode("utf-8")      # MXNet ships it as a UTF-8 string
    upd2 = pickle.loads(text.encode("utf-8"))
    np.testing.assert_allclose(upd2.create_state(0, server[0]).asnumpy(), mirror.buffers[0].asnumpy())
    with pytest.raises(ValueError, match="outer momentum"):
        resumed.restore({"weight": mx.nd.zeros((1,))})
