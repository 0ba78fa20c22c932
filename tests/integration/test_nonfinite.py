"""NaN/Inf in what a worker pushes: a clear error, or a skipped contribution; the global model stays finite."""
import os

import mxnet as mx
import numpy as np
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(240)

# A learning rate that overflows float32 within the first local iterations.
EXPLODE = ("--lr", "1e38", "--max-rounds", "3", "--time-budget", "60")


def test_nonfinite_delta_stops_the_job_naming_worker_and_round(tmp_path, child_pids):
    proc = launch(["-n", "2", "-s", "1", "--sync", "esync", "--slowdown", "1,2"],
                  train_command(tmp_path / "out", *EXPLODE), tmp_path, child_pids)
    assert proc.returncode == 1
    assert "NonFiniteError" in proc.stderr and "non-finite values" in proc.stderr
    assert "in round 0" in proc.stderr and "worker slot" in proc.stderr
    assert not child_pids.alive()


@pytest.mark.parametrize("mode", ["esync"])
def test_skip_keeps_the_global_model_finite(tmp_path, child_pids, mode):
    out = tmp_path / "out"
    proc = launch(["-n", "2", "-s", "1", "--sync", mode],
                  train_command(out, *EXPLODE, "--on-nonfinite", "skip"), tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = load_summary(out)
    assert all(w["skipped_pushes"] >= 1 for w in summary["workers"])
    snaps = sorted(os.listdir(out / "snapshots"))
    final = mx.nd.load(str(out / "snapshots" / snaps[-1]))
    assert all(np.isfinite(arr.asnumpy()).all() for arr in final.values())
