"""Partial Reduce under ``mxhet-launch --elastic`` on real processes: a worker killed between its push to
its group's slot and its PUSHED releases the group (its partners keep their models), one killed while it
computes is only taken out of the groups to come, the live workers form groups of fewer than P once
fewer are left, the first that died is started again (``--max-restarts 1``), takes the latest complete
group's model and is grouped again; every worker ends on one model. Below ``--min-workers`` the job
fails with a clear error, exit 1, instead of hanging."""
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
                                env={"MXHET_TEST_KILL_AFTER_PUSH": kill, **(env or {})})
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


def test_two_workers_dead_at_once_one_computing_one_between_push_and_pull_one_restarted(tmp_path, child_pids):
    # 4 workers in groups of P = 3. PS-LITE rank 2 dies while it computes, in no group, before its READY
    # after its 3rd group (MXHET_TEST_KILL_COMPUTING): only the State Server's heartbeat watch takes it out
    # of the controller. Rank 1 pushes into its 4th group's slot, saves the push and dies before it says
    # PUSHED (MXHET_TEST_KILL_AFTER_PUSH): its group is released. Once both are found dead, 2 live workers
    # are left (--min-workers 2): groups of both, fewer than P. The first that died is started again (the
    # file each hook writes marks it done: the replacement, whichever dead rank PS-LITE gives it, is not
    # killed again), takes a complete group's model and is grouped again: groups of 3 from then on.
    stats = tmp_path / "state.json"
    code, stderr, out = _run(tmp_path, child_pids, ["-n", "4", "--max-restarts", "1", "--min-workers", "2",
                                                    "--state-stats", str(stats)],
                             ["--max-rounds", "100", "--group-size", "3"], "1:3:%s" % (tmp_path / "victim-push.npz"),
                             env={"MXHET_TEST_KILL_COMPUTING": "2:3:%s" % (tmp_path / "computing-killed")})
    assert code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and stderr.count("starting it again in its slot") == 1, stderr[-3000:]
    ranks = {int(s): int(r) for s, r in re.findall(r"slot (\d+) is PS-LITE rank (\d+)", stderr)[:4]}
    job = json.loads((tmp_path / "job.json").read_text())
    [restart] = job["worker_restarts"]
    back = restart["slot"]
    assert "SIGKILL" in restart["cause"] and not restart.get("too_late")
    dead = sorted(s for s, r in ranks.items() if r in (1, 2))
    assert sorted(x["slot"] for x in job["worker_exits"]) == dead and back in dead
    [gone] = set(dead) - {back}
    assert not (out / ("worker-%d.json" % gone)).exists()
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(4) if s != gone}
    # the replacement started from a complete group's model and was grouped again until the end
    assert workers[back]["rejoined_at_round"] is not None and workers[back]["rounds"] > 0, workers[back]
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    # the controller's record: rank 1 died before its push was in, so its group was released (its slot
    # retired, its partners pulled nothing); rank 2 died in no group, so nothing was released for it; the
    # two left formed groups of 2 until the replacement came back holding a complete group's slot
    record = json.loads(stats.read_text())["preduce"]
    deaths = {d["rank"]: d for d in record["deaths"]}
    assert sorted(deaths) == [1, 2], record["deaths"]
    assert deaths[1]["released"] and record["released"] == [deaths[1]["group"]], record
    assert deaths[2]["group"] is None and not deaths[2]["released"], record
    assert len(record["retired_slots"]) == 1
    [join] = record["joins"]
    assert join["rank"] in (1, 2) and join["model_slot"] is not None
    assert join["model_slot"] not in record["retired_slots"]
    small = record["small_groups"]
    assert small and all(g["ranks"] == [0, 3] for g in small), small
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_models"] == 3     # the replacement's final model counts: the average of 3
    events = sorted((e["event"], e["slot"]) for e in summary["elastic"]["events"])
    assert events == sorted([("leave", back), ("leave", gone), ("join", back)]), summary["elastic"]
    assert not child_pids.alive()


def test_a_death_below_min_workers_fails_the_job_with_a_clear_error(tmp_path, child_pids):
    # 2 workers, --min-workers 2: rank 1 dies in its 3rd group; its partner, waiting for its push, is
    # refused once the State Server finds it dead.
    code, stderr, _ = _run(tmp_path, child_pids, ["-n", "2", "--min-workers", "2"], ["--max-rounds", "60"],
                           "1:2")
    assert code == 1, stderr[-4000:]
    assert "fewer than the job's minimum of 2" in stderr, stderr[-4000:]
    assert not child_pids.alive()
