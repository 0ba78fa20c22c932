"""Two workers killed at once under ``mxhet-launch --elastic --max-restarts 1``, on real processes.

MXNet 1.9.1's PS-LITE serves one recovery per job (its scheduler aborts at a second one:
``mxhet.launcher.jobplan.PS_MAX_RECOVERIES``), so one of the two is started again and the other
stays gone. The replacement is given the first dead worker id the scheduler finds (ps-lite van.cc
``UpdateLocalID``), which may be the *other* dead worker's rank: the State Server takes a rank that
left back for another slot, and the process keeps its own slot (data shard, slowdown, metrics file).
It takes part in later rounds and ends on the survivors' model."""
import json
import re

import pytest

from .jobs import kill_and_wait, train_command

pytestmark = pytest.mark.timeout(400)

ROUNDS = 250


def test_two_workers_killed_at_once_one_restarts_the_other_stays_gone_one_model(tmp_path, child_pids):
    out = tmp_path / "out"
    # 4 workers: after two deaths 2 still train (the default minimum is 1). --base-iter pins an iteration to
    # at least 0.05 s, the slowest's to 0.1 s: the 250 rounds outlast the kill and the restart (5 s + start-up)
    code, stderr, killed = kill_and_wait(tmp_path, child_pids, ["-n", "4", "-s", "1", "--sync", "esync", "--base-iter",
                                                                "0.05", "--slowdown", "1,1,1,2", "--timeout", "300",
                                                                "--elastic", "--max-restarts", "1",
                                                                "--heartbeat-timeout", "3"],
                                         train_command(out, "--max-rounds", str(ROUNDS), "--ack", "blocking"), out,
                                         victims=2, timeout=280)
    assert code == 0, stderr[-4000:]
    back, gone = killed   # the launcher restarts the first slot that died (in slot order)
    assert stderr.count("starting it again in its slot") == 1, stderr[-3000:]
    record = json.loads((tmp_path / "job.json").read_text())
    assert [r["slot"] for r in record["worker_restarts"]] == [back]
    assert sorted(x["slot"] for x in record["worker_exits"]) == killed
    # the replacement holds one of the two dead ranks (whichever PS-LITE found first)
    seen = re.findall(r"slot (\d+) is PS-LITE rank (\d+)", stderr)
    before = {int(s): int(r) for s, r in seen[:4]}
    assert [int(s) for s, _ in seen[4:]] == [back] and int(seen[4][1]) in {before[s] for s in killed}, seen
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(4) if s != gone}
    assert not (out / ("worker-%d.json" % gone)).exists()
    first = workers[back]["rejoined_at_round"]
    assert first is not None and 0 < first < ROUNDS
    assert workers[back]["rounds"] == ROUNDS and len(workers[back]["round_end_s"]) == ROUNDS - first
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    summary = json.loads((out / "summary.json").read_text())
    members = summary["round_members"]
    assert members[0] == 4 and 2 in members[:first] and set(members[first:]) == {3}, members
    events = summary["elastic"]["events"]
    assert sorted((e["event"], e["slot"]) for e in events) == [("join", back), ("leave", back), ("leave", gone)]
    for e in events:
        assert e["cause"] == ("restarted" if e["event"] == "join" else "killed by signal 9 (SIGKILL)"), e
        assert e["t_s"] > 0 and 0 < e["round"] < ROUNDS, e
    leave = {e["slot"]: e["round"] for e in events if e["event"] == "leave"}
    by_slot = summary["elastic"]["rounds_by_slot"]
    # the rounds before its death, then every round from its first one on; the other: only before
    assert by_slot[str(back)] == [[0, leave[back] - 1], [first, ROUNDS - 1]], by_slot
    assert by_slot[str(gone)] == [[0, leave[gone] - 1]], by_slot
    assert not child_pids.alive()
