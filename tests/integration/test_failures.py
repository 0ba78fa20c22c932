"""A job never hangs: a killed worker or a stopped (hung) worker ends the whole job, loudly."""
import signal
import sys

import pytest

from .jobs import kill_and_wait, train_command

pytestmark = pytest.mark.timeout(400)


def test_kill_9_of_one_of_four_workers_ends_the_job(tmp_path, child_pids):
    # One launch: the launcher notices a dead child the same way whatever the moment of the round (it
    # waits on every process), so the three launches at 0, 0.3 and 0.6 s this once was proved nothing more.
    # The victim is a fast worker: its peers then wait in their next push for it, the hang PS-LITE would leave.
    # Without --elastic (test_elastic_leave.py's deaths are with it).
    out = tmp_path / "out"
    # the launcher ends the job at once; 60 s only bounds a hang
    code, stderr, _ = kill_and_wait(tmp_path, child_pids, ["-n", "4", "-s", "1", "--sync", "esync", "--slowdown",
                                                           "1,1,1,8"],
                                    train_command(out, "--time-budget", "120"), out, victims=[0], after=0, timeout=60)
    assert code == 1
    assert "worker 0" in stderr and "SIGKILL" in stderr, stderr[-2000:]
    assert not child_pids.alive()


def test_a_hung_worker_is_noticed_by_the_state_server(tmp_path, child_pids):
    # sync, a mode that needs no State Server for its algorithm: every worker's session still sends heartbeats
    # (mxhet.modes.base.SyncMode.on_connect, the same for every mode; a second launch in async proved nothing
    # more), and the fast workers wait in their next push for the hung one, the hang PS-LITE would leave
    out = tmp_path / "out"
    code, stderr, _ = kill_and_wait(tmp_path, child_pids, ["-n", "3", "-s", "1", "--sync", "sync", "--slowdown",
                                                           "1,1,4", "--heartbeat-timeout", "3"],
                                    train_command(out, "--time-budget", "120"), out, victims=[1],
                                    signum=signal.SIGSTOP, after=0, timeout=60)   # alive, but silent
    assert code == 1
    assert "sent nothing for over 3 s" in stderr and "(slot 1)" in stderr, stderr[-2000:]
    assert "state-server" in stderr
    assert not child_pids.alive()


MISMATCHED_WORKER = """
import os
import mxnet as mx
from mxnet import gluon
import mxhet

slot = int(os.environ["MXHET_SLOT"])
net = gluon.nn.Dense(4 + slot, in_units=3)         # slot 1 has another model
net.initialize()
trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
trainer.setup(8)
print("joined", flush=True)
"""


def test_a_worker_with_another_model_is_refused_before_any_push(tmp_path, child_pids):
    from .jobs import launch
    script = tmp_path / "worker.py"
    script.write_text(MISMATCHED_WORKER)
    proc = launch(["-n", "2", "-s", "1", "--sync", "esync"], [sys.executable, str(script)], tmp_path, child_pids)
    assert proc.returncode == 1
    assert "differs from rank" in proc.stderr, proc.stderr[-2000:]
    assert not child_pids.alive()


def test_a_killed_state_server_is_restarted_and_training_goes_on(tmp_path, child_pids):
    from .jobs import load_summary
    out = tmp_path / "out"
    # --base-iter pins a round to at least 4 x 0.05 s: the 25 rounds outlast the kill 1 s into training on any
    # machine (a fast one finished them in 1.4 s, before the kill, and the State Server was never needed again)
    code, stderr, _ = kill_and_wait(tmp_path, child_pids, ["-n", "3", "-s", "1", "--sync", "esync", "--slowdown",
                                                           "1,1,4", "--base-iter", "0.05"],
                                    train_command(out, "--max-rounds", "25", "--time-budget", "120"), out,
                                    victims="state-server")
    assert code == 0, stderr[-3000:]
    assert "restarting it on the same address" in stderr
    assert stderr.count(") registered") >= 6, stderr[-3000:]   # every worker registered again
    workers = load_summary(out)["workers"]
    assert all(w["rounds"] == 25 for w in workers)
    assert not child_pids.alive()
