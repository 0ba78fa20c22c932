"""G-CADA under ``mxhet-launch --elastic`` on real processes, two deaths in one job: a claimant killed
mid-upload (half its group's gradient on the servers) -- the State Server reopens its group's claim and a
teammate uploads that iteration's gradient in full --; later the worker that triggers the servers' step
killed mid-step (some parameters stepped, the others not) -- the step goes to a live worker and the
servers step only the parameters not yet stepped for that iteration. Exit 0, the survivors on one model."""
import json

import pytest

from .jobs import start, train_command, wait_for

pytestmark = pytest.mark.timeout(300)


def test_a_claimant_killed_mid_upload_and_a_trigger_killed_mid_step_are_replaced_and_one_model_ends(
        tmp_path, child_pids):
    out, stats = tmp_path / "out", tmp_path / "state.json"
    # 4 workers in 2 groups, D = 1 (both groups every iteration): the last upload of an iteration triggers
    # the step. PS-LITE rank 2, at its first upload from iteration 3 on, pushes half its gradient and sends
    # itself SIGKILL; rank 1, at its first trigger from iteration 20 on (after rank 2's death: rank 2 claims
    # about every other iteration), steps half the parameters and dies (tests only: MXHET_TEST_KILL_AFTER_PUSH).
    proc, job_file, err = start(
        tmp_path, ["-n", "4", "-s", "1", "--sync", "gcada", "--base-iter", "0.02", "--timeout", "200", "--elastic",
                   "--heartbeat-timeout", "3", "--state-stats", str(stats)],
        train_command(out, "--model", "linear", "--groups", "2", "--dist", "group", "--max-delay", "1",
                      "--batch-size", "16", "--max-rounds", "60", "--step-size", "0.01"),
        env={"MXHET_TEST_KILL_AFTER_PUSH": "2:3:upload,1:20"})
    child_pids.add(proc.pid)
    try:
        wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        code = proc.wait(timeout=220)
    finally:
        err.close()
    stderr = (tmp_path / "launcher.err").read_text()
    assert code == 0, stderr[-4000:]
    record = json.loads(stats.read_text())["gcada"]
    deaths = {d["rank"]: d for d in record["deaths"]}
    upload, trigger = deaths[2], deaths[1]
    # the first death: its group's claim reopened (its teammate lives), the second: the step handed on
    assert upload["rank"] == 2 and upload["reopened"] and upload["k"] >= 3, record["deaths"]
    assert trigger["rank"] == 1 and trigger["retrigger"] and trigger["k"] >= 20, record["deaths"]
    killed = {e["slot"] for e in json.loads(job_file.read_text())["worker_exits"] if "SIGKILL" in e["cause"]}
    assert len(killed) == 2
    # every iteration was stepped and reported once, the two the dead began included, each with one upload
    # per selected group
    iterations = record["iterations"]
    assert [it["k"] for it in iterations] == list(range(len(iterations))) and len(iterations) > trigger["k"]
    assert all(it["uploads"] == len(it["selected"]) for it in iterations)
    workers = [json.loads(p.read_text()) for p in sorted(out.glob("worker-*.json"))]
    survivors = [w for w in workers if w["slot"] not in killed]
    assert len(survivors) == 2
    digests = {w["final_model_sha256"] for w in survivors}
    assert len(digests) == 1 and "" not in digests, digests
    events = json.loads((out / "summary.json").read_text())["elastic"]["events"]
    assert sorted((e["event"], e["slot"]) for e in events) == sorted(("leave", slot) for slot in killed), events
    assert not child_pids.alive()
