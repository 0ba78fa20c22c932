"""The chief (PS-LITE rank 0) dies under ``mxhet-launch --elastic``, on real processes: the survivors
finish with one model and the lowest rank still in the job, named by the State Server's last barrier,
takes over the chief's end-of-job duties (the final evaluation, ``summary.json``)."""
import json
import os
import re
import time

import pytest

from .jobs import start, train_command, wait_for, worker_pid

pytestmark = pytest.mark.timeout(400)


def _chief_slot(err_path, proc, timeout=120):
    """The slot whose worker is PS-LITE rank 0, from the workers' log lines."""
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(r"slot (\d+) is PS-LITE rank 0\b", err_path.read_text())
        if found:
            return int(found.group(1))
        assert proc.poll() is None and time.monotonic() < deadline, "no worker said it is rank 0"
        time.sleep(0.2)


def test_kill_9_of_the_chief_a_survivor_writes_the_summary_with_the_chiefs_death(tmp_path, child_pids):
    out = tmp_path / "out"
    rounds = 40
    # --base-iter pins an iteration to at least 0.05 s: 40 rounds of 2 steps (4 s or more) outlast the kill
    # once a snapshot after the first one is indexed (--eval-interval 0.5).
    proc, job_file, err = start(tmp_path, ["-n", "3", "-s", "1", "--sync", "localsgd", "--base-iter", "0.05",
                                           "--timeout", "300", "--elastic", "--heartbeat-timeout", "3"],
                                train_command(out, "--max-rounds", str(rounds), "--local-steps", "2",
                                              "--eval-interval", "0.5"))
    child_pids.add(proc.pid)
    try:
        wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        chief = _chief_slot(tmp_path / "launcher.err", proc)
        wait_for(out / "snapshots" / "000001.params", proc)   # the chief indexed a snapshot taken in training
        index = out / "snapshots" / "index.json"
        wait_for(index, proc)
        indexed = len(json.loads(index.read_text())["snapshots"])
        os.kill(worker_pid(job_file, chief), 9)
        code = proc.wait(timeout=300)
    finally:
        err.close()
    stderr = (tmp_path / "launcher.err").read_text()
    assert code == 0, stderr[-4000:]
    survivors = sorted(set(range(3)) - {chief})
    workers = [json.loads((out / ("worker-%d.json" % s)).read_text()) for s in survivors]
    assert not (out / ("worker-%d.json" % chief)).exists()
    digests = {w["final_model_sha256"] for w in workers}
    assert len(digests) == 1 and "" not in digests, digests
    summary = json.loads((out / "summary.json").read_text())
    # written by the lowest rank left, one of the survivors, which says it took over
    by = summary["written_by"]
    writer = min(workers, key=lambda w: w["rank"])
    assert by["took_over"] and by["rank"] == writer["rank"] != 0 and by["slot"] == writer["slot"], by
    assert "writes the summary in place of the chief" in stderr
    # the chief's death in the record, with the launcher's cause; the survivors took part in every round
    leaves = [e for e in summary["elastic"]["events"] if e["event"] == "leave"]
    assert [(e["slot"], e["rank"], e["cause"]) for e in leaves] == [(chief, 0, "killed by signal 9 (SIGKILL)")]
    assert 0 < leaves[0]["round"] < rounds
    assert summary["departed_slots"] == [chief]
    assert all(summary["elastic"]["rounds_by_slot"][str(s)] == [[0, rounds - 1]] for s in survivors)
    assert summary["round_members"][0] == 3 and summary["round_members"][-1] == 2
    # the curve: the chief's snapshots up to its death (at least those indexed before the kill), then the
    # final model, scored on the whole test set like any run's last point
    curve = summary["curve"]
    assert len(curve) >= indexed + 1 and curve[0][0] == 0.0, curve
    assert by["chief_curve_until_s"] == curve[-2][0] and curve[-1][0] > curve[-2][0], (by, curve)
    assert summary["final_accuracy"] == curve[-1][1] and summary["final_accuracy"] > 0.3, summary["final_accuracy"]
    assert not child_pids.alive()
