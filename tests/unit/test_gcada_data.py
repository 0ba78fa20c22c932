"""G-CADA's data split (``--dist group``) and its linear model."""
import mxnet as mx
import numpy as np
import pytest

from mxhet import data, models
from mxhet.control.gcada import group_of
from mxhet.errors import ConfigError


@pytest.mark.parametrize("workers, groups", [(12, 3), (6, 3), (4, 4), (5, 1)])
def test_group_shards_identical_within_disjoint_across_and_covering(workers, groups):
    labels = np.random.RandomState(2).randint(0, 10, size=1201)
    shards = [data.partition(labels, workers, p, dist="group", seed=5, groups=groups) for p in range(workers)]
    by_group = {}
    for p, shard in enumerate(shards):
        g = group_of(p, workers, groups)
        assert p // (workers // groups) == g
        if g in by_group:
            assert np.array_equal(shard, by_group[g]), "members of a group must hold the same shard"
        by_group[g] = shard
    assert len(by_group) == groups
    union = np.concatenate(list(by_group.values()))
    assert len(union) == len(np.unique(union)), "groups' shards must be disjoint"
    assert len(union) == 1201 - 1201 % groups, "the groups' shards must cover the data"
    # groups of one are the plain iid split
    if groups == workers:
        assert all(np.array_equal(s, data.partition(labels, workers, p, seed=5)) for p, s in enumerate(shards))


@pytest.mark.parametrize("kwargs, text", [({}, "needs the number of groups"), ({"groups": 4}, "must divide"),
                                          ({"groups": 0}, "groups must be")])
def test_group_split_refuses_bad_groups(kwargs, text):
    with pytest.raises(ConfigError, match=text):
        data.partition(np.zeros(60, np.int32), 6, 0, dist="group", **kwargs)


def test_linear_model_is_one_dense_layer():
    net = models.get_model("linear")
    net.initialize(mx.init.Xavier())
    out = net(mx.nd.ones((3, 1, 28, 28)))
    assert out.shape == (3, 10)
    shapes = sorted(p.shape for p in net.collect_params().values())
    assert shapes == [(10,), (10, 784)]


def test_exponential_iteration_times_on_both_engines():
    from mxhet.config import WorkerConfig, worker_config
    from mxhet.modes.base import SyncMode
    from mxhet.sim.engine import Device

    assert worker_config({"MXHET_SLOWDOWN_DIST": "exp"}).slowdown_dist == "exp"
    assert worker_config({}).slowdown_dist == "fixed"
    with pytest.raises(ConfigError, match="slowdown distribution"):
        worker_config({"MXHET_SLOWDOWN_DIST": "lognormal"})

    def sim_times(slot, dist):
        config = WorkerConfig(slot=slot, num_slots=2, slowdown=2.0, slowdown_dist=dist)
        dev = Device(slot, config, None, [], None, None, 1, np.random.RandomState([0, slot, 7]))
        return np.array([dev.iteration_time(0.0, 0.01, 0.0) for _ in range(4000)])

    def cluster_draws(slot):
        pacing = SyncMode.pacing_for(WorkerConfig(slot=slot, num_slots=2, slowdown_dist="exp"))
        return np.array([pacing.noise() for _ in range(4000)])

    assert np.all(sim_times(0, "fixed") == 0.02)
    for times in (sim_times(0, "exp") / 0.02, cluster_draws(0)):
        assert abs(times.mean() - 1.0) < 0.05 and abs(times.std() - 1.0) < 0.08   # Exp(1): mean = std = 1
        assert times.min() > 0 and np.median(times) < 0.75                           # median ln 2
    assert not np.array_equal(sim_times(0, "exp"), sim_times(1, "exp"))             # seeded per worker
    assert not np.array_equal(cluster_draws(0), cluster_draws(1))
    assert np.array_equal(cluster_draws(1), cluster_draws(1))
