"""ESync workers leave the job -- their script runs out of batches before the
slow worker's, or one dies under ``mxhet-launch --elastic`` -- and the others
train on, on real processes. The same mechanism as localsgd's
(test_elastic_leave.py): the State Server names each round's members, the
servers add every push (dist_async); Algorithm 2 looks for the slowest among
the devices still training."""
import numpy as np
import pytest

from .jobs import assert_one_model, assert_round_moved, elastic_args, run_job, run_leaving_job, train_command
from .test_elastic_leave import assert_deaths_recorded

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_fast_workers_that_run_out_of_batches_first_end_with_the_global_model(tmp_path, child_pids, ack):
    # an epoch loop as MXNet users write it: every worker runs the same 16 steps and just ends (no finish(), no
    # stop condition); the fast ones run out of batches long before the 4x slower one. --base-iter pins an
    # iteration to at least 0.05 s, the slow worker's to 0.2 s
    proc, results = run_leaving_job(["-n", "3", "-s", "1", "--sync", "esync", "--slowdown", "1,1,4", "--base-iter",
                                     "0.05", "--timeout", "200"], tmp_path, child_pids, steps=16, workers=3, ack=ack)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [r["steps"] for r in results] == [16, 16, 16]
    assert all(r["departed"] for r in results)
    slow = results[2]
    # the fast workers left after a few rounds; the slow one aggregated on alone
    assert max(r["rounds"] for r in results[:2]) < slow["rounds"]
    assert slow["members"][0] == 3 and slow["members"][-1] == 1, slow["members"]
    assert_one_model(results, key="digest")
    assert not child_pids.alive()


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_an_esync_worker_killed_between_its_push_and_its_pull_its_delta_is_in_the_model_once(
        tmp_path, child_pids, ack):
    # The worker of PS-LITE rank 1 (never the chief) saves what it pushed in round 5, then sends itself SIGKILL
    # before it says done and pulls (MXHET_TEST_KILL_AFTER_PUSH, a test-only hook, mxhet.modes.killhook): the
    # same hook and the same outcome with either ACK -- the READY that sent it into the round was read (delayed:
    # picked up after an iteration, which it abandoned), the round's done is RoundMembers' whatever the ACK,
    # and the rule cannot know its push arrived. With delayed ACKs the survivors' queries are sent without
    # waiting right after the round (the Algorithm 2 records then drop the dead rank). A kill -9 from outside
    # at any moment, queries in flight, is test_elastic_rejoin.py's (delayed ACKs).
    victim_push, round_ = tmp_path / "victim-push.npz", 5
    job = run_job(tmp_path, child_pids, elastic_args("esync", 3, 0.05, 200),
                  train_command(tmp_path / "out", "--max-rounds", "12", "--ack", ack, "--dump-rounds", str(round_ + 1)),
                  timeout=150, env={"MXHET_TEST_KILL_AFTER_PUSH": "1:%d:%s" % (round_, victim_push)})
    stderr = job.stderr
    assert job.code == 0, stderr[-4000:]
    assert "SIGKILL" in stderr and "the others train on" in stderr, stderr[-3000:]
    summary = job.summary
    [victim] = summary["departed_slots"]
    survivors = sorted(set(range(3)) - {victim})
    assert not job.has_report(victim)
    workers = list(job.reports(survivors).values())
    assert_one_model(workers)
    assert workers[0]["rounds"] == workers[1]["rounds"] == 12
    # the rule's view: the victim was a member of round 5 and never said done, so the round closed incomplete
    # once the State Server found it dead; from round 6 on the rounds have 2 members
    members = summary["round_members"]
    assert members[:round_ + 1] == [3] * (round_ + 1) and set(members[round_ + 1:]) == {2}, members
    assert summary["incomplete_rounds"] == [round_]
    [leave] = summary["elastic"]["events"]
    assert (leave["slot"], leave["round"]) == (victim, round_ + 1)
    assert_deaths_recorded(summary, [victim], 12, survivors, tmp_path / "job.json")
    # the data plane's view: round 5 moved the global model by exactly the members' pushes, the victim's once
    # (esync's defaults: ε = 1, mean: a member pushes its delta / 3)
    assert_round_moved(job.dumps(survivors, round_), 3, np.load(victim_push))
    assert not child_pids.alive()
