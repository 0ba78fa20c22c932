"""Mode dylu (asynchronous local SGD with Delayed Nesterov and Dynamic Local
Updates): the H_i rule, the servers' update rule on fixed numbers worked out
by hand, the worker program fed scripted results, and simulator runs on the
small CNN and on ResNet-18 with a 4x slower device."""
import pickle

import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys as ps_keys
from kvstore_ext.updaters import DelayedNesterov
from mxhet.errors import ConfigError
from mxhet.modes import WorkerStats, get_mode, get_program
from mxhet.policy import get_spec
from mxhet.policy.dylu import check_options, fastest, local_steps_for
from mxhet.protocol import Compute, Payload, PushAsync, Session, ShareSpeed, WantsStop
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)


# -- H_i ------------------------------------------------------------------------

def test_local_steps_scale_with_speed_relative_to_the_fastest():
    assert local_steps_for(8, 0.1, 0.1) == 8          # the fastest itself
    assert local_steps_for(8, 0.4, 0.1) == 2          # 4x slower
    assert local_steps_for(8, 0.3, 0.1) == 3          # 8/3 = 2.67, rounded to the nearest
    assert local_steps_for(8, 0.101, 0.1) == 8        # 1% slower (measurement noise): still H
    assert local_steps_for(8, 0.16, 0.1) == 5         # 8/1.6 = 5
    assert local_steps_for(8, 3.2, 0.1) == 1          # 8/32 = 0.25: one step
    assert local_steps_for(8, 10.0, 0.1) == 1         # never below one step
    assert local_steps_for(8, 0.1 * 3, 0.1 * 3) == 8  # equal up to float rounding: H
    assert local_steps_for(8, 0.05, 0.1) == 8         # a stale "fastest" slower than this device: at most H
    assert local_steps_for(8, None, 0.1) == 8 and local_steps_for(8, 0.2, None) == 8   # nothing measured
    with pytest.raises(ValueError, match="positive integer"):
        local_steps_for(0, 0.1, 0.1)


def test_fastest_skips_unknown_speeds():
    assert fastest((0.0, 0.3, 0.2)) == 0.2
    assert fastest((0.0, 0.0)) is None and fastest(()) is None


def test_options_are_checked():
    spec = get_spec("dylu")
    check_options(spec.defaults())
    assert spec.kvstore == "dist_async" and spec.exchanges_deltas
    for bad in ({"local_steps": 0}, {"outer_lr": 0.0}, {"outer_momentum": 1.0}, {"nesterov_period": -1},
                {"nesterov_period": 1.5}, {"dynamic": "yes"}):
        with pytest.raises(ConfigError, match=list(bad)[0]):
            check_options(spec.resolve(bad))


# -- Delayed Nesterov on the servers ------------------------------------------------

def _servers(rule, weights):
    """The rule as a PS-LITE server runs it: unpickled, behind MXNet's updater."""
    apply = mx.optimizer.get_updater(pickle.loads(pickle.dumps(rule, 0)))
    arrays = {k: mx.nd.array(v) for k, v in weights.items()}

    def push(key, delta):
        apply(key, mx.nd.array(delta), arrays[key])
        return arrays[key].asnumpy()
    return push


def test_delayed_nesterov_by_hand():
    # lr 0.5, mu 0.5, N 2. Pushes are deltas; g = -delta. Every push: w += (lr/N)*delta = 0.25*delta.
    push = _servers(DelayedNesterov(2, outer_lr=0.5, outer_momentum=0.5, period=2), {0: [1.0, 2.0]})
    np.testing.assert_allclose(push(0, [0.2, -0.4]), [1.05, 1.9], rtol=1e-6)
    # 2nd push: w = [1.15, 1.9]; buffer b = [-0.6, 0.4], m = b/2 = [-0.3, 0.2], w -= 0.25*m
    np.testing.assert_allclose(push(0, [0.4, 0.0]), [1.225, 1.85], rtol=1e-6)
    np.testing.assert_allclose(push(0, [0.0, 0.8]), [1.225, 2.05], rtol=1e-6)
    # 4th push: w = [1.175, 2.05]; b = [0.2, -0.8], m = 0.5*[-0.3, 0.2] + [0.1, -0.4] = [-0.05, -0.3]
    np.testing.assert_allclose(push(0, [-0.2, 0.0]), [1.1875, 2.125], rtol=1e-6)


