"""The simulator reaches the stop window (``python -m mxhet.sim --events SLOT:leave@T,SLOT:join@T2`` with the
join while the others' last round is open): the device back is given the round after it and takes part in
no round from there -- under localsgd its entry is answered ``over`` (mxhet.control.membership), under ESync
its query is answered stop (RESET agreed it) -- the record counts it late, and every device ends on the
same model. The cluster's rules, on the simulator's State Server."""
import pytest

from tests.unit.test_sim import _sim

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("mode, options, join_at", [
    # device 0 is 3x slower: device 1 waits at every round's entry; at 1.4 s it waits in round 4, the last
    ("localsgd", ("--local-steps", "2"), "1.4"),
    # ESync's last round (4) is under way at 0.9 s; its RESET stops the job before device 2's first query
    ("esync", ("--ack", "blocking"), "0.9"),
])
def test_a_device_back_while_the_last_round_is_open_takes_part_in_nothing_more(tmp_path, mode, options, join_at):
    summary, workers = _sim(tmp_path, "window", "-n", "3", "--sync", mode, *options, "--slowdown", "3,1,1",
                            "--base-iter", "0.05", "--max-rounds", "5", "--time-budget", "30",
                            "--events", "2:leave@0.3,2:join@" + join_at)
    membership = summary["elastic"]["membership"]
    [join] = membership["joins"]
    assert max(int(r) for r in membership["members"]) == 4 and join["round"] == 5   # back in the last round
    # without the rule (localsgd) round 5 was held with device 2 alone, and the final model held its delta
    assert membership["rounds_by_rank"]["2"] == [0]
    assert [(e["event"], e["rank"], e["cause"]) for e in membership["events"]] == [
        ("leave", 2, "left its loop"), ("join", 2, "restarted"), ("late", 2, "restarted")]
    assert membership["events"][2]["t"] >= float(join_at)
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert workers[2]["rounds"] == 5 and workers[0]["rounds"] == 5
