"""nodelay under ``mxhet-launch --elastic``, on real processes: the servers run ``dist_async``
(MemberSum) and the State Server's transfer rule counts each round's pushes, so a worker that
dies -- in the exchange itself, between its push and its pull, or while it computes -- no longer
holds up the merge; started again (``--max-restarts 1``) it takes part from the next transfer round
and ends on the same model; a death below ``--min-workers`` fails the job with a clear error.

Three launches (the small CNN, batches of 16: the behaviour is the rule's, not the model's)."""
import pytest

from .jobs import ROUNDS_BUDGET, assert_one_model, elastic_args, kill_job, run_job, state_stats, train_command

pytestmark = pytest.mark.timeout(300)


def test_a_worker_killed_between_its_push_and_its_pull_is_started_again_and_ends_on_the_same_model(
        tmp_path, child_pids):
    # The worker of PS-LITE rank 1 (never the chief) sends itself SIGKILL once its push of transfer round 3 is
    # applied, before it reports it and pulls (MXHET_TEST_KILL_AFTER_PUSH, a test-only hook). --base-iter 0.3
    # and 90 rounds (about 27 s; the padding sleeps, the CPU goes to the start-ups) outlast PS-LITE's and the
    # State Server's 3 s, the launcher's 2 s and the replacement's start-up (measured at 0.25 s and 70 rounds:
    # it rejoined at round 27, 7 s after its restart; a loaded machine's start-up takes longer).
    rounds, round_ = 90, 3
    job = run_job(tmp_path, child_pids, elastic_args("nodelay", 3, 0.3, 250, "--max-restarts", "1",
                                                     *state_stats(tmp_path)),
                  train_command(tmp_path / "out", "--max-rounds", str(rounds), "--batch-size", "16",
                                "--time-budget", ROUNDS_BUDGET), timeout=250,
                  env={"MXHET_TEST_KILL_AFTER_PUSH": "1:%d" % round_})
    stderr = job.stderr
    assert job.code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and "starting it again in its slot" in stderr, stderr[-3000:]
    [restart] = job.record["worker_restarts"]
    victim = restart["slot"]
    assert not restart.get("too_late"), restart
    workers = job.reports(range(3))
    back = workers[victim]
    first = back["rejoined_at_round"]
    # started again, it takes part in every transfer from the round the State Server named to the last
    assert first is not None and round_ < first < rounds
    assert back["rounds"] == rounds and len(back["round_end_s"]) == rounds - first
    others = [workers[s] for s in range(3) if s != victim]
    assert all(w["rejoined_at_round"] is None and len(w["round_end_s"]) == rounds for w in others)
    assert_one_model(workers.values())
    # the master's view: the victim was a member of round 3 and never reported its push, so that round's
    # merge went on without it once the State Server found it dead (incomplete: its push arrived whole, but
    # the rule cannot know); the rounds after it had 2 members until it joined again, 3 from then on
    summary = job.summary
    members = summary["round_members"]
    assert members[round_] == 3 and members[round_ + 1] == 2 and set(members[first:]) == {3}, members
    assert summary["incomplete_rounds"] == [round_]
    record = job.state("nodelay")
    assert record["incomplete_rounds"] == [round_]
    assert record["departures"] == [{"rank": 1, "round": round_ + 1}]
    assert record["joins"] == [{"rank": 1, "round": first}]
    assert [r["ranks"] for r in record["requests"]][round_:round_ + 2] == [[0, 1, 2], [0, 2]]
    assert [(e["event"], e["slot"], e["round"]) for e in summary["elastic"]["events"]] == [
        ("leave", victim, round_ + 1), ("join", victim, first)]
    assert not child_pids.alive()


def test_two_workers_killed_at_once_while_they_compute_the_next_transfer_goes_on_without_them(
        tmp_path, child_pids):
    # 4 workers; PS-LITE ranks 2 and 3 send themselves SIGKILL at once as round 2's merged model arrives
    # (MXHET_TEST_KILL_COMPUTING: no transfer of theirs is in flight), so round 3's request waits for their
    # arrival and announcement until the State Server's heartbeat watch finds them dead: it then goes to the
    # other two alone. --min-workers 2: the 2 left go on. --base-iter 0.2 and 10 rounds, 100 test images.
    rounds, round_ = 10, 3
    job = run_job(tmp_path, child_pids, elastic_args("nodelay", 4, 0.2, 200, "--min-workers", "2",
                                                     *state_stats(tmp_path)),
                  train_command(tmp_path / "out", "--max-rounds", str(rounds), "--batch-size", "16",
                                "--eval-samples", "100", "--final-eval-samples", "100"), timeout=200,
                  env={"MXHET_TEST_KILL_COMPUTING": "2,3:%d" % round_})
    assert job.code == 0, job.stderr[-4000:]
    assert job.stderr.count("the others train on") == 2, job.stderr[-3000:]
    killed, survivors = job.slots_of([2, 3]), job.slots_of([0, 1])
    assert not any(job.has_report(s) for s in killed)
    workers = list(job.reports(survivors).values())
    assert [len(w["round_end_s"]) for w in workers] == [rounds, rounds]
    assert_one_model(workers)
    summary = job.summary
    # round 3 is the two survivors' alone and complete: nobody it was requested from died
    assert summary["round_members"] == [4] * round_ + [2] * (rounds - round_), summary["round_members"]
    assert summary["incomplete_rounds"] == []
    record = job.state("nodelay")
    assert sorted(d["rank"] for d in record["departures"]) == [2, 3], record
    assert {d["round"] for d in record["departures"]} == {round_} and record["incomplete_rounds"] == []
    assert [r["ranks"] for r in record["requests"]][round_ - 1:round_ + 1] == [[0, 1, 2, 3], [0, 1]]
    leaves = sorted((e["event"], e["slot"], e["round"], e["cause"]) for e in summary["elastic"]["events"])
    assert leaves == [("leave", s, round_, "killed by signal 9 (SIGKILL)") for s in killed], leaves
    assert not child_pids.alive()


def test_a_kill_9_below_the_minimum_ends_the_job_with_a_clear_error(tmp_path, child_pids):
    # A plain SIGKILL from outside while the workers train (announcements pending, no push of its own in
    # flight, most likely): the death leaves 2 workers training, fewer than --min-workers 3, so every survivor
    # is told so by its next request and the job ends, exit 1, never a hang.
    job = kill_job(tmp_path, child_pids, elastic_args("nodelay", 3, 0.25, 200, "--min-workers", "3"),
                   train_command(tmp_path / "out", "--max-rounds", "200", "--batch-size", "16"), after=0.5)
    stderr = job.stderr
    assert job.code == 1, stderr[-3000:]
    assert "2 worker(s) still train, fewer than the job's minimum of 3 (--min-workers)" in stderr, stderr[-3000:]
    assert not child_pids.alive()
