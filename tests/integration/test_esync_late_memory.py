"""ESync's ``--late-memory`` on the real cluster: a late device's delta is also pushed to its memory keys on the
servers; in every round it misses, the round's keeper (the lowest rank on time) adds that delta again at 1/N,
pulling it once per late delta."""
import collections

import numpy as np
import pytest

from .jobs import assert_one_model, run_job, train_command

pytestmark = pytest.mark.timeout(300)

ROUNDS = 30
GLOBAL_LR = 0.5


def test_the_rounds_a_late_device_misses_add_its_latest_delta_at_one_nth(tmp_path, child_pids):
    # 3 workers, slot 2 eight times slower (--base-iter pins a fast iteration to at least 0.2 s, the slow one's
    # to 1.6 s) and D = 4: slot 2 is late, the rounds are the two fast devices', and each of its deltas is
    # followed by rounds without it. Small batches: what is asserted is the rule's arithmetic, not the model's.
    job = run_job(tmp_path, child_pids,
                  ["-n", "3", "-s", "1", "--sync", "esync", "--base-iter", "0.2", "--timeout", "200",
                   "--slowdown", "1,1,8"],
                  train_command(tmp_path / "out", "--max-rounds", str(ROUNDS), "--time-budget", "100",
                                "--batch-size", "16", "--round-deadline", "4", "--late-memory",
                                "--global-lr", str(GLOBAL_LR), "--dump-rounds", str(ROUNDS),
                                "--eval-samples", "100", "--final-eval-samples", "100"),
                  timeout=180)
    assert job.code == 0, job.stderr[-4000:]
    workers = {w["slot"]: w for w in job.summary["workers"]}
    assert_one_model(workers.values())
    fast = [0, 1]
    keeper = min(fast, key=lambda s: workers[s]["rank"])
    other = (set(fast) - {keeper}).pop()
    by_round = collections.defaultdict(dict)
    for slot, w in workers.items():
        for r, share in w["deadline_pushes"]:
            by_round[r][slot] = share
    late = [r for r, _ in workers[2]["deadline_pushes"]]
    assert late and all(len(workers[s]["deadline_pushes"]) == ROUNDS for s in fast)
    # every late delta was remembered; the fast devices' never were
    assert workers[2]["late_memory"]["pushes"] == len(late)
    assert workers[keeper]["late_memory"]["pushes"] == workers[other]["late_memory"]["pushes"] == 0
    assert workers[2]["late_memory"]["pulls"] == workers[other]["late_memory"]["pulls"] == 0

    absent = [r for r in range(late[0] + 1, ROUNDS) if 2 not in by_round[r]]
    assert absent, by_round
    # the keeper pulled each remembered delta once, before the first round it was needed in
    needed = {max(t for t in late if t < r) for r in absent}
    assert workers[keeper]["late_memory"]["pulls"] == len(needed)

    keys = len([f for f in job.dumps([2], late[0])[0].files if f.startswith("delta_")])
    for r in range(ROUNDS):
        dumps = dict(zip(sorted(by_round[r]), job.dumps(sorted(by_round[r]), r)))
        # the servers moved the model by ε times the mean of the pushes (the keeper's with the memory in it)
        for i in range(keys):
            before, after = dumps[keeper]["before_%d" % i], dumps[keeper]["after_%d" % i]
            pushed = np.mean([d["delta_%d" % i] for d in dumps.values()], axis=0)
            np.testing.assert_allclose(after, before + GLOBAL_LR * pushed, rtol=1e-4, atol=1e-6)
        assert not any(f.startswith("memory_") for f in dumps[other].files)
        if r not in absent:   # slot 2 is a member, or has no delta yet: nothing remembered is added
            assert not any(f.startswith("memory_") for d in dumps.values() for f in d.files), r
            continue
        # a round without slot 2: the keeper's push holds m/N times slot 2's latest delta (m = 2 members, N = 3)
        source = max(t for t in late if t < r)
        [mine] = job.dumps([2], source)
        share, members = by_round[source][2], len(by_round[source])
        for i in range(keys):
            remembered = mine["delta_%d" % i] / (share * members)   # its pushed share·m·Δ, back to Δ
            np.testing.assert_allclose(dumps[keeper]["memory_%d" % i], remembered * 2 / 3, rtol=1e-4, atol=1e-7)
    assert any(np.abs(job.dumps([keeper], absent[0])[0]["memory_%d" % i]).max() > 0 for i in range(keys))
