"""ESync's ``--round-deadline D`` on the real cluster: the rounds wait only for the devices within D times the
fastest's iteration; the slow device's deltas enter later rounds with a staleness-discounted share; under
``--elastic`` a member killed in a deadline round is released like any dead member."""
import collections

import numpy as np
import pytest

from .jobs import assert_one_model, elastic_args, run_job, train_command

pytestmark = pytest.mark.timeout(300)

ROUNDS = 24
KILLED_ROUND = 2
GLOBAL_LR = 0.5


def test_the_slow_devices_deltas_enter_later_rounds_with_their_share_and_a_dead_member_is_released(
        tmp_path, child_pids):
    # One job, 4 workers, slot 3 sixteen times slower than the others (--base-iter pins a fast iteration to at
    # least 0.2 s, the slow one's to 3.2 s) and D = 4: slot 3 is late, the rounds are the fast devices'. (An
    # on-time device's first, warm-up iteration on a loaded machine must stay within the bound: at D = 2 over
    # 0.05 s one once did not, and was late in round 0.)
    # Under --elastic the worker of PS-LITE rank 1 (an on-time one, never the chief) dies between its push
    # and its pull of round 2 (MXHET_TEST_KILL_AFTER_PUSH, a test-only hook, mxhet.modes.killhook): the
    # round closes incomplete once the State Server finds it dead, and the job goes on with three.
    # Small batches: what is asserted (who pushes in which round, with what share) is the rule's, not the model's.
    job = run_job(tmp_path, child_pids, elastic_args("esync", 4, 0.2, 200, "--slowdown", "1,1,1,16"),
                  train_command(tmp_path / "out", "--max-rounds", str(ROUNDS), "--time-budget", "100",
                                "--batch-size", "16", "--round-deadline", "4", "--global-lr", str(GLOBAL_LR),
                                "--dump-rounds", str(ROUNDS), "--eval-samples", "100", "--final-eval-samples", "100"),
                  timeout=180, env={"MXHET_TEST_KILL_AFTER_PUSH": "1:%d" % KILLED_ROUND})
    assert job.code == 0, job.stderr[-4000:]
    summary = job.summary
    [victim] = summary["departed_slots"]
    assert victim != 3, "PS-LITE gave rank 1 to the slow slot: the kill must hit an on-time device"
    workers = {w["slot"]: w for w in summary["workers"]}
    assert sorted(workers) == sorted({0, 1, 2, 3} - {victim})
    assert_one_model(workers.values())   # one model at the end

    pushes = [(slot, r, share) for slot, w in workers.items() for r, share in w["deadline_pushes"]]
    by_round = collections.defaultdict(dict)
    for slot, r, share in pushes:
        assert slot not in by_round[r]                      # nobody pushed twice in a round
        by_round[r][slot] = share
    fast = sorted(set(workers) - {3})
    assert all(len(workers[s]["deadline_pushes"]) == ROUNDS for s in fast), {
        s: [r for r, _ in workers[s]["deadline_pushes"]] for s in workers}
    late = workers[3]["deadline_pushes"]
    # the slow device aggregated every iteration it finished before the stop (one in progress is dropped),
    # each in one round, a later one than the one its model came from; the fast ones aggregated many
    # times between two of its iterations
    assert len(late) == len(workers[3]["local_iters"]) >= 1
    assert workers[3]["iterations"] - len(late) in (0, 1)
    assert len({r for r, _ in late}) == len(late) and ROUNDS >= 3 * len(late)
    for r, share in late:
        # a delta that missed s >= 1 rounds weighs 1/(1+s) of an on-time one: its share is less than theirs,
        # and the round's shares (the killed member's, which never reached the summary, aside) sum to one
        on_time = [by_round[r][s] for s in fast]
        assert len(set(on_time)) == 1 and share < on_time[0]
        assert share + sum(on_time) == pytest.approx(1.0)
        s = on_time[0] / share - 1
        assert s >= 1 and s == pytest.approx(round(s))
    # every other round is the on-time devices' alone, in equal shares (the killed one among them until it died)
    for r, shares in by_round.items():
        if 3 not in shares:
            members = len(fast) + (r <= KILLED_ROUND)
            assert all(v == pytest.approx(1.0 / members) for v in shares.values()), (r, shares)
    # the data plane: a round with the late delta moved the global model by ε·Σ share·Δ -- the dumps hold each
    # member's share·m·Δ, so by ε times their mean -- from the model the on-time members started from (the late
    # device's own replica started rounds earlier), and every member pulled the same model
    for r, _ in late:
        dumps = dict(zip(by_round[r], job.dumps(by_round[r], r)))
        keys = len([f for f in dumps[3].files if f.startswith("after_")])
        assert keys > 0
        for i in range(keys):
            after = dumps[fast[0]]["after_%d" % i]
            for d in dumps.values():
                np.testing.assert_array_equal(d["after_%d" % i], after)
            pushed = np.mean([d["delta_%d" % i] for d in dumps.values()], axis=0)
            np.testing.assert_allclose(after, dumps[fast[0]]["before_%d" % i] + GLOBAL_LR * pushed,
                                       rtol=1e-4, atol=1e-6)
    assert summary["incomplete_rounds"] == [KILLED_ROUND]
    assert summary["round_members"][KILLED_ROUND] == 3
    [leave] = summary["elastic"]["events"]
    assert (leave["slot"], leave["cause"]) == (victim, "killed by signal 9 (SIGKILL)")
    assert not child_pids.alive()

