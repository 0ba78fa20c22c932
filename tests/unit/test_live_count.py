"""nodelay's data-plane thread and a worker that left its loop: before each
round's push it exchanges how many workers still train, and the m training
workers push their update times N/m, so the servers' mean over N (the departed
ones push zeros) is the mean over the m; with nobody gone the update is pushed
untouched."""
import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys as ps_keys
from mxhet.errors import MxhetError
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


class MemberKV(FakeKV):
    """dist_async servers as one --elastic worker sees them: the calls, in order."""

    def __init__(self):
        super().__init__(live=3)
        self.calls = []

    def push(self, keys, values):
        self.calls.append("push")
        super().push(keys, values)

    def pull(self, keys, out):
        self.calls.append("pull")
        super().pull(keys, out)


def test_under_elastic_the_courier_pushes_w_x_over_the_members_and_pulls_only_once_released():
    kv = MemberKV()
    courier = Courier(kv, [0, 1], clock=lambda: 0.0, members=True)
    sends = [mx.nd.full((2, 2), 0.3), mx.nd.full((3,), -0.6)]
    expected = [s.asnumpy() / 2 for s in sends]
    try:
        courier.submit(4, sends, [mx.nd.zeros((2, 2)), mx.nd.zeros((3,))], training=2)
        reported = []
        for _ in range(200):
            reported += courier.take_pushed()
            if reported:
                break
            assert courier.take(timeout=0.05) is None
        # its push is applied and reported; no pull (and no live count) before the State Server releases it
        assert reported == [4] and kv.calls == ["push"]
        assert courier.take(timeout=0.2) is None and courier.busy
        courier.release(4)
        assert courier.take(timeout=10.0) == (4, 0.0) and kv.calls == ["push", "pull"]
    finally:
        courier.close()
    assert ps_keys.LIVE_KEY not in kv.pushed
    for key, want in enumerate(expected):
        np.testing.assert_allclose(kv.pushed[key], want, rtol=1e-6)


def test_under_elastic_a_release_of_another_round_fails_the_transfer():
    courier = Courier(MemberKV(), [0], clock=lambda: 0.0, members=True)
    try:
        courier.submit(1, [mx.nd.ones((2,))], [mx.nd.zeros((2,))], training=1)
        courier.release(2)
        with pytest.raises(MxhetError, match="round 2's pull was released while round 1 waited"):
            courier.take(timeout=10.0)
    finally:
        courier.close()
