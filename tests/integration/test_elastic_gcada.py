"""G-CADA under ``mxhet-launch --elastic`` on real processes, two deaths in one job: a claimant killed
mid-upload (half its group's gradient on the servers) -- the State Server reopens its group's claim and a
teammate uploads that iteration's gradient in full --; later the worker that triggers the servers' step
killed mid-step (some parameters stepped, the others not) -- the step goes to a live worker and the
servers step only the parameters not yet stepped for that iteration. Exit 0, the survivors on one model.
And a worker killed and started again (``--max-restarts 1``): taken back into its group, which a death
had retired, from the iteration after its first request; exit 0, every worker on one model."""
import json

import pytest

from .jobs import kill_and_wait, start, train_command, wait_for

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


# extended (MXHET_EXTENDED_TESTS=1), for make test's time: tests/unit/test_gcada_rejoin.py holds the coordinator's,
# the State Server's and the simulator's cases of a worker taken back
@pytest.mark.extended
def test_a_cada_worker_killed_and_started_again_is_selected_again_and_every_worker_ends_on_one_model(
        tmp_path, child_pids):
    # CADA, 3 workers (groups of one), D = 1: every live worker's group is selected every iteration, so the
    # victim's group is retired while it is away (its last gradient zeroed) and reopened at its return; the
    # servers wait for its upload in every iteration from its first one back. A kill -9 from outside, 1 s
    # after the chief's first snapshot; --heartbeat-timeout 3: the replacement starts 3 + 2 s after the death.
    out, stats = tmp_path / "out", tmp_path / "state.json"
    iterations = 400
    code, stderr, killed = kill_and_wait(
        tmp_path, child_pids,
        ["-n", "3", "-s", "1", "--sync", "cada", "--base-iter", "0.05", "--timeout", "300", "--elastic",
         "--heartbeat-timeout", "3", "--max-restarts", "1", "--state-stats", str(stats)],
        train_command(out, "--model", "linear", "--max-delay", "1", "--batch-size", "16",
                      "--max-rounds", str(iterations), "--step-size", "0.01"),
        out, timeout=280)
    assert code == 0, stderr[-4000:]
    [victim] = killed
    [restart] = json.loads((tmp_path / "job.json").read_text())["worker_restarts"]
    assert restart["slot"] == victim and "SIGKILL" in restart["cause"], restart
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(3)}
    back = workers[victim]
    first = back["rejoined_at_round"]
    assert first is not None and 0 < first < iterations, back
    # (its counters are the replacement's own): it downloaded and uploaded its group's gradient
    assert back["downloads"] > 0 and back["uploads"] > 0, back
    assert all(w["rejoined_at_round"] is None for s, w in workers.items() if s != victim)
    record = json.loads(stats.read_text())["gcada"]
    [death] = record["deaths"]
    [join] = record["joins"]
    assert death["group"] == join["group"] and join["rank"] == death["rank"] and join["reopened_group"], record
    assert join["k"] == first
    steps = record["iterations"]
    assert [it["k"] for it in steps] == list(range(len(steps))) and len(steps) > first
    assert all(it["uploads"] == len(it["selected"]) for it in steps)   # one upload per selected group
    assert any(join["group"] not in it["selected"] for it in steps[:first])      # retired while away
    assert all(join["group"] in it["selected"] for it in steps[first:])         # selected again from then on
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    events = json.loads((out / "summary.json").read_text())["elastic"]["events"]
    assert [(e["event"], e["slot"]) for e in events] == [("leave", victim), ("join", victim)], events
    assert not child_pids.alive()
