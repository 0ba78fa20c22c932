"""The launcher's hang watch on a worker that stalls before its first step
(rule 5 of :mod:`mxhet.launcher.watch`): it prints nothing and raises nothing,
so only its progress note and its idle CPU tell."""
import json
import sys
import textwrap

import pytest

from .jobs import launch

pytestmark = pytest.mark.timeout(200)

# the Trainer exists, then the worker waits for something that never comes, idle
STALLS = textwrap.dedent('''
    import threading
    import mxnet as mx
    import mxhet
    net = mx.gluon.nn.Dense(2)
    net.initialize()
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    threading.Event().wait()
''')


def test_a_worker_idle_before_its_first_step_ends_the_job_before_the_timeout(tmp_path, child_pids):
    script = tmp_path / "stalls.py"
    script.write_text(STALLS)
    proc = launch(["-n", "2", "-s", "1", "--sync", "sync", "--start-grace", "5", "--timeout", "150"],
                  [sys.executable, str(script)], tmp_path, child_pids, timeout=180)
    assert proc.returncode == 1, proc.stderr[-3000:]   # not 124: the watch ended it, not the timeout
    assert "has not finished a step, and has used no CPU for" in proc.stderr, proc.stderr[-3000:]
    record = json.loads((tmp_path / "job.json").read_text())
    assert record["status"] == "failed"
    assert [p for p in record["processes"] if p.get("failure")][0]["role"] == "worker"
    assert not child_pids.alive()
