"""nodelay under ``mxhet-launch --elastic``, on real processes: the servers run ``dist_async``
(MemberSum) and the State Server's transfer rule counts each round's pushes, so a worker that
dies -- in the exchange itself, between its push and its pull, or while it computes -- no longer
holds up the merge; started again (``--max-restarts 1``) it takes part from the next transfer round
and ends on the same model; a death below ``--min-workers`` fails the job with a clear error.

Two launches (the small CNN, batches of 16: the behaviour is the rule's, not the model's)."""
import json
import re

import pytest

from .jobs import kill_and_wait, start, train_command, wait_for

pytestmark = pytest.mark.timeout(300)


def test_two_workers_dead_in_one_transfer_one_computing_one_between_push_and_pull_one_restarted(
        tmp_path, child_pids):
    # Two of 4 workers die around transfer round 3, both before the round's merge: PS-LITE rank 2 while it
    # computes, as round 2's merged model arrives (MXHET_TEST_KILL_COMPUTING: no transfer of its own is in
    # flight; round 3's request waits for its arrival and announcement until the State Server's heartbeat
    # watch finds it dead), then rank 1 once its push of round 3 is applied, before it reports it and pulls
    # (MXHET_TEST_KILL_AFTER_PUSH), while the first death is still being handled. --min-workers 2 lets the 2
    # left go on; --max-restarts 1 starts the first that died again (PS-LITE gives it one of the two dead
    # ranks). --base-iter 0.3 and 90 rounds (about 27 s; the padding sleeps, the CPU goes to the start-ups)
    # outlast PS-LITE's and the State Server's 3 s, the launcher's 2 s and the replacement's start-up
    # (measured at 0.25 s and 70 rounds, 3 workers, the push death alone: it rejoined at round 27, 7 s
    # after its restart; a loaded machine's start-up takes longer).
    out, rounds, round_ = tmp_path / "out", 90, 3
    stats = tmp_path / "state.json"
    proc, job_file, err = start(tmp_path, ["-n", "4", "-s", "1", "--sync", "nodelay", "--base-iter", "0.3",
                                           "--timeout", "250", "--elastic", "--max-restarts", "1",
                                           "--min-workers", "2", "--heartbeat-timeout", "3",
                                           "--state-stats", str(stats)],
                                train_command(out, "--max-rounds", str(rounds), "--batch-size", "16"),
                                env={"MXHET_TEST_KILL_AFTER_PUSH": "1:%d" % round_,
                                     "MXHET_TEST_KILL_COMPUTING": "2:%d" % round_})
    child_pids.add(proc.pid)
    try:
        wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        code = proc.wait(timeout=250)
    finally:
        err.close()
        if job_file.exists():
            child_pids.add_job_file(job_file)   # the restarted process is in it too
    stderr = (tmp_path / "launcher.err").read_text()
    assert code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and stderr.count("starting it again in its slot") == 1, stderr[-3000:]
    ranks = {int(s): int(r) for s, r in re.findall(r"slot (\d+) is PS-LITE rank (\d+)", stderr)[:4]}
    computing, pushing = (next(s for s, r in ranks.items() if r == rank) for rank in (2, 1))
    job = json.loads(job_file.read_text())
    [restart] = job["worker_restarts"]
    back = restart["slot"]
    assert not restart.get("too_late"), restart
    assert sorted(x["slot"] for x in job["worker_exits"]) == sorted([computing, pushing])
    [gone] = {computing, pushing} - {back}
    assert not (out / ("worker-%d.json" % gone)).exists()
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(4) if s != gone}
    first = workers[back]["rejoined_at_round"]
    # started again, it takes part in every transfer from the round the State Server named to the last
    assert first is not None and round_ < first < rounds
    assert workers[back]["rounds"] == rounds and len(workers[back]["round_end_s"]) == rounds - first
    others = [w for s, w in workers.items() if s != back]
    assert all(w["rejoined_at_round"] is None and len(w["round_end_s"]) == rounds for w in others)
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    # the master's view: round 3 was requested once rank 2 was found dead, from the 3 others; rank 1 never
    # reported its push, so its merge went on without it once it was found dead too (incomplete: its push
    # arrived whole, but the rule cannot know); the rounds after it had 2 members until the replacement
    # joined, 3 from then on
    summary = json.loads((out / "summary.json").read_text())
    members = summary["round_members"]
    assert members[:round_] == [4] * round_ and members[round_] == 3 and members[round_ + 1] == 2, members
    assert set(members[first:]) == {3}, members
    assert summary["incomplete_rounds"] == [round_]
    record = json.loads(stats.read_text())["nodelay"]
    assert record["incomplete_rounds"] == [round_]
    assert record["departures"] == [{"rank": 2, "round": round_}, {"rank": 1, "round": round_ + 1}]
    [join] = record["joins"]
    assert join["rank"] in (1, 2) and join["round"] == first, join
    assert [r["ranks"] for r in record["requests"]][round_ - 1:round_ + 2] == [[0, 1, 2, 3], [0, 1, 3], [0, 3]]
    assert [(e["event"], e["slot"], e["round"]) for e in summary["elastic"]["events"]] == [
        ("leave", computing, round_), ("leave", pushing, round_ + 1), ("join", back, first)]
    assert not child_pids.alive()


def test_a_kill_9_below_the_minimum_ends_the_job_with_a_clear_error(tmp_path, child_pids):
    # A plain SIGKILL from outside while the workers train (announcements pending, no push of its own in
    # flight, most likely): the death leaves 2 workers training, fewer than --min-workers 3, so every survivor
    # is told so by its next request and the job ends, exit 1, never a hang.
    out = tmp_path / "out"
    code, stderr, killed = kill_and_wait(tmp_path, child_pids, ["-n", "3", "-s", "1", "--sync", "nodelay",
                                                                "--base-iter", "0.25", "--timeout", "200",
                                                                "--elastic", "--min-workers", "3",
                                                                "--heartbeat-timeout", "3"],
                                         train_command(out, "--max-rounds", "200", "--batch-size", "16"), out,
                                         after=0.5)
    assert code == 1, stderr[-3000:]
    assert "2 worker(s) still train, fewer than the job's minimum of 3 (--min-workers)" in stderr, stderr[-3000:]
    assert not child_pids.alive()
