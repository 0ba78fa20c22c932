"""A worker leaves the job -- its script stops calling ``step()``, or it dies
under ``mxhet-launch --elastic`` -- and the others train on, on real processes
(scheduler, server, State Server, workers on 127.0.0.1). One mechanism serves
both: the State Server names each round's members (mxhet.control.membership),
the servers add every push (dist_async), the workers scale theirs by the
member count (mxhet.modes.rounds)."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from .jobs import ROOT, launch, train_command

pytestmark = pytest.mark.timeout(300)

# An ordinary loop, but every worker runs a different number of steps and just
# ends: no trainer.finish(), no stop condition. The only mxhet line is the
# Trainer's; the report is written at exit, after the Trainer's own exit hook.
SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    import mxnet as mx
    from mxnet import autograd, gluon
    import mxhet
    from mxhet.models import get_model

    out_dir, steps = sys.argv[1], int(sys.argv[2])
    slot = int(os.environ["MXHET_SLOT"])
    mine = steps * (slot + 1)          # slot 0 leaves first, slot 2 last
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
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05}, local_steps=2)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(mine):
        x = mx.nd.random.uniform(shape=(16, 1, 28, 28))
        y = mx.nd.array([i % 10 for i in range(16)])
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(16)
        done[0] += 1
''')


def test_workers_that_leave_their_loop_at_different_steps_end_with_the_global_model(tmp_path, child_pids):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    proc = launch(["-n", "3", "-s", "1", "--sync", "localsgd", "--timeout", "200"],
                  [sys.executable, str(script), str(tmp_path), "6"], tmp_path, child_pids, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / ("slot%d.json" % s)).read_text()) for s in range(3)]
    assert [r["steps"] for r in results] == [6, 12, 18]
    # τ = 2: rounds every 2 steps; after slot 0 left the others averaged without it
    assert [r["rounds"] for r in results] == [3, 6, 9]
    assert results[2]["members"] == [3, 3, 3, 2, 2, 2, 1, 1, 1]
    assert all(r["departed"] for r in results)
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests, results
    assert not child_pids.alive()


def _start(tmp_path, launcher_args, command):
    job_file = tmp_path / "job.json"
    err = open(tmp_path / "launcher.err", "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", str(job_file),
                             *launcher_args, "--", *command], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                            env=dict(os.environ, PYTHONPATH=ROOT), start_new_session=True)
    return proc, job_file, err


def _wait_for(path, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, "the job ended before %s appeared" % path
        assert time.monotonic() < deadline, "%s did not appear" % path
        time.sleep(0.2)


def _worker_pid(job_file, slot):
    record = json.loads(job_file.read_text())
    return next(p["pid"] for p in record["processes"] if p["role"] == "worker" and p["slot"] == slot)


def _non_chief_slots(err_path, count):
    """Slots whose worker is not PS-LITE rank 0 (the chief writes summary.json), from the workers' log lines."""
    found = re.findall(r"slot (\d+) is PS-LITE rank (\d+)", err_path.read_text())
    return sorted({int(slot) for slot, rank in found if rank != "0"})[:count]


def _kill_one(tmp_path, child_pids, elastic_args, victims=1, workers=3):
    out = tmp_path / "out"
    # --base-iter pins an iteration to at least 0.05 s: the 40 rounds of 4 steps outlast the kill
    proc, job_file, err = _start(tmp_path, ["-n", str(workers), "-s", "1", "--sync", "localsgd", "--base-iter", "0.05",
                                            "--timeout", "200", *elastic_args],
                                 train_command(out, "--max-rounds", "40", "--local-steps", "4"))
    child_pids.add(proc.pid)
    try:
        _wait_for(out / "snapshots" / "000000.params", proc)   # training has started
        _wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        time.sleep(1.0)   # mid-training: some rounds done
        killed = _non_chief_slots(tmp_path / "launcher.err", victims)
        assert len(killed) == victims
        for slot in killed:
            os.kill(_worker_pid(job_file, slot), signal.SIGKILL)
        code = proc.wait(timeout=150)
    finally:
        err.close()
    return code, out, (tmp_path / "launcher.err").read_text(), killed


def test_kill_9_of_a_worker_with_elastic_the_others_finish_with_equal_models(tmp_path, child_pids):
    code, out, stderr, killed = _kill_one(tmp_path, child_pids, ["--elastic"])
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


def test_kill_9_without_elastic_still_fails_fast(tmp_path, child_pids):
    code, _, stderr, killed = _kill_one(tmp_path, child_pids, [])
    assert code == 1
    assert "worker %d" % killed[0] in stderr and "SIGKILL" in stderr, stderr[-2000:]
    assert not child_pids.alive()


def test_a_death_below_the_minimum_ends_the_job_with_a_clear_error(tmp_path, child_pids):
    code, _, stderr, _ = _kill_one(tmp_path, child_pids, ["--elastic", "--min-workers", "3"])
    assert code == 1, stderr[-3000:]
    assert "fewer than the job's minimum of 3" in stderr, stderr[-3000:]
    assert not child_pids.alive()


def test_two_workers_killed_at_once_leave_two_survivors_with_equal_models(tmp_path, child_pids):
    code, out, stderr, killed = _kill_one(tmp_path, child_pids, ["--elastic"], victims=2, workers=4)
    assert code == 0, stderr[-4000:]
    survivors = sorted(set(range(4)) - set(killed))
    workers = [json.loads((out / ("worker-%d.json" % s)).read_text()) for s in survivors]
    assert len({w["final_model_sha256"] for w in workers}) == 1 and workers[0]["final_model_sha256"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["departed_slots"] == killed and summary["round_members"][-1] == 2
    assert not child_pids.alive()
