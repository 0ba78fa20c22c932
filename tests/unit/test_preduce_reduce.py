"""Partial Reduce's data path: the controller's groups and weights carried out
through the servers' own updater (what the cluster and the simulator both run),
and P = N against synchronous model averaging in the simulator."""
import glob
import json

import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys as ps_keys
from kvstore_ext.updaters import PartialReduceSum
from mxhet.control.preduce import PartialReduceController
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)

SHAPES = [(3, 4), (5,)]


class Servers:
    """The slot keys of a job, updated through MXNet's updater path as a PS-LITE server does."""

    def __init__(self, num_workers, group_size, slots):
        self.keys = [ps_keys.preduce_keys(s, len(SHAPES)) for s in range(slots)]
        self.store = {k: mx.nd.zeros(shape) for keys in self.keys for k, shape in zip(keys, SHAPES)}
        self.apply = mx.optimizer.get_updater(PartialReduceSum(num_workers, group_size))

    def push(self, slot, arrays):
        for key, a in zip(self.keys[slot], arrays):
            self.apply(key, a.copy(), self.store[key])

    def pull(self, slot):
        return [self.store[key].copy() for key in self.keys[slot]]


def _run(n, p, dynamic, rounds, seed):
    """Random READY orders; every group reduces through the servers exactly as a
    member does (push β·x, the barrier: all pushed, pull). Checks every reduce."""
    rng = np.random.RandomState(seed)
    models = [[mx.nd.array(rng.randn(*s)) for s in SHAPES] for _ in range(n)]
    ctl = PartialReduceController(n, p, dynamic=dynamic, alpha=0.5)
    servers = Servers(n, p, ctl.num_slots)
    k = [0] * n
    reduces = 0
    idle = list(range(n))
    while reduces < rounds:
        rank = idle.pop(rng.randint(len(idle)))
        k[rank] += int(rng.randint(1, 4))          # some local steps (their effect: a random nudge)
        models[rank] = [a + 0.1 * mx.nd.array(rng.randn(*a.shape)) for a in models[rank]]
        for group in ctl.ready(rank, k[rank]):
            before = [[a.asnumpy() for a in m] for m in models]
            expected = [sum(b * before[r][i] for r, b in zip(group.members, group.weights))
                        for i in range(len(SHAPES))]
            for r, b in zip(group.members, group.weights):
                servers.push(group.slot, [a * b for a in models[r]])
                ctl.push_done(r, group.id)
            for r in group.members:                 # the barrier passed: everyone pulls
                models[r] = servers.pull(group.slot)
                k[r] = group.k
            for r in range(n):
                for i in range(len(SHAPES)):
                    if r in group.members:
                        np.testing.assert_allclose(models[r][i].asnumpy(), expected[i], rtol=1e-5, atol=1e-6)
                    else:
                        np.testing.assert_array_equal(models[r][i].asnumpy(), before[r][i])   # untouched
            if not dynamic:
                for i in range(len(SHAPES)):
                    np.testing.assert_allclose(sum(m[i] for m in before),
                                               sum(m[i].asnumpy() for m in models), rtol=1e-5, atol=1e-5)
            assert max(k[r] for r in group.members) == group.k == min(k[r] for r in group.members)
            idle += list(group.members)
            reduces += 1
    return models


@pytest.mark.parametrize("n,p,dynamic", [(4, 2, False), (5, 3, True), (6, 2, True), (3, 3, False)])
def test_members_hold_the_weighted_sum_and_non_members_are_untouched(n, p, dynamic):
    _run(n, p, dynamic, rounds=30, seed=n * 10 + p)


def test_the_final_average_on_the_parameter_keys():
    """Every worker pushes x_i/N once to a parameter key: the servers hold the mean."""
    apply = mx.optimizer.get_updater(PartialReduceSum(3, 2))
    stored = mx.nd.array([100.0, 100.0])              # the initial model: overwritten, not added to
    for x in ([3.0, 6.0], [0.0, 3.0], [6.0, 0.0]):
        apply(0, mx.nd.array(x) / 3, stored)
    np.testing.assert_allclose(stored.asnumpy(), [3.0, 3.0], rtol=1e-6)


FAST = ("--model", "smallcnn", "--eval-samples", "50", "--final-eval-samples", "50", "--eval-interval", "100",
        "--bn-batches", "0")


def _final_model(tmp_path, name, *argv):
    out = tmp_path / name
    args = cli.build_parser().parse_args([*argv, *FAST, "--metrics-out", str(out)])
    args.argv = list(argv)
    summary = cli.run(args)
    last = sorted(glob.glob(str(out / "snapshots" / "*.params")))[-1]
    return summary, {k: v.asnumpy() for k, v in mx.nd.load(last).items()}


def test_p_equal_n_is_synchronous_model_averaging_every_step(tmp_path):
    common = ("-n", "3", "--slowdown", "1,2,3", "--base-iter", "0.05", "--time-budget", "100",
              "--seed", "3", "--lr", "0.1")
    # Partial Reduce computes the iteration that carries the stop wish and averages it in the job's final
    # model (every worker pushes x_i/N), so its 4 rounds are 5 averaged steps: local SGD's 5 rounds
    preduce, a = _final_model(tmp_path, "preduce", *common, "--max-rounds", "4", "--sync", "preduce",
                              "--group-size", "3", "--weights", "constant")
    localsgd, b = _final_model(tmp_path, "localsgd", *common, "--max-rounds", "5", "--sync", "localsgd",
                               "--local-steps", "1")
    assert [w["iterations"] for w in preduce["workers"]] == [w["iterations"] for w in localsgd["workers"]] == [5] * 3
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5, err_msg=name)
    # and it is not trivially so: the model moved
    first = sorted(glob.glob(str(tmp_path / "preduce" / "snapshots" / "*.params")))[0]
    assert any(not np.allclose(v.asnumpy(), a[k]) for k, v in mx.nd.load(first).items())
    assert json.loads((tmp_path / "preduce" / "summary.json").read_text())["mode"] == "preduce"
