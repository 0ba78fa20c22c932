"""A worker leaves the job -- its script stops calling ``step()``, or it dies
under ``mxhet-launch --elastic`` -- and the others train on, on real processes
(scheduler, server, State Server, workers on 127.0.0.1). One mechanism serves
both: the State Server names each round's members (mxhet.control.membership),
the servers add every push (dist_async), the workers scale theirs by the
member count (mxhet.modes.rounds)."""
import json

import pytest

from .jobs import kill_and_wait, run_leaving_job, train_command

pytestmark = pytest.mark.timeout(300)

ROUNDS = 20   # of the jobs that a kill interrupts


def test_workers_that_leave_their_loop_at_different_steps_end_with_the_global_model(tmp_path, child_pids):
    # every worker runs a different number of steps (6, 12, 18) and just ends; the only mxhet line is the Trainer's
    proc, results = run_leaving_job(["-n", "3", "-s", "1", "--sync", "localsgd", "--timeout", "200"],
                                    tmp_path, child_pids, steps=6, workers=3, staggered=True, local_steps=2)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [r["steps"] for r in results] == [6, 12, 18]
    # τ = 2: rounds every 2 steps; after slot 0 left the others averaged without it
    assert [r["rounds"] for r in results] == [3, 6, 9]
    assert results[2]["members"] == [3, 3, 3, 2, 2, 2, 1, 1, 1]
    assert all(r["departed"] for r in results)
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests, results
    assert not child_pids.alive()


def _kill_one(tmp_path, child_pids, elastic_args, victims=1, workers=3):
    out = tmp_path / "out"
    # --base-iter pins an iteration to at least 0.05 s: the 20 rounds of 4 steps (4 s or more) outlast the kill
    code, stderr, killed = kill_and_wait(
        tmp_path, child_pids, ["-n", str(workers), "-s", "1", "--sync", "localsgd", "--base-iter", "0.05",
                               "--timeout", "200", *elastic_args],
        train_command(out, "--max-rounds", str(ROUNDS), "--local-steps", "4"), out, victims=victims)
    return code, out, stderr, killed


# A SIGKILL without --elastic ends the job: test_failures.py's kill -9 (a launch of its own here proved nothing
# more: the launcher notices a dead child the same way with or without a State Server's round rendezvous).


def test_a_death_below_the_minimum_ends_the_job_with_a_clear_error(tmp_path, child_pids):
    code, _, stderr, _ = _kill_one(tmp_path, child_pids, ["--elastic", "--min-workers", "3"])
    assert code == 1, stderr[-3000:]
    assert "fewer than the job's minimum of 3" in stderr, stderr[-3000:]
    assert not child_pids.alive()


def test_kill_9_of_two_workers_at_once_with_elastic_the_survivors_finish_with_equal_models(tmp_path, child_pids):
    # One launch serves the single death and the simultaneous ones: each SIGKILL is its own departure to the
    # launcher and the State Server, and two at once add the case where the second lands while the first is
    # being handled (this once took a launch of 3 workers with 1 killed beside this one).
    code, out, stderr, killed = _kill_one(tmp_path, child_pids, ["--elastic"], victims=2, workers=4)
    assert code == 0, stderr[-4000:]
    assert stderr.count("the others train on") >= 2 and "SIGKILL" in stderr, stderr[-3000:]
    survivors = sorted(set(range(4)) - set(killed))
    workers = [json.loads((out / ("worker-%d.json" % s)).read_text()) for s in survivors]
    assert not any((out / ("worker-%d.json" % s)).exists() for s in killed)
    assert len({w["final_model_sha256"] for w in workers}) == 1 and workers[0]["final_model_sha256"]
    assert [w["rounds"] for w in workers] == [ROUNDS, ROUNDS]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["round_members"][0] == 4 and summary["round_members"][-1] == 2
    assert summary["departed_slots"] == killed
    assert_deaths_recorded(summary, killed, ROUNDS, survivors, tmp_path / "job.json")
    assert not child_pids.alive()


def assert_deaths_recorded(summary, killed, rounds, survivors, job_file):
    """The summary's ``elastic`` record: one leave per killed slot, with the launcher's cause, its time and
    the first round it missed; the rounds each slot took part in. The job file lists the same exits."""
    record = summary["elastic"]
    leaves = [e for e in record["events"] if e["event"] == "leave"]
    assert sorted(e["slot"] for e in leaves) == killed and len(record["events"]) == len(killed), record
    for e in leaves:
        assert e["cause"] == "killed by signal 9 (SIGKILL)" and e["t_s"] > 0, e
        assert 0 < e["round"] < rounds, e
        # it took part in every round before the one it missed, and in none after
        assert record["rounds_by_slot"][str(e["slot"])] == [[0, e["round"] - 1]], record
    for slot in survivors:
        assert record["rounds_by_slot"][str(slot)] == [[0, rounds - 1]], record
    exits = json.loads(job_file.read_text())["worker_exits"]
    assert sorted(x["slot"] for x in exits) == killed and all("SIGKILL" in x["cause"] for x in exits)


def test_kill_9_of_an_async_worker_with_elastic_the_survivors_finish_with_equal_models(tmp_path, child_pids):
    # async has no round to release: the survivors just train on; their end (the barrier before the final
    # pull, and the one after the worker files) runs on the State Server's rendezvous, not PS-LITE's barrier,
    # which would wait for the dead worker for ever. --base-iter pins a step to at least 0.05 s: the 150
    # steps (7.5 s or more) outlast the kill 1 s into training.
    out = tmp_path / "out"
    code, stderr, killed = kill_and_wait(tmp_path, child_pids, ["-n", "3", "-s", "1", "--sync", "async", "--base-iter",
                                                                "0.05", "--timeout", "200", "--elastic",
                                                                "--heartbeat-timeout", "3"],
                                         train_command(out, "--max-rounds", "150"), out)
    assert code == 0, stderr[-4000:]
    survivors = sorted(set(range(3)) - set(killed))
    workers = [json.loads((out / ("worker-%d.json" % s)).read_text()) for s in survivors]
    assert workers[0]["final_model_sha256"] == workers[1]["final_model_sha256"] != ""
    assert [w["rounds"] for w in workers] == [150, 150]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["departed_slots"] == killed
    # the one leave is the death (no rounds: no round named); the survivors' ends are no leaves
    assert [(e["event"], e["slot"], e["round"], e["cause"]) for e in summary["elastic"]["events"]] == [
        ("leave", killed[0], None, "killed by signal 9 (SIGKILL)")]
    assert not child_pids.alive()