def test_delayed_nesterov_over_n_pushes_is_one_nesterov_step_on_their_mean():
    rng = np.random.RandomState(0)
    lr, mu, n = 0.7, 0.9, 3
    w0 = rng.randn(5)
    push = _servers(DelayedNesterov(n, outer_lr=lr, outer_momentum=mu, period=n), {0: w0})
    w, m = w0.copy(), np.zeros(5)
    for _ in range(3):
        deltas = rng.randn(n, 5) * 0.1
        for d in deltas:
            got = push(0, d)
        g = -deltas.mean(axis=0)
        m = mu * m + g
        w = w - lr * (g + mu * m)
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_delayed_nesterov_counts_each_key_alone_and_averages_plain_keys():
    rule = DelayedNesterov(4, outer_lr=1.0, outer_momentum=0.5, period=2, plain_keys=[1])
    push = _servers(rule, {0: [0.0], 1: [1.0]})
    np.testing.assert_allclose(push(0, [1.0]), [0.5])          # w += (1/2)*1
    np.testing.assert_allclose(push(1, [2.0]), [1.5])          # plain: w += 2/4
    np.testing.assert_allclose(push(1, [2.0]), [2.0])          # ... no momentum, no period
    # key 0's 2nd push: w = 1.0; b = -2, m = -1, w -= 1*0.5*(-1)
    np.testing.assert_allclose(push(0, [1.0]), [1.5])
    # control keys keep the last push
    control = mx.nd.zeros((1,))
    mx.optimizer.get_updater(rule)(ps_keys.SPEED_KEY_BASE, mx.nd.array([0.25]), control)
    assert control.asscalar() == pytest.approx(0.25)


def test_delayed_nesterov_refuses_bad_arguments():
    for kwargs, name in (({"outer_lr": 0}, "outer_lr"), ({"outer_momentum": 1.0}, "outer_momentum"),
                         ({"period": 0}, "period")):
        with pytest.raises(ValueError, match=name):
            DelayedNesterov(2, **kwargs)


def test_the_mode_ships_delayed_nesterov_with_n_defaulting_to_the_workers():
    opts = get_spec("dylu").defaults()
    rule = get_mode("dylu").updater_for(5, 64, None, opts)
    assert isinstance(rule, DelayedNesterov) and rule.period == 5
    assert rule.outer_lr == 0.7 and rule.outer_momentum == 0.9
    assert get_mode("dylu").updater_for(5, 64, None, dict(opts, nesterov_period=2)).period == 2


def test_speed_keys_are_control_keys():
    keys = ps_keys.speed_keys(3)
    assert keys == [94_000, 94_001, 94_002] and all(ps_keys.is_control_key(k) for k in keys)
    assert ps_keys.ESYNC_COUNT_KEY not in ps_keys.speed_keys(999)
    with pytest.raises(ValueError, match="at most 999"):
        ps_keys.speed_keys(1000)


# -- the worker program, fed scripted results ----------------------------------------

def _drive(opts, iteration_s, others_s, rounds):
    """Run the program for ``rounds`` pushes as a device of ``iteration_s`` seconds per iteration
    among devices of ``others_s``; returns its effects in order."""
    stats = WorkerStats()
    session = Session(get_program("dylu")(get_spec("dylu").resolve(opts), stats))
    effects, pushes = [], 0
    effect = session.advance()
    while effect is not None:
        effects.append(effect)
        result = None
        if isinstance(effect, Compute):
            stats.iterations += 1
            stats.compute_s += iteration_s
        elif isinstance(effect, ShareSpeed):
            result = tuple(others_s) + (effect.iteration_s,)
        elif isinstance(effect, PushAsync):
            pushes += 1
        elif isinstance(effect, WantsStop):
            result = pushes == rounds
        effect = session.advance(result)
    return effects, stats


def test_the_program_steps_by_speed_from_its_first_iteration_and_pushes_deltas():
    effects, stats = _drive({"local_steps": 8}, 0.4, (0.1, 0.1), rounds=3)
    assert stats.local_iters == [2, 2, 2] and stats.rounds == 3 and stats.iterations == 6
    shares = [e for e in effects if isinstance(e, ShareSpeed)]
    assert [s.iteration_s for s in shares] == pytest.approx([0.4, 0.4, 0.4, 0.4])
    assert [e for e in effects if isinstance(e, PushAsync)] == [PushAsync(Payload.DELTAS, r) for r in range(3)]
    assert all(e.local_step for e in effects if isinstance(e, Compute))
    # the first iteration's speed is shared at once: the first round's H_i follows it
    assert [type(e) for e in effects[:6]] == [Compute, ShareSpeed, Compute, ShareSpeed, PushAsync, WantsStop]
    # the order of a later round: the computes, the speeds, the push, then the wish to stop
    assert [type(e) for e in effects[6:11]] == [Compute, Compute, ShareSpeed, PushAsync, WantsStop]


def test_the_fastest_keeps_h_and_dynamic_off_keeps_h_everywhere():
    _, fast = _drive({"local_steps": 8}, 0.1, (0.4, 0.1), rounds=3)
    assert fast.local_iters == [8, 8, 8]
    # the first to finish an iteration knows no faster device: H
    _, first = _drive({"local_steps": 8}, 0.4, (0.0, 0.0), rounds=1)
    assert first.local_iters == [8]
    effects, slow = _drive({"local_steps": 8, "dynamic": False}, 0.4, (0.1, 0.1), rounds=3)
    assert slow.local_iters == [8, 8, 8] and not any(isinstance(e, ShareSpeed) for e in effects)


def test_the_program_checks_its_options():
    with pytest.raises(ConfigError, match="local_steps"):
        next(get_program("dylu")(get_spec("dylu").resolve({"local_steps": 0}), WorkerStats()))


