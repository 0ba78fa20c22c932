"""``sync`` under ``mxhet-launch --elastic`` on real processes: each step is a round of the members the
State Server names (:class:`mxhet.modes.gradient.ElasticSync`), so a dead worker blocks no step, a
restarted one rejoins at the next step boundary, and a death below ``--min-workers`` fails the job."""
import json

import pytest

from .jobs import start, train_command, wait_for

pytestmark = pytest.mark.timeout(300)


def _run(tmp_path, child_pids, launcher_args, train_args, kill_after_push):
    """One job of the small CNN in ``sync``; the worker of PS-LITE rank ``kill_after_push[0]`` sends itself
    SIGKILL between its push and its pull of round ``kill_after_push[1]`` (MXHET_TEST_KILL_AFTER_PUSH).
    Returns ``(code, out, stderr)``."""
    out = tmp_path / "out"
    # --base-iter pads a step to 0.2 s (sleeping): the rounds outlast the death and the restart without
    # the CPU the small CNN's steps would cost; batches of 16 keep each step cheap.
    proc, job_file, err = start(tmp_path, ["-s", "1", "--sync", "sync", "--base-iter", "0.2", "--timeout", "240",
                                           "--elastic", "--heartbeat-timeout", "3", *launcher_args],
                                train_command(out, "--batch-size", "16", "--momentum", "0.9", *train_args),
                                env={"MXHET_TEST_KILL_AFTER_PUSH": "%d:%d" % kill_after_push})
    child_pids.add(proc.pid)
    try:
        wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        code = proc.wait(timeout=240)
    finally:
        err.close()
        if job_file.exists():
            child_pids.add_job_file(job_file)   # the restarted worker is in it too
    return code, out, (tmp_path / "launcher.err").read_text()


def test_a_sync_worker_killed_between_push_and_pull_is_started_again_and_ends_on_the_same_model(
        tmp_path, child_pids):
    # One launch for three checks: the death in the exchange itself (rank 1 dies after its push of round 3,
    # before it says done and pulls), no later step waits for it, and --max-restarts 1 brings it back at a
    # step boundary (PS-LITE's recovery gives it rank 1 again; its rounds then count past 3, so the hook
    # does not fire twice). measured: it died 7.9 s into the job, was started again 5 s later and rejoined at
    # round 46 (0.28 s rounds, 2 cores shared with other jobs); 45 s wall, 13 CPU s for the whole launch.
    rounds, dying = 100, 3
    code, out, stderr = _run(tmp_path, child_pids, ["-n", "3", "--max-restarts", "1"],
                             ["--max-rounds", str(rounds)], (1, dying))
    assert code == 0, stderr[-4000:]
    assert "starting it again in its slot" in stderr, stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(3)}
    [victim] = [s for s, w in workers.items() if w["rejoined_at_round"] is not None]
    first = workers[victim]["rejoined_at_round"]
    assert dying < first < rounds
    # the round it died in closed incomplete once the State Server found it dead; the steps in between had
    # 2 members and went on; from its first round on, 3 again
    members = summary["round_members"]
    assert summary["incomplete_rounds"] == [dying]
    assert members[:dying + 1] == [3] * (dying + 1) and set(members[dying + 1:first]) == {2}, members
    assert set(members[first:]) == {3} and len(members) == rounds, members
    record = json.loads((tmp_path / "job.json").read_text())["worker_restarts"]
    assert [r["slot"] for r in record] == [victim] and "SIGKILL" in record[0]["cause"]
    assert all(w["rounds"] == rounds for w in workers.values())
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    assert summary["mode"] == "sync" and summary["final_accuracy"] > 0.2
    assert not child_pids.alive()


def test_a_sync_death_below_the_minimum_ends_the_job_with_a_clear_error(tmp_path, child_pids):
    code, _, stderr = _run(tmp_path, child_pids, ["-n", "2", "--min-workers", "2"], ["--max-rounds", "60"], (1, 2))
    assert code == 1, stderr[-3000:]
    assert "fewer than the job's minimum of 2" in stderr, stderr[-3000:]
    assert not child_pids.alive()
