"""Devices that leave a simulated job (``python -m mxhet.sim --events``): the
same round rendezvous as on the cluster (mxhet.control.membership), in virtual time."""
import pytest

from mxhet.errors import ConfigError
from mxhet.sim import cli
from mxhet.sim.events import parse_events

from tests.unit.test_sim import _sim


def test_parse_events():
    assert parse_events("", 4) == {}
    assert parse_events("3:leave@120, 1:leave@0.5", 4) == {3: 120.0, 1: 0.5}


@pytest.mark.parametrize("text, message", [
    ("3-leave@1", "is not SLOT:KIND@SECONDS"), ("3:rejoin@1", "kind must be one of leave, join"),
    ("4:leave@1", r"slot must be in \[0, 4\)"), ("1:leave@-1", "finite number of seconds"),
    ("1:leave@inf", "finite number of seconds"), ("1:leave@1,1:leave@2", "slot 1 leaves twice"),
    ("1:join@3", "slot 1 joins at 3 s without leaving before"), ("1:join@3,1:leave@3", "without leaving before"),
    ("1:leave@1,1:join@2,1:join@4", "slot 1 joins twice")])
def test_bad_events_are_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_events(text, 4)


def test_events_need_a_mode_whose_rounds_the_state_server_names(tmp_path):
    args = cli.build_parser().parse_args(["-n", "3", "--sync", "ssp", "--events", "2:leave@1", "--base-iter", "0.05",
                                          "--metrics-out", str(tmp_path)])
    with pytest.raises(ConfigError, match="devices can leave in modes localsgd, esync, sync, nodelay, preduce, async, "
                                          "gcada, cada, not ssp"):
        cli.run(args)


def test_a_device_that_leaves_stops_and_the_others_average_without_it(tmp_path):
    common = ("-n", "3", "--sync", "localsgd", "--local-steps", "2", "--slowdown", "1,1,1", "--base-iter", "0.05",
              "--time-budget", "3")
    _, full = _sim(tmp_path, "full", *common)
    summary, workers = _sim(tmp_path, "leave", *common, "--events", "2:leave@1")
    rounds = [workers[s]["rounds"] for s in range(3)]
    assert rounds[0] == rounds[1] == full[0]["rounds"]   # the others do not wait for it
    assert 0 < rounds[2] < rounds[0]
    assert workers[2]["iterations"] <= 1 / 0.05 + 2      # it stopped at its first boundary after 1 virtual s
    assert len({workers[s]["final_model_sha256"] for s in range(3)}) == 1
    assert summary["final_accuracy"] >= 0.4


@pytest.mark.parametrize("options", [
    ("--ack", "blocking"),
    # the counts travel with the round's entry and the weights are normalised over its members
    ("--ack", "delayed", "--aggregation", "normalized", "--outer-optimizer", "nesterov"),
])
def test_esync_goes_on_when_its_slowest_device_leaves(tmp_path, options):
    """Rounds are paced by the slowest device (slot 0, 4x slower) until it leaves
    at 1 virtual s; Algorithm 2 then looks for the slowest among the devices
    present and the round rendezvous closes over them. On dist_sync the two
    others would wait for its push for ever (their rounds stuck at its count)."""
    common = ("-n", "3", "--sync", "esync", "--slowdown", "4,1,1", "--base-iter", "0.05", "--time-budget", "3",
              *options)
    _, full = _sim(tmp_path, "full", *common)
    summary, workers = _sim(tmp_path, "leave", *common, "--events", "0:leave@1")
    rounds = [workers[s]["rounds"] for s in range(3)]
    assert rounds[1] == rounds[2]                    # every device present aggregates every round
    assert 0 < rounds[0] <= 1 / (4 * 0.05) + 1       # it left at its first boundary after 1 virtual s
    assert rounds[1] > rounds[0] + 5                 # the others went on without it ...
    assert rounds[1] > full[1]["rounds"]             # ... faster than with it
    assert len({workers[s]["final_model_sha256"] for s in range(3)}) == 1
    assert summary["final_accuracy"] >= 0.4
