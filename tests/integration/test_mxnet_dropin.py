"""mxhet-launch as a drop-in for MXNet's tools/launch.py: plain MXNet distributed
programs (no mxhet import, no State Server registration, MXNet's own optimizer
shipped to the servers with set_optimizer) run unchanged, invoked the way
MXNet's launcher is (``-n 2 -s 2 --launcher local python prog.py``, no ``--``).

The program's result is checked against the value MXNet's own semantics give:
SGD with momentum on the servers, applied to the sum of the workers' pushes
(dist_sync), computed here with numpy.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.integration.jobs import ROOT

LR, MOMENTUM, WD, STEPS = 0.1, 0.9, 0.01, 3

PROGRAM = textwrap.dedent('''
    import json, os, sys
    import mxnet as mx

    kv = mx.kv.create("dist_sync")
    # MXNet's own optimizer on the servers: every push is a gradient
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=%(lr)r, momentum=%(momentum)r, wd=%(wd)r,
                                      rescale_grad=1.0 / kv.num_workers))
    shapes = {3: (4,), 9: (1200, 1000)}  # key 9 is big enough for MXNet to split it across the servers
    for key, shape in shapes.items():
        kv.init(key, mx.nd.ones(shape))
    out = {key: mx.nd.zeros(shape) for key, shape in shapes.items()}
    for step in range(%(steps)d):
        for key, shape in shapes.items():
            kv.push(key, mx.nd.full(shape, (kv.rank + 1) * (step + 1)))
        for key in shapes:   # a training step: push the gradients, pull the new weights
            kv.pull(key, out=out[key])
        mx.nd.waitall()
    if kv.rank == 0 and sys.argv[1] == "raise":
        raise RuntimeError("deliberate error on rank 0 before the barrier")
    with open(os.path.join(sys.argv[2], "rank%%d.json" %% kv.rank), "w") as f:
        json.dump({"small": out[3].asnumpy().tolist(), "big_min": float(out[9].min().asscalar()),
                   "big_max": float(out[9].max().asscalar()), "env": os.environ.get("MY_SETTING"),
                   "omp": os.environ.get("OMP_NUM_THREADS"), "wait": os.environ.get("OMP_WAIT_POLICY")}, f)
''') % {"lr": LR, "momentum": MOMENTUM, "wd": WD, "steps": STEPS}

STUCK = textwrap.dedent('''
    import sys
    import mxnet as mx
    kv = mx.kv.create("dist_sync")
    kv.init(3, mx.nd.ones((2,)))
    if kv.rank == 1:
        raise RuntimeError("deliberate error on rank 1 before its push")
    kv.push(3, mx.nd.ones((2,)))
    out = mx.nd.zeros((2,))
    kv.pull(3, out=out)   # waits for rank 1's push, which never comes
    print(out.asnumpy())
''')


def expected_weight(num_workers=2):
    """MXNet's SGD with momentum (mom = m*mom - lr*(rescale*g + wd*w); w += mom) on the pushes' sum."""
    w, mom = 1.0, 0.0
    for step in range(STEPS):
        grad = sum((rank + 1) * (step + 1) for rank in range(num_workers)) / num_workers
        mom = MOMENTUM * mom - LR * (grad + WD * w)
        w += mom
    return w


def _run(tmp_path, child_pids, program, *argv, timeout=200):
    script = tmp_path / "prog.py"
    script.write_text(program)
    job_file = tmp_path / "job.json"
    cmd = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", str(job_file), *argv]
    env = dict(os.environ, PYTHONPATH=ROOT, MY_SETTING="from-the-launcher", OMP_NUM_THREADS="3")
    env.pop("OMP_WAIT_POLICY", None)   # the launcher's default applies
    try:
        return subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if job_file.exists():
            child_pids.add_job_file(str(job_file))


@pytest.mark.timeout(300)
def test_plain_mxnet_program_runs_unchanged_with_mxnets_result(tmp_path, child_pids):
    proc = _run(tmp_path, child_pids, PROGRAM, "-n", "2", "-s", "2", "--launcher", "local",
                "--env-worker", "MY_SETTING:set-for-workers", "--timeout", "150",
                sys.executable, "prog.py", "ok", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    want = expected_weight()
    for rank in (0, 1):
        got = json.loads((tmp_path / ("rank%d.json" % rank)).read_text())
        assert got["small"] == pytest.approx([want] * 4, rel=1e-5)
        assert got["big_min"] == pytest.approx(want, rel=1e-5) and got["big_max"] == pytest.approx(want, rel=1e-5)
        assert got["env"] == "set-for-workers"   # --env-worker
        assert got["omp"] == str(max(1, (os.cpu_count() or 1) // 2))  # workers: CPUs / workers per host
        assert got["wait"] == "PASSIVE"   # a spinning OpenMP thread would hold a core a busy neighbour needs
    record = json.loads((tmp_path / "job.json").read_text())
    assert record["status"] == "succeeded"
    # A plain worker needs no State Server; the job ends when its workers are done.
    assert {p["role"] for p in record["processes"]} >= {"scheduler", "server", "worker"}


@pytest.mark.timeout(300)
def test_a_plain_worker_stuck_after_an_error_ends_the_job_before_the_timeout(tmp_path, child_pids):
    # Rank 1 raises and MXNet keeps it in PS-LITE's exit barrier; rank 0 waits
    # for its push forever. Neither registers with the State Server.
    proc = _run(tmp_path, child_pids, STUCK, "-n", "2", "-s", "1", "--launcher", "local", "--timeout", "150",
                "--hang-grace", "5", sys.executable, "prog.py")
    assert proc.returncode == 1, proc.stderr[-4000:]   # not 124: the timeout did not end it
    assert "printed an uncaught exception" in proc.stderr
    assert "RuntimeError: deliberate error on rank 1" in proc.stderr
    record = json.loads((tmp_path / "job.json").read_text())
    assert record["status"] == "failed"
    assert [p for p in record["processes"] if p.get("failure")][0]["role"] == "worker"


@pytest.mark.timeout(300)
def test_the_last_worker_idle_after_its_peers_exited_ends_the_job(tmp_path, child_pids):
    # Worker 0 is done; worker 1 waits, idle, for something that will never come.
    program = textwrap.dedent('''
        import os, time
        if os.environ["MXHET_SLOT"] == "1":
            time.sleep(3600)
    ''')
    proc = _run(tmp_path, child_pids, program, "-n", "2", "-s", "1", "--sync", "sync", "--timeout", "150",
                "--orphan-grace", "3", "--", sys.executable, "prog.py")
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "worker 1" in proc.stderr and "every other worker exited" in proc.stderr
    record = json.loads((tmp_path / "job.json").read_text())
    assert [(p["role"], p["slot"]) for p in record["processes"] if p.get("failure")] == [("worker", 1)]
