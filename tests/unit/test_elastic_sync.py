"""``sync`` under ``--elastic`` / ``--events`` (:class:`mxhet.modes.gradient.ElasticSync`): each step is a
round of the members the State Server names, one local optimizer step each, their deltas averaged. The
rules: the maths equals ``sync``'s server-side step (SGD, momentum, weight decay, Nesterov), the
optimizers for which it would not are refused, the registry picks the executor, the simulator's
``--events`` run it."""
import glob

import mxnet as mx
import numpy as np
import pytest

from kvstore_ext.updaters import MemberSum
from mxhet import launcher
from mxhet.errors import ConfigError
from mxhet.modes import get_mode
from mxhet.modes.gradient import ElasticSync, Sync
from mxhet.modes.localsgd import LocalSGD
from mxhet.modes.registry import get_program
from mxhet.policy.specs import SYNC, SYNC_ELASTIC, executor_spec
from mxhet.protocol import programs
from mxhet.sim import cli

from tests.unit.test_sim import _sim

BATCH = 8


def _server_path(optimizer, weights, grads):
    """Today's ``sync``: the servers sum the N workers' gradients and apply the script's optimizer
    (:class:`kvstore_ext.updaters.ServerOptimizer`, rescale 1/(batch·N)) once per step."""
    n = len(grads[0])
    update = mx.optimizer.get_updater(Sync.updater_for(n, BATCH, optimizer, {}))
    w = [mx.nd.array(x) for x in weights]
    for step in grads:
        for key in range(len(w)):
            update(key, mx.nd.array(sum(g[key] for g in step)), w[key])
    return [x.asnumpy() for x in w]


def _member_path(make_optimizer, weights, grads):
    """ElasticSync: each member applies its own optimizer (rescale 1/batch, as the Gluon Trainer's step)
    to a replica of the global model and pushes its delta / m; the servers add every push
    (:class:`kvstore_ext.updaters.MemberSum`)."""
    n = len(grads[0])
    server = mx.optimizer.get_updater(MemberSum(n))
    local = [mx.optimizer.get_updater(ElasticSync.optimizer_copy(make_optimizer(), 1.0 / BATCH)) for _ in range(n)]
    w = [mx.nd.array(x) for x in weights]
    for step in grads:
        deltas = []
        for member in range(n):
            replica = [x.copy() for x in w]
            for key in range(len(w)):
                local[member](key, mx.nd.array(step[member][key]), replica[key])
            deltas.append([r - x for r, x in zip(replica, w)])
        for member in range(n):
            for key in range(len(w)):
                server(key, deltas[member][key] / n, w[key])
    return [x.asnumpy() for x in w]


@pytest.mark.parametrize("name, params", [
    ("sgd", {"learning_rate": 0.1}),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
    ("nag", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4}),
    ("sgd", {"momentum": 0.9, "lr_scheduler": "factor"}),
])
def test_the_members_mean_one_step_delta_is_syncs_server_step(name, params):
    rng = np.random.RandomState(7)
    shapes = [(4, 3), (5,)]
    weights = [rng.randn(*s).astype("float32") for s in shapes]
    grads = [[[rng.randn(*s).astype("float32") * BATCH for s in shapes] for _ in range(3)] for _ in range(8)]

    def make():   # one per process, as on the cluster (a schedule is stateful)
        kwargs = dict(params)
        if kwargs.get("lr_scheduler") == "factor":
            kwargs["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(step=3, factor=0.5, base_lr=0.1)
        return mx.optimizer.create(name, **kwargs)
    server = _server_path(make(), weights, grads)
    members = _member_path(make, weights, grads)
    for a, b, w0 in zip(server, members, weights):
        assert not np.allclose(a, w0)   # it trained
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, params, word", [
    ("adam", {}, "'adam'"),
    ("rmsprop", {}, "'rmsprop'"),
    ("sgd", {"clip_gradient": 1.0}, "clip_gradient=1.0"),
])
def test_optimizers_whose_step_is_not_linear_in_the_gradient_are_refused_naming_them(name, params, word):
    optimizer = mx.optimizer.create(name, **params)
    with pytest.raises(ConfigError, match="sync under --elastic.*%s" % word):
        ElasticSync.check_optimizer(optimizer)
    with pytest.raises(ConfigError, match=word):   # the simulator's updater too
        ElasticSync.updater_for(3, BATCH, optimizer, {})
    Sync.updater_for(3, BATCH, optimizer, {})   # without --elastic: accepted, as before


def test_sgd_and_nag_are_accepted():
    for optimizer in (mx.optimizer.SGD(momentum=0.9, wd=1e-4), mx.optimizer.NAG(momentum=0.9)):
        ElasticSync.check_optimizer(optimizer)


