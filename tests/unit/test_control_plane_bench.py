"""``mxhet-bench control-plane``: its arithmetic, its JSON and report, and a tiny real run."""
import array
import json

import pytest

from bench import cli
from bench import control_plane as cp


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert cp.percentile(values, 0.5) == 50
    assert cp.percentile(values, 0.99) == 99
    assert cp.percentile(values, 0.999) == 100
    assert cp.percentile([7], 0.99) == 7
    assert cp.percentile([], 0.5) != cp.percentile([], 0.5)   # nan


def test_summarize_arithmetic():
    config = cp.Config(registered=10, clients=4, duration=2.0, generators=2)
    lat = lambda xs: array.array("d", xs).tobytes()  # noqa: E731
    results = [{"queries": 3, "errors": 0, "cpu_s": 1.0, "latencies": lat([0.001, 0.002, 0.003])},
               {"queries": 1, "errors": 1, "cpu_s": 0.5, "latencies": lat([0.004])}]
    record = cp.summarize(config, results, server_cpu_s=0.004, cpu_window_s=2.0)
    assert record["qps"] == 2.0                                   # 4 queries in 2 s
    assert record["errors"] == 1
    assert record["latency_ms"]["p50"] == 2.0 and record["latency_ms"]["max"] == 4.0
    assert record["latency_ms"]["mean"] == 2.5
    assert record["server_cpu_util"] == 0.002
    assert record["server_cpu_per_query_us"] == 1000.0            # 4 ms of CPU for 4 queries
    assert record["generator_cpu_share"] == [0.5, 0.25]
    assert "| after | off | zmtp | 10 | 4 | 4 | 2 |" in cp.format_row(record)
    assert "| 1000.0 |" in cp.format_row(record)


def test_medians_pick_the_middle_run_per_configuration():
    base = {"label": "after", "auth": False, "registered": 64, "active_ranks": 64, "clients": 64}
    runs = [dict(base, qps=q) for q in (30.0, 10.0, 20.0)] + [dict(base, registered=2000, qps=5.0)]
    chosen = cp.medians(runs)
    assert [(r["registered"], r["qps"], r["qps_range"], r["repeats"]) for r in chosen] == [
        (64, 20.0, [10.0, 30.0], 3), (2000, 5.0, [5.0, 5.0], 1)]


def test_config_checks_and_rank_split():
    with pytest.raises(ValueError):
        cp.Config(registered=2, clients=4)                         # fewer ranks than clients
    with pytest.raises(ValueError):
        cp.Config(registered=100, clients=4, active_ranks=2)
    config = cp.Config(registered=100, clients=3, active_ranks=8)
    assert [config.ranks_of(c) for c in range(3)] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    plan = cp.plan((4, 2000), clients=4, active_ranks=(0, 1000), auth=("off", "on"), labels=("before", "after"))
    assert len(plan) == 2 * 2 * 3                                 # 1000 querying ranks skip n = 4
    assert {(c.label, c.auth) for c in plan} == {("before", False), ("before", True), ("after", False),
                                                 ("after", True)}


def test_config_refuses_unknown_clients_cpus_and_curve_without_libzmq():
    with pytest.raises(ValueError, match="client"):
        cp.Config(registered=4, clients=2, client="raw")
    with pytest.raises(ValueError, match="libzmq"):
        cp.Config(registered=4, clients=2, auth=True, client="zmtp")
    with pytest.raises(ValueError, match="server_cpus"):
        cp.Config(registered=4, clients=2, server_cpus=(10 ** 6,))
    plan = cp.plan((4,), clients=2, auth=("off", "on"), client="zmtp", server_cpus=[0])
    assert [(c.auth, c.client, c.server_cpus) for c in plan] == [(False, "zmtp", (0,)), (True, "zmq", (0,))]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", ["zmtp", "zmq"])
def test_both_clients_get_answers_from_a_pinned_server(client):
    cpus = sorted(__import__("os").sched_getaffinity(0))
    config = cp.Config(registered=5, clients=2, active_ranks=4, duration=0.5, warmup=0.2, client=client,
                       server_cpus=(cpus[0],), generator_cpus=(cpus[-1],))
    record = cp.run_config(config)
    assert record["client"] == client and record["server_cpus"] == [cpus[0]]
    _check_closed_loop(record, clients=2, duration_s=0.5)


def _check_closed_loop(record, clients, duration_s):
    """What a closed-loop measurement must satisfy whatever the machine's speed.

    Every reply was a decision (``"ok": true``; a refusal counts as an error), and each client has at most
    one query in flight, so the latencies counted inside the window add up to at most clients x window:
    a generator that counted replies it never waited for, or queries twice, breaks that bound.
    """
    assert record["queries"] > 0 and record["errors"] == 0
    latency = record["latency_ms"]
    in_flight_s = record["queries"] * latency["mean"] / 1000.0
    assert in_flight_s <= clients * duration_s * 1.001, record
    assert 0 < latency["p50"] <= latency["p99"] <= latency["max"] <= 1000.0 * duration_s
    assert record["qps"] == pytest.approx(record["queries"] / duration_s, abs=0.1)
    assert record["server_cpu_per_query_us"] > 0


def test_cli_refuses_bad_lists(capsys):
    assert cli.main(["control-plane", "--registered", "a,b"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert cli.main(["control-plane", "--registered", "2", "--clients", "4"]) == 2


@pytest.mark.timeout(120)
def test_tiny_real_run_writes_json_and_report(tmp_path):
    configs = cp.plan((6,), clients=2, active_ranks=(0, 4), duration=0.5, warmup=0.2, generators=1)
    result = cp.run_experiment(configs, str(tmp_path), command=["test"], show_progress=False,
                               profile_registered=(6,), profile_duration=0.5)
    assert result["failures"] == []
    written = json.loads((tmp_path / "control-plane.json").read_text())
    assert [r["active_ranks"] for r in written["runs"]] == [2, 4]
    for run in written["runs"]:
        _check_closed_loop(run, clients=2, duration_s=0.5)
        assert len(run["generator_cpu_share"]) == 1
        assert "--heartbeat-timeout 0" in run["server_command"]
    assert {"cpu", "cores", "python"} <= set(written["machine"])
    (profile,) = written["profiles"]
    assert profile["top"] and profile["total_s"] > 0
    assert not list(tmp_path.glob("*.prof"))
    (split,) = written["breakdown"]
    assert split["registered"] == 6 and split["decode_us"] > 0 and split["handle_us"] > 0 and split["encode_us"] > 0
    report = (tmp_path / "control-plane.md").read_text()
    assert cp.format_row(written["runs"][0]) in report
