"""Checkpoint, kill the whole job, resume: training continues from the saved round exactly."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from .jobs import ROOT, launch, load_summary, train_command

pytestmark = pytest.mark.timeout(400)

ROUNDS = 10


def _dump(out, slot, round_):
    return np.load(os.path.join(str(out), "dump", "slot%d_round%d.npz" % (slot, round_)))


def test_sync_resume_reproduces_an_uninterrupted_run(tmp_path, child_pids):
    common = ("--max-rounds", str(ROUNDS), "--time-budget", "300", "--dump-rounds", str(ROUNDS), "--seed", "3")
    ref = tmp_path / "reference"
    (tmp_path / "r").mkdir()
    proc = launch(["-n", "2", "-s", "1", "--sync", "sync"], train_command(ref, *common), tmp_path / "r", child_pids)
    assert proc.returncode == 0, proc.stderr[-2000:]

    # The same job with checkpoints every 5 rounds, killed (every process, SIGKILL) after round 5's.
    ckpt, first = tmp_path / "ckpt", tmp_path / "first"
    job_file = tmp_path / "job.json"
    argv = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", str(job_file),
            "-n", "2", "-s", "1", "--sync", "sync", "--slowdown", "1,30", "--",
            *train_command(first, *common, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "5")]
    job = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    child_pids.add(job.pid)
    round5 = ckpt / "round-00000005"
    deadline = time.monotonic() + 120
    while not all((round5 / name).exists() for name in ("global.params", "slot0.json", "slot1.json",
                                                         "slot0.states", "slot1.states")):
        assert job.poll() is None and time.monotonic() < deadline, "no complete checkpoint of round 5"
        time.sleep(0.05)
    record = child_pids.add_job_file(job_file)
    for p in [job.pid] + [p["pid"] for p in record["processes"]]:
        try:
            os.killpg(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait(timeout=30)
    assert not (ckpt / "round-00000010").exists()

    resumed = tmp_path / "resumed"
    (tmp_path / "s").mkdir()
    proc = launch(["-n", "2", "-s", "1", "--sync", "sync"],
                  train_command(resumed, *common, "--checkpoint-dir", str(ckpt), "--resume"),
                  tmp_path / "s", child_pids)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumes from round 5" in proc.stderr
    workers = load_summary(resumed)["workers"]
    assert all(w["rounds"] == ROUNDS for w in workers)
    for slot in (0, 1):
        for t in range(5, ROUNDS):  # rounds 6..10 of the resumed run
            a, b = _dump(ref, slot, t), _dump(resumed, slot, t)
            assert float(a["loss"]) == float(b["loss"]), (slot, t)
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key])
        assert not os.path.exists(os.path.join(str(resumed), "dump", "slot%d_round4.npz" % slot))
    meta = json.loads((round5 / "slot1.json").read_text())
    assert meta["round"] == 5 and meta["mode"]["rounds"] == 5


# ESync's resume (its round and model, from the checkpoint, with a new State Server and new servers) is checked
# on test_esync_aggregation.py's checkpoint-and-resume jobs, which also carry the servers' outer momentum.