# -- the simulator ------------------------------------------------------------------------

FAST = ("--eval-samples", "200", "--final-eval-samples", "300", "--no-progress")


def _sim(tmp_path, name, *argv):
    args = cli.build_parser().parse_args([*argv, *FAST, "--metrics-out", str(tmp_path / name)])
    args.argv = list(argv)
    summary = cli.run(args)
    return summary, {w["slot"]: w for w in summary["workers"]}


def test_small_cnn_learns_and_the_slow_device_runs_fewer_local_steps(tmp_path):
    common = ("-n", "3", "--sync", "dylu", "--slowdown", "1,1,4", "--base-iter", "0.05", "--time-budget", "3",
              "--model", "smallcnn", "--eval-interval", "1", "--seed", "0")
    summary, workers = _sim(tmp_path, "dylu", *common)
    assert summary["final_accuracy"] >= 0.5                          # chance: 0.1
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert workers[0]["local_iters"] == workers[1]["local_iters"] == [8] * workers[0]["rounds"]
    assert set(workers[2]["local_iters"]) == {2}   # 8 / 4, from the first round on
    _, fixed = _sim(tmp_path, "fixed", *common, "--dynamic-local-steps", "off")
    assert set(fixed[2]["local_iters"]) == {8}


def test_resnet18_learns_with_a_4x_slower_device(tmp_path):
    summary, workers = _sim(tmp_path, "resnet", "-n", "3", "--sync", "dylu", "--slowdown", "1,1,4",
                            "--base-iter", "0.1", "--time-budget", "2.8", "--local-steps", "4",
                            "--model", "resnet18_v1", "--input-size", "32", "--batch-size", "16", "--lr", "0.05",
                            "--eval-interval", "0.8", "--bn-batches", "2", "--seed", "0")
    assert max(acc for _, acc in summary["curve"]) >= 0.3            # chance: 0.1
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert set(workers[0]["local_iters"]) == {4}
    assert set(workers[2]["local_iters"]) == {1}


def test_a_run_ends_within_one_round_of_its_slowest_device_after_the_budget(tmp_path):
    """A device 16x slower runs one step a round from its first (H = 8 of its steps, 6.4 s, would end the
    run 3.4 s after its 3 s budget); each device stops after the round under way, as in ``async``."""
    summary, workers = _sim(tmp_path, "overrun", "-n", "3", "--sync", "dylu", "--slowdown", "1,1,16",
                            "--base-iter", "0.05", "--time-budget", "3", "--model", "smallcnn", "--batch-size", "16",
                            "--eval-interval", "1", "--seed", "0")
    slow_iteration = 16 * 0.05
    assert set(workers[2]["local_iters"]) == {1} and set(workers[0]["local_iters"]) == {8}
    assert 3 <= summary["sim"]["virtual_s"] <= 3 + slow_iteration + 0.1   # one slow round and its push


def test_the_cluster_mode_refuses_bad_options_before_connecting():
    from mxhet.config import WorkerConfig
    with pytest.raises(ConfigError, match="nesterov_period"):
        get_mode("dylu")(trainer=None, config=WorkerConfig(), nesterov_period=-1)
    mode = get_mode("dylu")(trainer=None, config=WorkerConfig(), local_steps=4)
    assert mode.opts["local_steps"] == 4 and mode.kvstore_type == "dist_async" and not mode.votes


class _Channel:
    """The kvstore channel, in process: control keys keep the last push (dist_async)."""
    rank, num_workers = 1, 3

    def __init__(self):
        self.store = {}

    def init(self, keys, values):
        for k, v in zip(keys, values):
            self.store[k] = v.asnumpy().copy()

    def push_pull(self, keys, values, outs):
        for k, v, o in zip(keys, values, outs):
            self.store[k] = v.asnumpy().copy()
            o[:] = self.store[k]

    def pull(self, keys, outs):
        for k, o in zip(keys, outs):
            o[:] = self.store[k]


def test_the_cluster_carries_out_share_speed_and_pushes_deltas_asynchronously():
    from mxhet.config import WorkerConfig
    mode = get_mode("dylu")(trainer=None, config=WorkerConfig(slot=1, num_slots=3))
    mode.channel = _Channel()
    exchanged = []
    mode.exchange_deltas = lambda round_index, *extra: exchanged.append((round_index, extra))
    mode.on_setup(64)
    assert isinstance(mode.session.pending, Compute)
    mode.channel.store[ps_keys.SPEED_KEY_BASE + 2] = np.array([0.4], dtype=np.float32)   # rank 2 published
    assert mode.carry_out(ShareSpeed(0.1)) == pytest.approx((0.0, 0.1, 0.4))
    assert mode.channel.store[ps_keys.SPEED_KEY_BASE + 1][0] == pytest.approx(0.1)
    mode.aggregated = False
    assert mode.carry_out(PushAsync(Payload.DELTAS, 5)) is None
    assert exchanged == [(5, ())] and mode.aggregated   # no stop ballot: the workers stop alone
