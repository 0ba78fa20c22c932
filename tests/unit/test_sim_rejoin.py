"""A device that leaves a simulated job and joins again (``python -m mxhet.sim --events
SLOT:leave@T,SLOT:join@T2``): the State Server's rule (mxhet.control.membership's join) makes it
take part from the next round boundary, with the global model; every device ends on the same model."""
import pytest

from mxhet.errors import ConfigError
from mxhet.sim.events import parse_schedule

from tests.unit.test_sim import _sim


def test_parse_schedule_splits_leaves_and_joins():
    assert parse_schedule("3:leave@120, 3:join@300,1:leave@5", 4) == ({3: 120.0, 1: 5.0}, {3: 300.0})


def _took_part(summary, slot):
    return summary["elastic"]["membership"]["rounds_by_rank"].get(str(slot), [])


@pytest.mark.parametrize("mode, options", [
    ("localsgd", ("--local-steps", "2", "--slowdown", "1,1,1")),
    ("esync", ("--slowdown", "2,1,1", "--ack", "blocking")),
    ("esync", ("--slowdown", "2,1,1", "--ack", "delayed", "--aggregation", "normalized")),
])
def test_a_device_that_joins_again_takes_part_in_later_rounds_and_ends_on_the_same_model(tmp_path, mode, options):
    common = ("-n", "3", "--sync", mode, "--base-iter", "0.05", "--time-budget", "3", *options)
    summary, workers = _sim(tmp_path, "rejoin", *common, "--events", "2:leave@0.6,2:join@1.5")
    elastic = summary["elastic"]
    assert 0.6 <= elastic["left_at_s"]["2"] < 1.5
    assert 1.5 <= elastic["joined_at_s"]["2"] < 1.6   # registered after a round trip
    membership = elastic["membership"]
    [join] = membership["joins"]
    leave = membership["departures"][0]   # (each device's goodbye at the job's end follows)
    assert join["rank"] == leave["rank"] == 2
    assert workers[2]["rejoined_at_round"] == join["round"]
    # the record of leaves and joins: its script left the loop, it came back; at the virtual times it did
    events = membership["events"]
    assert [(e["event"], e["rank"], e["cause"], e["round"]) for e in events] == [
        ("leave", 2, "left its loop", events[0]["round"]), ("join", 2, "restarted", join["round"])]
    assert 0 < events[0]["round"] <= join["round"]
    assert events[0]["t"] == pytest.approx(elastic["left_at_s"]["2"], abs=0.01)
    assert events[1]["t"] == pytest.approx(elastic["joined_at_s"]["2"], abs=0.01)
    assert workers[0]["rejoined_at_round"] is None
    took = _took_part(summary, 2)
    others = _took_part(summary, 0)
    assert _took_part(summary, 1) == others
    # it took part before it left, missed the rounds in between, and every round from its first one on
    assert took[0] == 0
    missed = [r for r in others if r not in took]
    assert missed and all(r < join["round"] for r in missed)
    assert [r for r in others if r >= join["round"]] == [r for r in took if r >= join["round"]]
    assert len([r for r in took if r >= join["round"]]) >= 2
    assert len({workers[s]["final_model_sha256"] for s in range(3)}) == 1
    assert summary["final_accuracy"] >= 0.4


def test_an_async_device_that_leaves_and_joins_again_trains_on_the_global_model_after_its_join(tmp_path):
    # async has no rounds: the record names none, and the device's goodbye alone would read as its end, so
    # the simulator records the leave of its --events itself
    common = ("-n", "3", "--sync", "async", "--slowdown", "2,1,1", "--base-iter", "0.05", "--time-budget", "3")
    summary, workers = _sim(tmp_path, "rejoin-async", *common, "--events", "2:leave@0.6,2:join@1.5")
    elastic = summary["elastic"]
    assert 0.6 <= elastic["left_at_s"]["2"] < 1.5 <= elastic["joined_at_s"]["2"] < 1.6
    events = elastic["membership"]["events"]
    assert [(e["event"], e["rank"], e["cause"], e["round"]) for e in events] == [
        ("leave", 2, "left its loop", None), ("join", 2, "restarted", None)]
    assert events[0]["t"] == pytest.approx(elastic["left_at_s"]["2"], abs=0.01)
    assert workers[2]["rejoined_at_round"] == 0 and workers[1]["rejoined_at_round"] is None
    # slots 1 and 2 are equally fast: slot 2 misses the 0.85 virtual s it was away (about 17 iterations of
    # 0.05 s) and trains the rest of the budget after its join
    gap = workers[1]["iterations"] - workers[2]["iterations"]
    assert 12 <= gap <= 22
    assert workers[2]["iterations"] - 0.6 / 0.05 >= 20
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert summary["final_accuracy"] >= 0.4


@pytest.mark.parametrize("mode, groups", [("gcada", ("--groups", "2")), ("cada", ())])
def test_a_gcada_device_that_leaves_and_joins_again_is_selected_with_its_group_and_ends_on_the_same_model(
        tmp_path, mode, groups):
    # cada: groups of one, so the device's group is retired while it is away and reopened at its return
    common = ("-n", "4", "--sync", mode, *groups, "--slowdown", "1,1,1,2", "--base-iter", "0.05",
              "--time-budget", "3", "--step-size", "0.0005", "--max-delay", "1")
    summary, workers = _sim(tmp_path, "rejoin-" + mode, *common, "--events", "1:leave@0.6,1:join@1.5")
    events = summary["elastic"]["membership"]["events"]
    assert [(e["event"], e["rank"]) for e in events] == [("leave", 1), ("join", 1)], events
    assert [e["round"] for e in events] == [None, None]          # the rendezvous holds no rounds here
    [join] = summary["gcada"]["joins"]
    assert join["rank"] == 1 and join["reopened_group"] == (mode == "cada")
    back = workers[1]
    assert back["rejoined_at_round"] == join["k"] > 0
    iterations = summary["gcada"]["iterations"]
    # gone, its group (cada) was not selected; from its first iteration back, with D = 1, in every one
    group = join["group"]
    if mode == "cada":
        gone = min(it["k"] for it in iterations if group not in it["selected"])
        assert 0.6 <= iterations[gone]["t"] and gone < join["k"] - 1
        assert all(group not in it["selected"] for it in iterations[gone:join["k"]])
    assert all(group in it["selected"] for it in iterations if it["k"] >= join["k"])
    assert back["downloads"] > 0 and workers[0]["iterations"] >= 20
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1


def test_a_cada_device_that_leaves_zeroes_its_groups_last_gradient_on_the_servers(tmp_path, monkeypatch):
    # As the cluster's worker does at its goodbye when its group has no member left (ByeReply.retired): the
    # servers' sum no longer carries a shard nobody trains on. The simulation is caught to read its servers.
    from mxhet.sim import engine
    caught = []

    class Caught(engine.Simulation):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            caught.append(self)
    monkeypatch.setattr(engine, "Simulation", Caught)
    _sim(tmp_path, "leave-cada", "-n", "3", "--sync", "cada", "--base-iter", "0.05", "--time-budget", "1.5",
         "--step-size", "0.0005", "--max-delay", "1", "--events", "1:leave@0.6")
    [sim] = caught
    last = sim.servers.updater._last     # (parameter, group) -> the group's last gradient
    assert {g for _, g in last} == {0, 1, 2}
    assert all(float(abs(v).sum().asscalar()) == 0 for (_, g), v in last.items() if g == 1)
    assert all(float(abs(v).sum().asscalar()) > 0 for (_, g), v in last.items() if g == 0)
