"""The test-only kill hook (``MXHET_TEST_KILL_AFTER_PUSH``, ``MXHET_TEST_KILL_COMPUTING``): which worker it
kills, in which round, in its first life only, what it leaves at PATH, and that every mode calls the one
hook. The integration tests place their deaths with it (test_elastic_*.py)."""
import signal
import subprocess
import sys

import numpy as np
import pytest

from mxhet.errors import ConfigError
from mxhet.modes import gradient, killhook, nodelay, preduce, rounds
from mxhet.modes.killhook import KillSpec, kill_due, kill_if_due, parse_kill_spec


class Killed(Exception):
    pass


@pytest.fixture
def no_death(monkeypatch):
    """The hook raises :class:`Killed` instead of sending SIGKILL to the test process."""
    def die():
        raise Killed()
    monkeypatch.setattr(killhook, "_die", die)


def test_the_spec_names_ranks_a_round_and_a_path_that_may_hold_colons():
    assert parse_kill_spec("1:4") == KillSpec(frozenset({1}), 4, "")
    assert parse_kill_spec("2,3:3") == KillSpec(frozenset({2, 3}), 3, "")
    assert parse_kill_spec("1:3:/tmp/a:b.npz") == KillSpec(frozenset({1}), 3, "/tmp/a:b.npz")


@pytest.mark.parametrize("spec", ["1", "x:3", "1:x", "1,:3", ":3"])
def test_a_malformed_spec_is_refused_naming_it(spec):
    with pytest.raises(ConfigError, match="RANK\\[,RANK...\\]:ROUND\\[:PATH\\], got %r" % spec):
        parse_kill_spec(spec)


def test_a_path_goes_with_one_rank():
    # one file marks one process's first life: a second rank would find it and live
    with pytest.raises(ConfigError, match="names 2 ranks"):
        parse_kill_spec("2,3:3:/tmp/mark")


def test_the_hook_names_its_ranks_and_round_in_the_first_life_only(tmp_path):
    saved = tmp_path / "push.npz"
    assert not kill_due("", 1, 4)
    assert kill_due("1:4", 1, 4) and not kill_due("1:4", 2, 4) and not kill_due("1:4", 1, 5)
    assert kill_due("2,3:4", 2, 4) and kill_due("2,3:4", 3, 4) and not kill_due("2,3:4", 1, 4)
    assert kill_due("1:4:%s" % saved, 1, 4)
    saved.write_bytes(b"")   # the first life saved its push and died: its replacement is not killed
    assert not kill_due("1:4:%s" % saved, 1, 4)


def test_after_a_push_it_saves_what_was_pushed_then_dies_once(tmp_path, no_death):
    import mxnet as mx
    saved = tmp_path / "push.npz"
    spec = "1:4:%s" % saved
    pushed = [mx.nd.array([1.0, 2.0]), mx.nd.array([[3.0]])]
    kill_if_due(spec, 1, 3, pushed)   # another round: nothing happens
    kill_if_due(spec, 2, 4, pushed)   # another rank
    assert not saved.exists()
    with pytest.raises(Killed):
        kill_if_due(spec, 1, 4, pushed)
    with np.load(saved) as arrays:
        assert arrays.files == ["arr_0", "arr_1"]
        np.testing.assert_array_equal(arrays["arr_0"], [1.0, 2.0])
        np.testing.assert_array_equal(arrays["arr_1"], [[3.0]])
    kill_if_due(spec, 1, 4, pushed)   # the worker started again in its place lives


def test_while_computing_it_marks_its_path_then_dies_once(tmp_path, no_death):
    mark = tmp_path / "dead"
    with pytest.raises(Killed):
        kill_if_due("2:3:%s" % mark, 2, 3)
    assert mark.read_bytes() == b""
    kill_if_due("2:3:%s" % mark, 2, 3)
    with pytest.raises(Killed):   # no path: every life at that round
        kill_if_due("2,3:3", 3, 3)
    kill_if_due("", 3, 3)


def test_the_hook_sends_sigkill_to_its_own_process(tmp_path):
    mark = tmp_path / "dead"
    code = ("from mxhet.modes.killhook import kill_if_due\n"
            "kill_if_due(%r, 0, 0)\n"
            "print('alive')\n" % ("0:0:%s" % mark))
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL and first.stdout == "", (first.returncode, first.stderr[-2000:])
    assert mark.exists()
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == "alive\n", again.stderr[-2000:]


def test_every_mode_with_a_kill_point_calls_the_one_hook():
    # esync, sync and localsgd (rounds), async (gradient), nodelay, preduce; gcada's mid-push kill is its own
    for module in (rounds, gradient, nodelay, preduce):
        assert module.kill_if_due is killhook.kill_if_due, module.__name__
    assert gradient.kill_due is killhook.kill_due
