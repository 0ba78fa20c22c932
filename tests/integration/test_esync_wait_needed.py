"""ESync's ``--wait-needed R`` on the real cluster: each worker's first query from a pulled global model carries its
training loss on it (``mxhet.train`` reports the batch's loss before its step); on label-sorted data the slow
device's loss rises above R x the fast ones', and the State Server's rounds wait for it, its delta entering on
time with a full share."""
import collections

import pytest

from .jobs import assert_one_model, run_job, state_stats, train_command

pytestmark = pytest.mark.timeout(300)

ROUNDS = 24   # the slow device is first needed about round 15 (its test batch and first iteration: 16 fast rounds)


def test_on_label_sorted_data_the_rounds_wait_for_the_slow_device_the_global_model_serves_badly(
        tmp_path, child_pids):
    # 3 workers, slot 2 eight times slower (--base-iter pins a fast iteration to at least 0.2 s, the slow one's to
    # 1.6 s), D = 4: slot 2 is late until its loss on a pulled model (the initial one first) is known; the fast
    # devices' losses on their own classes fall within their first rounds, so it is then needed.
    job = run_job(tmp_path, child_pids,
                  ["-n", "3", "-s", "1", "--sync", "esync", "--base-iter", "0.2", "--timeout", "200",
                   "--slowdown", "1,1,8", *state_stats(tmp_path)],
                  train_command(tmp_path / "out", "--max-rounds", str(ROUNDS), "--time-budget", "120",
                                "--batch-size", "16", "--dist", "non-iid", "--round-deadline", "4",
                                "--wait-needed", "2", "--eval-samples", "100", "--final-eval-samples", "100"),
                  timeout=200)
    assert job.code == 0, job.stderr[-4000:]
    workers = {w["slot"]: w for w in job.summary["workers"]}
    assert_one_model(workers.values())
    slow_rank = workers[2]["rank"]
    rounds = {r["round"]: r for r in job.state("rounds")}
    waited = sorted(t for t, r in rounds.items() if slow_rank in r["needed"])
    assert waited, rounds
    assert all("needed" in r for r in rounds.values())
    by_round = collections.defaultdict(dict)
    for slot, w in workers.items():
        for r, share in w["deadline_pushes"]:
            by_round[r][slot] = share
    for t in waited:   # a round that waited for the slow device holds its delta with the fast devices' share
        assert by_round[t][2] == pytest.approx(by_round[t][0]) == pytest.approx(1 / 3), (t, by_round[t])
    # before it was first needed its deltas were late (a staleness discount)
    early = [share for t, share in workers[2]["deadline_pushes"] if t < waited[0]]
    assert early and all(share < 1 / 3 for share in early), workers[2]["deadline_pushes"]
