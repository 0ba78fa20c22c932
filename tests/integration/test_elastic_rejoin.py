"""A killed worker is started again and rejoins (``mxhet-launch --elastic --max-restarts K``),
on real processes: PS-LITE's recovery gives it the dead worker's rank, the State Server's
round rendezvous takes it back from the next round boundary, it trains in the later rounds
and ends on the same global model as the others."""
import numpy as np
import pytest

from .jobs import ROUNDS_BUDGET, assert_one_model, assert_round_moved, elastic_args, kill_job, run_job, train_command

pytestmark = pytest.mark.timeout(400)


def test_a_killed_worker_started_again_takes_part_in_later_rounds_and_ends_on_the_same_model(tmp_path, child_pids):
    # Delayed ACKs only: the rejoin is the same code whatever the ACK (RoundMembers.on_connect takes the
    # State Server's registered round, the launcher's restart and PS-LITE's recovery know nothing of ACKs), and
    # with delayed ACKs the dead worker has queries in flight when it dies, the case blocking ones never reach
    # (a second launch with blocking ACKs proved nothing more).
    # measured: the restarted worker's first round was 40 on an idle machine, 71-78 at load 10; at 150 rounds a
    # loaded machine once ended the job before the replacement had started (the kill 1 s in, PS-LITE's and the
    # State Server's 3 s, the 2 s delay and a start-up, against 0.1-0.15 s rounds)
    rounds = 200
    # --base-iter pins an iteration to at least 0.05 s: the rounds outlast the kill and the restart delay.
    # --heartbeat-timeout 3 (PS-LITE's own is 3 s): the launcher starts a dead worker again after 3 + 2 s, not 5 + 2
    job = kill_job(tmp_path, child_pids,
                   elastic_args("esync", 3, 0.05, 300, "--max-restarts", "1", "--slowdown", "1,1,2"),
                   train_command(tmp_path / "out", "--max-rounds", str(rounds), "--ack", "delayed",
                                 "--time-budget", ROUNDS_BUDGET), timeout=280)
    stderr, killed = job.stderr, job.during
    assert job.code == 0, stderr[-4000:]
    record = job.record["worker_restarts"]
    assert [r["slot"] for r in record] == killed and "SIGKILL" in record[0]["cause"]
    assert 0 < record[0]["died_s"] < record[0]["restarted_s"]
    [victim] = killed
    assert "SIGKILL" in stderr and "starting it again in its slot" in stderr, stderr[-3000:]
    workers = job.reports(range(3))
    back = workers[victim]
    first = back["rejoined_at_round"]
    assert first is not None and 0 < first < rounds
    # it took part in every round from its first one to the job's last (one record per round it aggregated)
    assert back["rounds"] == rounds and len(back["round_end_s"]) == rounds - first
    others = [workers[s] for s in range(3) if s != victim]
    assert all(w["rejoined_at_round"] is None and len(w["round_end_s"]) == rounds for w in others)
    # the chief's record: rounds of 3 members, of 2 while it was gone, of 3 again from its first round on
    members = job.summary["round_members"]
    assert members[0] == 3 and 2 in members[:first] and set(members[first:]) == {3}, members
    assert_one_model(workers.values())
    assert not child_pids.alive()


def test_a_localsgd_worker_killed_between_its_push_and_its_pull_is_started_again_and_ends_on_the_same_model(
        tmp_path, child_pids):
    # The death in the exchange itself and the rejoin in one launch: PS-LITE rank 1 sends itself SIGKILL once
    # the servers applied its push of round 3, before it says done and pulls (MXHET_TEST_KILL_AFTER_PUSH,
    # mxhet.modes.killhook); the round closes incomplete once the State Server finds it dead, the next rounds
    # have 2 members, and --max-restarts 1 brings it back at a round boundary (its rounds count past 3 then,
    # and the file the hook saved marks its first life: the hook does not fire twice).
    rounds, dying = 120, 3
    victim_push = tmp_path / "victim-push.npz"
    job = run_job(tmp_path, child_pids, elastic_args("localsgd", 3, 0.05, 300, "--max-restarts", "1"),
                  train_command(tmp_path / "out", "--max-rounds", str(rounds), "--local-steps", "2",
                                "--dump-rounds", str(dying + 1), "--time-budget", ROUNDS_BUDGET), timeout=280,
                  env={"MXHET_TEST_KILL_AFTER_PUSH": "1:%d:%s" % (dying, victim_push)})
    assert job.code == 0, job.stderr[-4000:]
    assert "starting it again in its slot" in job.stderr, job.stderr[-3000:]
    workers = job.reports(range(3))
    [victim] = [s for s, w in workers.items() if w["rejoined_at_round"] is not None]
    [restart] = job.record["worker_restarts"]
    assert restart["slot"] == victim and "SIGKILL" in restart["cause"]
    first = workers[victim]["rejoined_at_round"]
    assert dying < first < rounds
    assert all(w["rounds"] == rounds for w in workers.values())
    summary = job.summary
    members = summary["round_members"]
    assert summary["incomplete_rounds"] == [dying]
    assert members[:dying + 1] == [3] * (dying + 1) and set(members[dying + 1:first]) == {2}, members
    assert set(members[first:]) == {3} and len(members) == rounds, members
    assert_one_model(workers.values())
    # the round moved the global model by exactly its members' pushes, the victim's once (each pushes Δ/3)
    survivors = sorted(set(workers) - {victim})
    assert_round_moved(job.dumps(survivors, dying), 3, np.load(victim_push))
    assert not child_pids.alive()