def test_the_registry_picks_the_elastic_executor_only_under_elastic():
    assert get_mode("sync") is Sync and get_mode("sync", elastic=True) is ElasticSync
    assert get_mode("localsgd", elastic=True) is LocalSGD   # a mode with one executor keeps it
    assert get_program("sync") is programs.sync and get_program("sync", True) is programs.sync_rounds
    assert ElasticSync.name == "sync" and ElasticSync.kvstore_type == "dist_async"
    assert ElasticSync.exchanges_deltas and Sync.kvstore_type == "dist_sync" and not Sync.exchanges_deltas
    assert executor_spec("sync") is SYNC and executor_spec("sync", elastic=True) is SYNC_ELASTIC
    assert SYNC_ELASTIC.state_rules == ("membership",) and executor_spec("esync", True).name == "esync"


def test_the_launcher_accepts_sync_under_elastic_and_max_restarts():
    plan = launcher.plan(["-n", "3", "-s", "1", "--sync", "sync", "--elastic", "--max-restarts", "1",
                          "--", "python", "train.py"])
    assert plan.elastic
    [state] = [p for p in plan.processes if "mxhet.state_server" in " ".join(p.argv)]
    assert "membership" in state.argv[state.argv.index("--rules") + 1]


def _final_model(tmp_path, name, *argv):
    """The final global model of a simulated job (parameter names sorted; two runs in one process give
    the network other prefixes, so they are compared in this order)."""
    out = tmp_path / name
    args = cli.build_parser().parse_args([*argv, "--eval-samples", "50", "--final-eval-samples", "50",
                                          "--eval-interval", "100", "--no-progress", "--metrics-out", str(out)])
    args.argv = list(argv)
    summary = cli.run(args)
    final = mx.nd.load(sorted(glob.glob(str(out / "snapshots" / "*.params")))[-1])
    return summary, [(key, final[key].asnumpy()) for key in sorted(final)]


def test_the_simulator_runs_sync_with_events_as_syncs_step_on_resnet18(tmp_path):
    # --events whose leave comes after the job's end: the elastic executor, nobody leaves. ResNet-18 (BatchNorm):
    # every trained weight is sync's (float rounding apart; a few rounds: longer runs amplify the last-bit
    # differences of the two sums); the BatchNorm statistics are the members' mean, where sync's servers keep
    # the initial ones (each worker's stay local). measured: about 7 CPU s for the two runs.
    common = ("-n", "3", "--sync", "sync", "--model", "resnet18_v1", "--base-iter", "0.05", "--max-rounds", "2",
              "--batch-size", "4", "--momentum", "0.9", "--wd", "0.0005")
    plain, a = _final_model(tmp_path, "plain", *common)
    elastic, b = _final_model(tmp_path, "elastic", *common, "--events", "2:leave@1000")
    assert "elastic" not in plain and elastic["elastic"]["membership"]["rounds_by_rank"]
    assert len(a) == len(b) > 60
    statistics = 0
    for (key, x), (_, y) in zip(a, b):
        if "running_" in key:
            statistics += 1
            assert np.array_equal(x, np.zeros_like(x) if "mean" in key else np.ones_like(x)) and not np.allclose(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5, err_msg=key)
    assert statistics > 20


def test_a_sync_device_that_leaves_and_joins_again_takes_part_in_later_rounds_and_ends_on_the_same_model(
        tmp_path):
    summary, workers = _sim(tmp_path, "rejoin", "-n", "3", "--sync", "sync", "--base-iter", "0.05",
                            "--time-budget", "2", "--events", "2:leave@0.5,2:join@1.1")
    membership = summary["elastic"]["membership"]
    events = membership["events"]
    assert [(e["event"], e["rank"], e["cause"]) for e in events] == [
        ("leave", 2, "left its loop"), ("join", 2, "restarted")]
    join = events[1]["round"]
    assert workers[2]["rejoined_at_round"] == join and workers[0]["rejoined_at_round"] is None
    took = membership["rounds_by_rank"]["2"]
    others = membership["rounds_by_rank"]["0"]
    assert membership["rounds_by_rank"]["1"] == others
    # one step a round: it took part before it left, missed the rounds in between, and every one from its join on
    missed = [r for r in others if r not in took]
    assert took[0] == 0 and missed and all(r < join for r in missed)
    assert [r for r in others if r >= join] == [r for r in took if r >= join] and len(missed) < len(others)
    assert all(w["rounds"] == workers[0]["rounds"] for w in workers.values())
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert summary["final_accuracy"] >= 0.4


def test_the_simulator_refuses_adam_for_sync_with_events(tmp_path):
    with pytest.raises(ConfigError, match="'adam'"):
        _sim(tmp_path, "adam", "-n", "3", "--sync", "sync", "--base-iter", "0.05", "--max-rounds", "2",
             "--optimizer", "adam", "--events", "2:leave@0.1")
