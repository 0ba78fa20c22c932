"""The contract every registered mode keeps, on loopback with heterogeneous speeds.

Each mode trains the small CNN with slowdowns 1,1,6 (the standalone mode on
one worker) for a few seconds: it must learn (well above chance), end without
a hang although workers did different numbers of iterations, leave no process
behind, and write a complete summary.json.
"""
import json

import pytest

from mxhet.modes import get_mode, mode_names

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)

SUMMARY_KEYS = {"mode", "model", "target_accuracy", "time_to_target_s", "final_accuracy", "curve", "workers"}
WORKER_KEYS = {"rank", "slot", "context", "slowdown", "rounds", "local_iters", "compute_s", "wait_s",
               "bytes_pushed", "bytes_pulled", "samples"}


@pytest.mark.parametrize("mode", mode_names())
def test_mode_contract(tmp_path, child_pids, mode):
    standalone = get_mode(mode).kvstore_type is None
    n = 1 if standalone else 3
    out = tmp_path / "run"
    proc = launch(["-n", str(n), "-s", "1", "--sync", mode, "--slowdown", "1" if standalone else "1,1,6",
                   "--timeout", "240"],
                  train_command(out, "--time-budget", "8", "--lr", "0.1", "--eval-interval", "1"),
                  tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not child_pids.alive()
    summary = load_summary(out)
    assert SUMMARY_KEYS <= set(summary) and summary["mode"] == mode
    assert len(summary["workers"]) == n
    for w in summary["workers"]:
        assert WORKER_KEYS <= set(w)
        assert w["samples"] > 0 and w["rounds"] > 0
        if not standalone:
            assert w["bytes_pushed"] > 0 and w["bytes_pulled"] > 0
    assert summary["final_accuracy"] > 0.4, summary["curve"]  # chance is 0.1
    if not standalone:
        iters = [w["iterations"] for w in sorted(summary["workers"], key=lambda w: w["slot"])]
        if mode in ("sync", "localsgd"):
            assert iters[0] == iters[2], iters   # lockstep: fast workers wait
        elif mode == "ssp":
            assert iters[0] - iters[2] <= 2 + 1, iters  # staleness 2 (+1 for the final step)
        else:
            assert iters[0] > iters[2], iters    # nobody waits for the slow worker


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
