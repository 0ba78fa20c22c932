"""Flat buckets in the data-plane channel give the same model as one key per parameter.

MXNet's in-process ``local`` kvstore runs the same updater on push as a
PS-LITE server does (the pushes of several workers are given as a list per
key and summed), so the two channels are compared without processes.
"""
import types

import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys as ps_keys
from kvstore_ext.updaters import ESyncAverage, ServerOptimizer
from mxhet.dataplane import channel as ch

SHAPES = [(16, 1, 3, 3), (16,), (16,), (32, 16, 3, 3), (32,), (10, 288), (10,), (7,)]


class Counters:
    bytes_pushed = bytes_pulled = 0
    sync_s = 0.0


class LocalChannel(ch.KVChannel):
    """A KVChannel on MXNet's local kvstore; ``push`` takes one list of values per worker."""

    def connect(self):
        self.kv = mx.kv.create("local")
        return self.kv

    def push_workers(self, keys, per_worker, outs):
        """Like push_pull, with every worker's values summed by the store (as dist_sync's servers do)."""
        if self.layout is None:
            self.kv.push(keys, [list(vs) for vs in zip(*per_worker)])
            self.kv.pull(keys, out=outs)
        else:
            packed = []
            for values in per_worker:
                flats = self.layout.flat_buffers()
                self.layout.pack(values, flats)
                packed.append(self.layout.wire(values, flats))
            self.kv.push(self.layout.bucket_keys, [list(vs) for vs in zip(*packed)])
            self.kv.pull(self.layout.bucket_keys, out=self.layout.wire(outs, self._flats[1]))
            self.layout.unpack(self._flats[1], outs)
        mx.nd.waitall()


def _run(bucket_bytes, updater, rounds=3, workers=3, seed=0):
    rng = np.random.RandomState(seed)
    weights = [mx.nd.array(rng.randn(*s).astype(np.float32)) for s in SHAPES]
    channel = LocalChannel("local", Counters(), bucket_bytes=bucket_bytes)
    channel.connect()
    ch_verify = types.SimpleNamespace()  # the probe needs servers; the local store has none
    import kvstore_ext.probe as probe
    saved, probe.verify_server_updater = probe.verify_server_updater, lambda *a, **k: ch_verify
    try:
        keys = list(range(len(SHAPES)))
        bufs = channel.share_model(keys, weights, updater, num_servers=1)
    finally:
        probe.verify_server_updater = saved
    for _ in range(rounds):
        deltas = [[mx.nd.array(rng.randn(*s).astype(np.float32) * 0.1) for s in SHAPES] for _ in range(workers)]
        channel.push_workers(keys, deltas, bufs)
    return channel, [b.asnumpy() for b in bufs]


def test_buckets_give_the_same_model_bit_for_bit():
    """One worker: the updater's arithmetic alone, element for element."""
    per_key, expected = _run(0, ESyncAverage(1, epsilon=0.7), workers=1)
    bucketed, got = _run(1 << 20, ESyncAverage(1, epsilon=0.7), workers=1)
    assert per_key.layout is None and bucketed.layout is not None
    assert len(bucketed.layout.bucket_keys) == 1
    for a, b in zip(expected, got):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_buckets_with_several_workers_agree_to_float_rounding():
    """Three workers: the store sums their pushes with a kernel that depends on
    the array's size, so the order of the additions (not the values) may differ
    -- as the arrival order of the pushes does on a real server."""
    _, expected = _run(0, ESyncAverage(3, epsilon=0.7))
    _, got = _run(1 << 20, ESyncAverage(3, epsilon=0.7))
    for a, b in zip(expected, got):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_small_buckets_split_consecutive_keys_and_keep_big_parameters_whole():
    layout = ch.BucketLayout(list(range(len(SHAPES))), [mx.nd.zeros(s) for s in SHAPES], 4 * 600)
    members = [b[2] for b in layout.buckets]
    assert sum(members, []) == list(range(len(SHAPES)))          # every key once, in order
    assert [5] in members                                         # 2,880 elements: a bucket of its own
    _, got = _run(4 * 600, ESyncAverage(1), workers=1)
    _, expected = _run(0, ESyncAverage(1), workers=1)
    assert all(np.array_equal(a, b) for a, b in zip(expected, got))


def test_only_elementwise_updaters_are_bucketed():
    assert ESyncAverage(2).elementwise
    assert not getattr(ServerOptimizer(2, mx.optimizer.SGD()), "elementwise", False)

    class PerKey(ESyncAverage):
        def apply(self, index, weight, grad, state):
            weight[:] += grad * index
    assert not PerKey(2).elementwise
    channel, _ = _run(1 << 20, ServerOptimizer(3, mx.optimizer.SGD(learning_rate=0.1)), rounds=1)
    assert channel.layout is None


def test_a_bucketed_channel_refuses_part_of_the_model_and_passes_control_keys():
    layout = ch.BucketLayout([0, 1, 2], [mx.nd.zeros((2,))] * 3, 1 << 20)
    assert layout.split([0, 1, 2, ps_keys.STOP_VOTE_KEY]) == ([0, 1, 2], [3])
    assert layout.split([ps_keys.STOP_VOTE_KEY]) == ([], [0])
    with pytest.raises(ValueError, match="every parameter key"):
        layout.split([0, 2])
    with pytest.raises(ValueError, match="bucket_bytes"):
        ch.KVChannel("dist_sync", Counters(), bucket_bytes=-1)


def test_the_simulator_charges_the_buckets_the_cluster_sends():
    from mxhet.sim import engine
    values = [mx.nd.zeros(s) for s in SHAPES]
    keys = list(range(len(SHAPES)))

    def sim(mode, updater):
        return types.SimpleNamespace(job=types.SimpleNamespace(mode=mode), _bucket_bytes=None, _wire=None,
                                     servers=types.SimpleNamespace(updater=updater, weights=values))
    esync = sim("esync", ESyncAverage(3))
    assert engine.Simulation.wire_keys(esync, values, keys) == 1
    assert engine.Simulation.wire_keys(esync, values[:1], [0]) == 1
    assert engine.Simulation.wire_keys(sim("sync", ServerOptimizer(3, mx.optimizer.SGD())), values, keys) == len(keys)
    assert engine.Simulation.wire_keys(sim("nodelay", ESyncAverage(3)), values, keys) == len(keys)
