"""Partial Reduce under ``mxhet-launch --elastic`` on real processes: a worker killed between its push to
its group's slot and its PUSHED releases the group (its partner keeps its model), is started again
(``--max-restarts 1``), takes the latest complete group's model and is grouped again; every worker ends
on one model. Two killed at once while they compute release nothing: the live ones form groups of fewer
than P. Below ``--min-workers`` the job fails with a clear error, exit 1, instead of hanging."""
import json
import re

import pytest

from .jobs import start, train_command, wait_for

pytestmark = pytest.mark.timeout(300)

# --base-iter pads an iteration to 0.2 s by sleeping: the job outlasts the death (3 s heartbeat), the
# restart delay (3 + 2 s) and the replacement's start-up while the workers spend little CPU.
LAUNCH = ["-s", "1", "--sync", "preduce", "--base-iter", "0.2", "--timeout", "240", "--elastic",
          "--heartbeat-timeout", "3"]


def _run(tmp_path, child_pids, launcher_args, train_args, kill, env=None):
    out = tmp_path / "out"
    proc, job_file, err = start(tmp_path, LAUNCH + launcher_args,
                                train_command(out, "--batch-size", "16", "--group-size", "2", *train_args),
                                env=dict({"MXHET_TEST_KILL_AFTER_PUSH": kill} if kill else {}, **(env or {})))
    child_pids.add(proc.pid)
    try:
        wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        code = proc.wait(timeout=220)
    finally:
        err.close()
        if job_file.exists():
            child_pids.add_job_file(job_file)   # the restarted process is in it too
    return code, (tmp_path / "launcher.err").read_text(), out


def test_a_worker_killed_between_its_push_and_its_pull_is_released_restarted_and_ends_on_the_same_model(
        tmp_path, child_pids):
    # PS-LITE rank 1 pushes into its 4th group's slot, saves the push and sends itself SIGKILL before it
    # says PUSHED (its replacement, which sees the file, is not killed again).
    stats = tmp_path / "state.json"
    code, stderr, out = _run(tmp_path, child_pids, ["-n", "3", "--max-restarts", "1", "--state-stats", str(stats)],
                             ["--max-rounds", "100"], "1:3:%s" % (tmp_path / "victim-push.npz"))
    assert code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and "starting it again in its slot" in stderr, stderr[-3000:]
    [restart] = json.loads((tmp_path / "job.json").read_text())["worker_restarts"]
    victim = restart["slot"]
    assert "SIGKILL" in restart["cause"] and not restart.get("too_late")
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(3)}
    # the replacement started from a complete group's model and was grouped again until the end
    back = workers[victim]
    assert back["rejoined_at_round"] is not None and back["rounds"] > 0, back
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    # the controller's record: rank 1 died before its push was in, so its group was released (its slot
    # retired, its partner pulled nothing); it came back holding a complete group's slot
    record = json.loads(stats.read_text())["preduce"]
    [death] = record["deaths"]
    assert death["rank"] == 1 and death["released"] and record["released"] == [death["group"]], record
    assert len(record["retired_slots"]) == 1
    [join] = record["joins"]
    assert join["rank"] == 1 and join["model_slot"] is not None and join["model_slot"] not in record["retired_slots"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_models"] == 3     # the replacement's final model counts: the average of 3
    events = [(e["event"], e["slot"]) for e in summary["elastic"]["events"]]
    assert events == [("leave", victim), ("join", victim)], summary["elastic"]
    assert not child_pids.alive()


def test_two_workers_killed_at_once_while_they_compute_the_two_left_form_groups_of_two(tmp_path, child_pids):
    # 4 workers in groups of P = 3; PS-LITE ranks 2 and 3 send themselves SIGKILL at once while they compute,
    # in no group, before their READY after their 3rd group (MXHET_TEST_KILL_COMPUTING): no group is released,
    # the two left wait for a third member until the State Server's heartbeat watch finds the dead ones,
    # then form groups of both (fewer than P). --min-workers 2: they go on. 100 test images.
    stats = tmp_path / "state.json"
    code, stderr, out = _run(tmp_path, child_pids, ["-n", "4", "--min-workers", "2", "--state-stats", str(stats)],
                             ["--max-rounds", "12", "--group-size", "3", "--eval-samples", "100",
                              "--final-eval-samples", "100"], None,
                             env={"MXHET_TEST_KILL_COMPUTING": "2,3:3"})
    assert code == 0, stderr[-4000:]
    assert stderr.count("the others train on") == 2, stderr[-3000:]
    ranks = {int(r): int(s) for s, r in re.findall(r"slot (\d+) is PS-LITE rank (\d+)", stderr)}
    killed, survivors = sorted([ranks[2], ranks[3]]), sorted([ranks[0], ranks[1]])
    assert not any((out / ("worker-%d.json" % s)).exists() for s in killed)
    workers = [json.loads((out / ("worker-%d.json" % s)).read_text()) for s in survivors]
    assert workers[0]["final_model_sha256"] == workers[1]["final_model_sha256"] != ""
    record = json.loads(stats.read_text())["preduce"]
    assert sorted((d["rank"], d["group"], d["released"]) for d in record["deaths"]) == [
        (2, None, False), (3, None, False)], record
    assert record["released"] == [] and record["retired_slots"] == []
    small = record["small_groups"]
    assert small and all(g["ranks"] == [0, 1] for g in small), small
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_models"] == 2     # the average of the two models that reached the end
    leaves = sorted((e["event"], e["slot"], e["cause"]) for e in summary["elastic"]["events"])
    assert leaves == [("leave", s, "killed by signal 9 (SIGKILL)") for s in killed], leaves
    assert not child_pids.alive()


def test_a_death_below_min_workers_fails_the_job_with_a_clear_error(tmp_path, child_pids):
    # 2 workers, --min-workers 2: rank 1 dies in its 3rd group; its partner, waiting for its push, is
    # refused once the State Server finds it dead.
    code, stderr, _ = _run(tmp_path, child_pids, ["-n", "2", "--min-workers", "2"], ["--max-rounds", "60"],
                           "1:2")
    assert code == 1, stderr[-4000:]
    assert "fewer than the job's minimum of 2" in stderr, stderr[-4000:]
    assert not child_pids.alive()
