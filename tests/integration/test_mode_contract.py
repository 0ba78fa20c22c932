"""ADSP's commit schedule on loopback with heterogeneous speeds.

The contract every mode keeps (learns, ends cleanly, keeps its synchronization
rule) is checked on the runs of ``mxhet-bench all --preset smoke``, in
``test_bench_smoke.py``.
"""
import json

import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)


def test_adsp_commit_counts_stay_equal_at_checkpoints(tmp_path, child_pids):
    out = tmp_path / "adsp"
    stats = tmp_path / "state.json"
    # check periods long against the slow device's iterations (about 0.5 s at 6x on 2 cores)
    proc = launch(["-n", "3", "-s", "1", "--sync", "adsp", "--slowdown", "1,1,6", "--adsp-period", "2",
                   "--adsp-window", "1", "--state-stats", str(stats)],
                  train_command(out, "--time-budget", "16", "--lr", "0.1"), tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(stats.read_text())["adsp"]
    checkpoints = record["checkpoints"][:-1]  # the last one may fall while workers stop
    assert len(checkpoints) >= 5
    for cp in checkpoints:
        counts = list(cp["commits"].values())
        assert max(counts) - min(counts) <= 1, record["checkpoints"]
    assert record["search"], "the commit-rate search evaluated no window"
    workers = {w["slot"]: w for w in load_summary(out)["workers"]}
    assert workers[0]["iterations"] > 2 * workers[2]["iterations"]  # nobody waited for the slow one
