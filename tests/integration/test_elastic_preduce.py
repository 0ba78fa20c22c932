"""Partial Reduce under ``mxhet-launch --elastic`` on real processes: a worker killed between its push to
its group's slot and its PUSHED releases the group (its partner keeps its model), is started again
(``--max-restarts 1``), takes the latest complete group's model and is grouped again; every worker ends
on one model. Two killed at once while they compute release nothing: the live ones form groups of fewer
than P. Below ``--min-workers`` the job fails with a clear error, exit 1, instead of hanging."""
import pytest

from .jobs import assert_one_model, elastic_args, run_job, state_stats, train_command

pytestmark = pytest.mark.timeout(300)


def _run(tmp_path, child_pids, workers, launcher_args, train_args, kill, env=None):
    """One job of the small CNN in groups of 2 (``train_args`` may say otherwise) on ``workers`` workers; ``kill``:
    MXHET_TEST_KILL_AFTER_PUSH (None: nobody), ``env``: more of the launcher's environment. Returns the
    :class:`~.jobs.Job`."""
    # --base-iter pads an iteration to 0.2 s by sleeping: the job outlasts the death (3 s heartbeat), the
    # restart delay (3 + 2 s) and the replacement's start-up while the workers spend little CPU.
    return run_job(tmp_path, child_pids, elastic_args("preduce", workers, 0.2, 240, *launcher_args),
                   train_command(tmp_path / "out", "--batch-size", "16", "--group-size", "2", *train_args),
                   timeout=220, env=dict({"MXHET_TEST_KILL_AFTER_PUSH": kill} if kill else {}, **(env or {})))


def test_a_worker_killed_between_its_push_and_its_pull_is_released_restarted_and_ends_on_the_same_model(
        tmp_path, child_pids):
    # PS-LITE rank 1 pushes into its 4th group's slot, saves the push and sends itself SIGKILL before it
    # says PUSHED (its replacement, which sees the file, is not killed again).
    job = _run(tmp_path, child_pids, 3, ["--max-restarts", "1", *state_stats(tmp_path)], ["--max-rounds", "100"],
               "1:3:%s" % (tmp_path / "victim-push.npz"))
    stderr = job.stderr
    assert job.code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and "starting it again in its slot" in stderr, stderr[-3000:]
    [restart] = job.record["worker_restarts"]
    victim = restart["slot"]
    assert "SIGKILL" in restart["cause"] and not restart.get("too_late")
    workers = job.reports(range(3))
    # the replacement started from a complete group's model and was grouped again until the end
    back = workers[victim]
    assert back["rejoined_at_round"] is not None and back["rounds"] > 0, back
    assert_one_model(workers.values())
    # the controller's record: rank 1 died before its push was in, so its group was released (its slot
    # retired, its partner pulled nothing); it came back holding a complete group's slot
    record = job.state("preduce")
    [death] = record["deaths"]
    assert death["rank"] == 1 and death["released"] and record["released"] == [death["group"]], record
    assert len(record["retired_slots"]) == 1
    [join] = record["joins"]
    assert join["rank"] == 1 and join["model_slot"] is not None and join["model_slot"] not in record["retired_slots"]
    summary = job.summary
    assert summary["final_models"] == 3     # the replacement's final model counts: the average of 3
    events = [(e["event"], e["slot"]) for e in summary["elastic"]["events"]]
    assert events == [("leave", victim), ("join", victim)], summary["elastic"]
    assert not child_pids.alive()


def test_two_workers_killed_at_once_while_they_compute_the_two_left_form_groups_of_two(tmp_path, child_pids):
    # 4 workers in groups of P = 3; PS-LITE ranks 2 and 3 send themselves SIGKILL at once while they compute,
    # in no group, before their READY after their 3rd group (MXHET_TEST_KILL_COMPUTING): no group is released,
    # the two left wait for a third member until the State Server's heartbeat watch finds the dead ones,
    # then form groups of both (fewer than P). --min-workers 2: they go on. 100 test images.
    job = _run(tmp_path, child_pids, 4, ["--min-workers", "2", *state_stats(tmp_path)],
               ["--max-rounds", "12", "--group-size", "3", "--eval-samples", "100", "--final-eval-samples", "100"],
               None, env={"MXHET_TEST_KILL_COMPUTING": "2,3:3"})
    assert job.code == 0, job.stderr[-4000:]
    assert job.stderr.count("the others train on") == 2, job.stderr[-3000:]
    killed, survivors = job.slots_of([2, 3]), job.slots_of([0, 1])
    assert not any(job.has_report(s) for s in killed)
    assert_one_model(job.reports(survivors).values())
    record = job.state("preduce")
    assert sorted((d["rank"], d["group"], d["released"]) for d in record["deaths"]) == [
        (2, None, False), (3, None, False)], record
    assert record["released"] == [] and record["retired_slots"] == []
    small = record["small_groups"]
    assert small and all(g["ranks"] == [0, 1] for g in small), small
    summary = job.summary
    assert summary["final_models"] == 2     # the average of the two models that reached the end
    leaves = sorted((e["event"], e["slot"], e["cause"]) for e in summary["elastic"]["events"])
    assert leaves == [("leave", s, "killed by signal 9 (SIGKILL)") for s in killed], leaves
    assert not child_pids.alive()


def test_a_death_below_min_workers_fails_the_job_with_a_clear_error(tmp_path, child_pids):
    # 2 workers, --min-workers 2: rank 1 dies in its 3rd group; its partner, waiting for its push, is
    # refused once the State Server finds it dead.
    job = _run(tmp_path, child_pids, 2, ["--min-workers", "2"], ["--max-rounds", "60"], "1:2")
    assert job.code == 1, job.stderr[-4000:]
    assert "fewer than the job's minimum of 2" in job.stderr, job.stderr[-4000:]
    assert not child_pids.alive()
