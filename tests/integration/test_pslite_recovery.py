"""PS-LITE's own recovery of a restarted worker, as MXNet 1.9.1 ships it: the base
``mxhet-launch --max-restarts`` is to build on (docs/operations.md, "Rejoining a
restarted worker"). With heartbeats on every node, the scheduler counts a killed worker
dead after ``PS_HEARTBEAT_TIMEOUT`` s and gives its id -- so its rank -- to the next
worker that connects, flagged ``is_recovery``; that worker's ``kv.init`` leaves the
global model alone and its first pull is the model the survivor kept training."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mxhet.launcher.ports import find_free_port

from .jobs import ROOT

pytestmark = pytest.mark.timeout(240)

HEARTBEAT_TIMEOUT_S = 3

WORKER = textwrap.dedent('''
    import os, sys, time
    import mxnet as mx

    kv = mx.kv.create("dist_async")
    restarted = bool(os.environ.get("RESTARTED"))
    print("RANK", kv.rank, flush=True)
    kv.init(3, mx.nd.ones((4,)) * (10 if kv.rank == 0 else 20))
    if not restarted:   # sent again, it would replace the servers' updater mid-run
        kv.set_optimizer(mx.optimizer.SGD(learning_rate=1.0))
    out = mx.nd.zeros((4,))
    kv.pull(3, out=out)
    print("PULLED", float(out[0].asscalar()), flush=True)
    step = 0
    while not os.path.exists(sys.argv[1]) and not (restarted and step == 3):
        kv.push(3, mx.nd.ones((4,)))
        kv.pull(3, out=out)
        step += 1
        print("STEP", step, float(out[0].asscalar()), flush=True)
        time.sleep(0.2)
    print("DONE", flush=True)
    os._exit(0)
''')


def _free_port():
    # a PS-LITE scheduler does not retry its bind: take a port no launcher of
    # another test will hand out (mxhet/launcher/ports.py)
    return find_free_port()


def _lines(path, tag):
    return [line.split()[1:] for line in path.read_text().splitlines() if line.startswith(tag + " ")]


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


def test_a_killed_worker_started_again_gets_its_rank_back_and_the_current_global_model(tmp_path, child_pids):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    stop = tmp_path / "stop"
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(_free_port()),
               DMLC_NUM_WORKER="2", DMLC_NUM_SERVER="1", DMLC_NODE_HOST="127.0.0.1", OMP_NUM_THREADS="1",
               PS_HEARTBEAT_INTERVAL="1", PS_HEARTBEAT_TIMEOUT=str(HEARTBEAT_TIMEOUT_S), PS_VERBOSE="1",
               PYTHONPATH=ROOT)

    def start(role, name, argv, **extra):
        log = open(tmp_path / (name + ".log"), "w")
        proc = subprocess.Popen(argv, env=dict(env, DMLC_ROLE=role, **extra), cwd=str(tmp_path), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        child_pids.add(proc.pid)
        return proc

    start("scheduler", "scheduler", [sys.executable, "-c", "import mxnet"])
    start("server", "server", [sys.executable, "-c", "import mxnet"])
    workers = {name: start("worker", name, [sys.executable, str(script), str(stop)]) for name in ("a", "b")}
    logs = {name: tmp_path / (name + ".log") for name in ("a", "b", "b2")}
    _wait_for(lambda: all(len(_lines(logs[n], "STEP")) >= 3 for n in "ab"), 120, "both workers to train")
    ranks = {n: int(_lines(logs[n], "RANK")[0][0]) for n in "ab"}
    victim = "a" if ranks["a"] == 1 else "b"   # rank 0 stays: its init is the one PS-LITE pushes
    survivor = "b" if victim == "a" else "a"
    os.kill(workers[victim].pid, signal.SIGKILL)
    workers[victim].wait(10)
    steps_at_death = len(_lines(logs[survivor], "STEP"))
    # the scheduler must count it dead first: a node connecting earlier is given no id
    time.sleep(HEARTBEAT_TIMEOUT_S + 2)
    replacement = start("worker", "b2", [sys.executable, str(script), str(stop)], RESTARTED="1")
    assert replacement.wait(120) == 0, logs["b2"].read_text()
    stop.touch()
    assert workers[survivor].wait(60) == 0

    assert int(_lines(logs["b2"], "RANK")[0][0]) == 1                      # the dead worker's rank
    scheduler = (tmp_path / "scheduler.log").read_text()
    assert "replace dead node" in scheduler and "is_recovery=1" in scheduler
    pulled = float(_lines(logs["b2"], "PULLED")[0][0])
    # its init (20) overwrote nothing: it pulled the model both workers had trained (10 less their pushes)
    assert pulled <= 10 - 2 * 3
    assert len(_lines(logs[survivor], "STEP")) > steps_at_death            # the survivor trained on meanwhile
    assert [s[0] for s in _lines(logs["b2"], "STEP")] == ["1", "2", "3"]   # and the replacement pushed and pulled
