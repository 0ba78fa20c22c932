"""The chief (PS-LITE rank 0) killed and started again (``mxhet-launch --elastic --max-restarts 1``, PS-LITE's
recovery gives the replacement rank 0), on real processes: the replacement continues the job's record --
the dead chief's snapshots and loss points stay, its own come after them on the job's clock."""
import hashlib
import json
import os
import time

import pytest

from .jobs import (ROUNDS_BUDGET, assert_one_model, elastic_args, run_job, train_command, wait_for, wait_for_ranks,
                   worker_pid)

pytestmark = pytest.mark.timeout(400)


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_a_chief_started_again_continues_the_jobs_curve_and_times(tmp_path, child_pids):
    out = tmp_path / "out"
    snaps = out / "snapshots"
    # 200 rounds of 2 steps padded to 0.05 s: at least 20 s of training, which outlasts the death, the
    # restart delay (--heartbeat-timeout 3 + 2 s) and the replacement's start-up
    rounds = 200

    def kill_the_chief(proc, job_file):
        [chief] = [slot for slot, rank in wait_for_ranks(tmp_path / "launcher.err", proc, 3) if rank == 0]
        wait_for(snaps / "000001.params", proc)
        time.sleep(1.0)
        index = json.loads((snaps / "index.json").read_text())
        before = {name: _digest(snaps / name) for _, name in index["snapshots"]}
        os.kill(worker_pid(job_file, chief), 9)
        return chief, index, before

    job = run_job(tmp_path, child_pids, elastic_args("localsgd", 3, 0.05, 300, "--max-restarts", "1"),
                  train_command(out, "--max-rounds", str(rounds), "--local-steps", "2", "--eval-interval", "1.0",
                                "--time-budget", ROUNDS_BUDGET),
                  timeout=300, during=kill_the_chief)
    chief, index, before = job.during
    assert job.code == 0, job.stderr[-4000:]
    assert "starting it again in its slot" in job.stderr, job.stderr[-3000:]
    assert "it continues the chief's record" in job.stderr, job.stderr[-3000:]
    [restart] = job.record["worker_restarts"]
    assert restart["slot"] == chief
    workers = job.reports(range(3))
    assert_one_model(workers.values())
    first = workers[chief]["rejoined_at_round"]
    assert workers[chief]["rank"] == 0 and 0 < first < rounds

    summary = job.summary
    by = summary["written_by"]
    assert by["rank"] == 0 and by["slot"] == chief and not by["took_over"], by
    [back] = by["chief_restarts"]
    assert back["round"] == first and back["slot"] == chief
    # the replacement came back after the dead chief's last indexed snapshot, on the job's clock
    assert back["t_s"] > back["curve_kept_until_s"] >= round(index["snapshots"][-1][0], 3), (back, index)

    # one curve: the dead chief's points (at least those indexed before the kill, unchanged), then the
    # replacement's after its join, in increasing time
    curve = summary["curve"]
    times = [t for t, _ in curve]
    assert times == sorted(times) and len(set(times)) == len(times), curve
    assert times[:len(index["snapshots"])] == [round(t, 3) for t, _ in index["snapshots"]], (curve, index)
    assert any(t > back["t_s"] for t in times[:-1]), (curve, back)   # a snapshot of the replacement's
    assert times[-1] > back["t_s"]
    losses = [t for t, _ in summary["train_loss"]]
    assert losses == sorted(losses) and losses[:len(index["train_loss"])] == [t for t, _ in index["train_loss"]]
    assert any(t < back["t_s"] for t in losses) and any(t > back["t_s"] for t in losses), (losses, back)
    assert summary["train_time_s"] > back["t_s"]

    # every event on the job's clock: the chief's leave before its join, all after the start
    events = summary["elastic"]["events"]
    assert [(e["event"], e["slot"]) for e in events] == [("leave", chief), ("join", chief)], events
    assert all(e["t_s"] is not None and e["t_s"] > 0 for e in events), events
    assert events[0]["t_s"] < events[1]["t_s"] <= back["t_s"] + 5.0, (events, back)

    # round_members: every round of the job, from the State Server's record up to the return, 2 members
    # while the chief was away
    members = summary["round_members"]
    assert len(members) == rounds and members[0] == 3 and members[-1] == 3, members
    assert 2 in members[:first] and set(members[first:]) == {3}, (members, first)

    # the dead chief's snapshot files are still there, unchanged; the replacement's are numbered after them
    assert all(_digest(snaps / name) == digest for name, digest in before.items()), before
    kept = set(before)
    later = sorted(n for n in os.listdir(snaps) if n.endswith(".params") and n not in kept)
    assert later and min(later) > max(kept), (sorted(kept), later)
    assert not child_pids.alive()
