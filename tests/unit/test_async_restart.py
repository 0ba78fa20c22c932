"""``async`` under ``mxhet-launch --elastic --max-restarts 1``, the worker's side, with fakes of the State
Server client and the kvstore channel: a worker started again takes the servers' optimizer as it is (it ships
none, so their state survives), says it rejoined, and leaves at once after the job's end; the test-only hook
``MXHET_TEST_KILL_AFTER_PUSH`` kills a rank after its push, before its pull (the hook itself:
test_kill_hook.py)."""
import types

import pytest

from mxhet.config import WorkerConfig
from mxhet.modes import get_mode
from mxhet.modes import gradient
from mxhet.modes.base import SyncMode


class _Channel:
    rank, num_workers, kv = 1, 3, object()

    def __init__(self):
        self.calls = []

    def push(self, keys, values):
        self.calls.append(("push", tuple(keys)))

    def pull(self, keys, outs):
        self.calls.append(("pull", tuple(keys)))

    def push_pull(self, keys, values, outs):
        self.calls.append(("push_pull", tuple(keys)))


def _async(monkeypatch, rejoined=False, job_over=False, kill=""):
    mode = get_mode("async")(trainer=None, config=WorkerConfig(sync="async", elastic=True, state_server="tcp://x:1",
                                                               test_kill_after_push=kill))
    mode.channel = _Channel()
    client = types.SimpleNamespace(rejoined=rejoined, job_over=job_over)
    monkeypatch.setattr(mode, "join_state_server", lambda: client)
    monkeypatch.setattr(SyncMode, "server_updater", lambda self, batch_size: "the script's optimizer")
    return mode


def test_a_restarted_async_worker_rejoins_without_shipping_an_updater(monkeypatch):
    first = _async(monkeypatch)
    first.on_connect()
    assert first.stats.rejoined_at_round is None and first.server_updater(64) == "the script's optimizer"
    back = _async(monkeypatch, rejoined=True)
    back.on_connect()
    # its first push after the pull of the current model is its step 0; the servers keep their optimizer
    assert back.stats.rejoined_at_round == 0 and back.server_updater(64) is None


def test_a_restarted_async_worker_after_the_jobs_end_leaves_at_once(monkeypatch):
    left = []
    monkeypatch.setattr(gradient, "leave_too_late", left.append)
    late = _async(monkeypatch, job_over=True)
    late.on_connect()
    assert left == [late]


def test_an_async_worker_dies_after_its_push_was_applied_and_before_its_pull(monkeypatch):
    class Killed(Exception):
        pass

    def kill(spec, rank, round_index, sent):
        raise Killed((spec, rank, round_index))
    monkeypatch.setattr(gradient, "kill_if_due", kill)
    mode = _async(monkeypatch, kill="1:4")
    mode._push_round = 3
    mode.push_pull([0, 1], ["g0", "g1"], ["w0", "w1"])
    assert mode.channel.calls == [("push_pull", (0, 1))]   # another step: one push and pull, as without the hook
    mode._push_round = 4
    with pytest.raises(Killed):
        mode.push_pull([0, 1], ["g0", "g1"], ["w0", "w1"])
    assert mode.channel.calls[1:] == [("push", (0, 1))]    # pushed (and applied: push waits), never pulled
