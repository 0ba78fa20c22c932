"""ESync workers leave the job -- their script runs out of batches before the
slow worker's, or one dies under ``mxhet-launch --elastic`` -- and the others
train on, on real processes. The same mechanism as localsgd's
(test_elastic_leave.py): the State Server names each round's members, the
servers add every push (dist_async); Algorithm 2 looks for the slowest among
the devices still training."""
import json
import os
import signal
import sys
import textwrap
import time

import pytest

from .jobs import launch, train_command
from .test_elastic_leave import _non_chief_slots, _start, _wait_for, _worker_pid

pytestmark = pytest.mark.timeout(300)

# An epoch loop as MXNet users write it: every worker runs the same number of
# steps and just ends (no finish(), no stop condition); the fast ones run out
# of batches long before the 4x slower one. Only the Trainer line is mxhet's.
SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    import mxnet as mx
    from mxnet import autograd, gluon
    import mxhet
    from mxhet.models import get_model

    out_dir, steps, ack = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    slot = int(os.environ["MXHET_SLOT"])
    done = [0]

    def report():   # atexit runs the last registered first: this runs after the Trainer's hook
        with open(os.path.join(out_dir, "slot%d.json" % slot), "w") as f:
            json.dump({"steps": done[0], "rounds": trainer.stats.rounds,
                       "digest": trainer.stats.final_model_sha256, "departed": trainer.mode.departed,
                       "members": trainer.mode.round_members}, f)
    atexit.register(report)

    mx.random.seed(slot)
    net = get_model("smallcnn")
    net.initialize(mx.init.Xavier())
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05}, ack=ack)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        x = mx.nd.random.uniform(shape=(16, 1, 28, 28))
        y = mx.nd.array([i % 10 for i in range(16)])
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(16)
        done[0] += 1
''')


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_fast_workers_that_run_out_of_batches_first_end_with_the_global_model(tmp_path, child_pids, ack):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    # --base-iter pins an iteration to at least 0.05 s, the slow worker's to 0.2 s
    proc = launch(["-n", "3", "-s", "1", "--sync", "esync", "--slowdown", "1,1,4", "--base-iter", "0.05",
                   "--timeout", "200"],
                  [sys.executable, str(script), str(tmp_path), "16", ack], tmp_path, child_pids, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / ("slot%d.json" % s)).read_text()) for s in range(3)]
    assert [r["steps"] for r in results] == [16, 16, 16]
    assert all(r["departed"] for r in results)
    slow = results[2]
    # the fast workers left after a few rounds; the slow one aggregated on alone
    assert max(r["rounds"] for r in results[:2]) < slow["rounds"]
    assert slow["members"][0] == 3 and slow["members"][-1] == 1, slow["members"]
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests, results
    assert not child_pids.alive()


def _kill_one(tmp_path, child_pids, launcher_args, ack):
    out = tmp_path / "out"
    # --base-iter pins an iteration to at least 0.05 s: the 40 rounds outlast the kill
    proc, job_file, err = _start(tmp_path, ["-n", "3", "-s", "1", "--sync", "esync", "--base-iter", "0.05",
                                            "--slowdown", "1,1,2", "--timeout", "200", *launcher_args],
                                 train_command(out, "--max-rounds", "40", "--ack", ack))
    child_pids.add(proc.pid)
    try:
        _wait_for(out / "snapshots" / "000000.params", proc)   # training has started
        _wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        time.sleep(1.0)   # mid-training: some rounds done
        killed = _non_chief_slots(tmp_path / "launcher.err", 1)
        assert len(killed) == 1
        os.kill(_worker_pid(job_file, killed[0]), signal.SIGKILL)
        code = proc.wait(timeout=150)
    finally:
        err.close()
    return code, out, (tmp_path / "launcher.err").read_text(), killed


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_kill_9_of_an_esync_worker_with_elastic_the_others_finish_with_equal_models(tmp_path, child_pids, ack):
    code, out, stderr, killed = _kill_one(tmp_path, child_pids, ["--elastic"], ack)
    assert code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and "the others train on" in stderr, stderr[-3000:]
    survivors = sorted(set(range(3)) - set(killed))
    workers = [json.loads((out / ("worker-%d.json" % s)).read_text()) for s in survivors]
    assert not (out / ("worker-%d.json" % killed[0])).exists()
    assert workers[0]["final_model_sha256"] == workers[1]["final_model_sha256"] != ""
    assert workers[0]["rounds"] == workers[1]["rounds"] == 40
    summary = json.loads((out / "summary.json").read_text())
    assert summary["round_members"][0] == 3 and summary["round_members"][-1] == 2
    assert summary["departed_slots"] == killed
    assert not child_pids.alive()
