"""nodelay's data-plane thread and a worker that left its loop: before each
round's push it exchanges how many workers still train, and the m training
workers push their update times N/m, so the servers' mean over N (the departed
ones push zeros) is the mean over the m; with nobody gone the update is pushed
untouched."""
import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys as ps_keys
from mxhet.modes.nodelay import Courier


class FakeKV:
    """Three workers' dist_sync servers as seen by one: the live count reads ``live``."""
    num_workers = 3

    def __init__(self, live):
        self.live, self.pushed = live, {}

    def push(self, keys, values):
        if not isinstance(keys, list):
            keys, values = [keys], [values]
        for k, v in zip(keys, values):
            self.pushed[k] = v.asnumpy().copy()

    def pull(self, keys, out):
        if not isinstance(keys, list):
            keys, out = [keys], [out]
        for k, o in zip(keys, out):
            o[:] = self.live if k == ps_keys.LIVE_KEY else 0.0


@pytest.mark.parametrize("live, training, factor, announced", [(3, True, 1.0, 1.0), (2, True, 1.5, 1.0),
                                                               (1, True, 3.0, 1.0), (2, False, 1.0, 0.0)])
def test_the_training_workers_push_their_update_times_n_over_the_live_count(live, training, factor, announced):
    kv = FakeKV(live)
    courier = Courier(kv, [0, 1], clock=lambda: 0.0)
    sends = [mx.nd.full((2, 2), 0.1), mx.nd.full((3,), -0.7)]
    expected = [s.asnumpy() * factor for s in sends]
    try:
        courier.submit(5, sends, [mx.nd.zeros((2, 2)), mx.nd.zeros((3,))], training=training)
        assert courier.take(timeout=10.0) == (5, 0.0)
    finally:
        courier.close()
    assert kv.pushed[ps_keys.LIVE_KEY] == announced
    assert courier.live == {5: live}
    for key, want in enumerate(expected):
        if factor == 1.0:
            assert np.array_equal(kv.pushed[key], want)   # untouched: bit-identical to plain nodelay
        else:
            np.testing.assert_allclose(kv.pushed[key], want, rtol=1e-6)
