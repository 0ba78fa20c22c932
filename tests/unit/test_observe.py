"""The live feed, the dashboard's state and app, and the TensorBoard writer, in-process."""
import json
import os
import types

import pytest

from mxhet.errors import ConfigError
from mxhet.observe import live, tensorboard
from mxhet.observe.dashboard import Dashboard, JobView, create_app, parse_address
from mxhet.observe.worker import WorkerObserver


class FakeClock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def fake_stats(slot, rank, rounds, **extra):
    base = dict(rank=rank, slot=slot, context="cpu", slowdown=1.0 + slot, rounds=rounds,
                local_iters=[3 + slot] * rounds, iterations=(3 + slot) * rounds, samples=64 * (3 + slot) * rounds,
                compute_s=3.0, wait_s=1.0, rtt_s=0.002, state_replies=rounds, bytes_pushed=1000 * rounds,
                bytes_pulled=2000 * rounds, round_slowest=[2] * rounds)
    base.update(extra)
    return types.SimpleNamespace(**base)


def test_live_writer_is_rate_limited_and_atomic(tmp_path):
    clock = FakeClock()
    writer = live.LiveWriter(str(tmp_path / "live"), 1, interval=1.0, clock=clock)
    assert writer.write({"rounds": 1})
    assert not writer.write({"rounds": 2})          # within the interval
    assert writer.write({"rounds": 3}, force=True)
    clock.t += 1.0
    assert writer.write({"rounds": 4})
    record = live.read_feed(str(tmp_path / "live"), 1)
    assert record["rounds"] == 4 and record["format"] == live.FEED_FORMAT
    assert os.listdir(str(tmp_path / "live")) == ["worker-1.json"]   # no temp file left behind
    with pytest.raises(ValueError, match="interval"):
        live.LiveWriter(str(tmp_path), 0, interval=0)


def test_read_feed_ignores_missing_and_foreign_files(tmp_path):
    assert live.read_feed(str(tmp_path), 0) is None
    (tmp_path / "worker-0.json").write_text("{not json")
    assert live.read_feed(str(tmp_path), 0) is None
    (tmp_path / "worker-0.json").write_text(json.dumps({"rounds": 3}))
    assert live.read_feed(str(tmp_path), 0) is None


def test_worker_record_keeps_the_last_rounds_and_drops_non_finite_values():
    stats = fake_stats(0, 0, 80, rtt_s=float("nan"))
    record = live.worker_record(stats, mode="esync", phase="training", elapsed_s=12.3456, samples_per_s=float("inf"),
                                loss=0.5, losses=[[1.0, float("nan")]], keep_rounds=10)
    assert record["local_iters"][0] == [71, 3] and record["local_iters"][-1] == [80, 3]
    assert record["slowest"][-1] == [80, 2]
    assert record["compute_ratio"] == pytest.approx(0.75)
    assert record["rtt_s"] is None and record["samples_per_s"] is None
    assert record["losses"] == [[1.0, None]]
    json.dumps(record, allow_nan=False)


def _feed(directory, stats, **kw):
    live.LiveWriter(str(directory), stats.slot).write(
        live.worker_record(stats, mode="esync", phase=kw.pop("phase", "training"), elapsed_s=5.0, **kw))


def test_build_state_lists_every_device_and_names_the_slowest(tmp_path):
    devices = [{"slot": s, "host": "127.0.0.1", "context": "cpu", "slowdown": [1, 1, 10][s]} for s in range(3)]
    state = live.build_state(devices, str(tmp_path), mode="esync", elapsed_s=3.0)
    assert [d["slot"] for d in state["devices"]] == [0, 1, 2]
    assert all(d["phase"] == "starting" and not d["fed"] for d in state["devices"])
    assert state["job"]["reporting"] == 0 and state["job"]["accuracy"] is None

    # slot 2 is PS-LITE rank 2, the slowest; slot 1 is rank 0 (the chief) and has scored a snapshot
    _feed(tmp_path, fake_stats(0, 1, 8, round_slowest=[2] * 7 + [-1]), samples_per_s=100.0)   # round 8 capped
    _feed(tmp_path, fake_stats(1, 0, 8), samples_per_s=120.0, accuracy=[[2.0, 0.41], [4.0, 0.62]],
          losses=[[2.0, 1.1]], phase="evaluating")
    _feed(tmp_path, fake_stats(2, 2, 8, round_slowest=[]), samples_per_s=10.0)
    state = live.build_state(devices, str(tmp_path), mode="esync", elapsed_s=9.0)
    job, devs = state["job"], state["devices"]
    assert job["rounds"] == 8 and job["reporting"] == 3 and job["phase"] == "evaluating"
    assert job["accuracy"] == 0.62 and job["accuracy_at_s"] == 4.0
    assert job["slowest_slot"] == 2 and job["slowest_round"] == 8
    assert [d["slowest"] for d in devs] == [False, False, True]
    assert [d["rank"] for d in devs] == [1, 0, 2]
    assert devs[1]["local_iters"][-1] == [8, 4]
    assert job["samples_per_s"] == pytest.approx(230.0)
    json.dumps(state, allow_nan=False)


def test_parse_address():
    assert parse_address("8050") == ("127.0.0.1", 8050)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("localhost:80", "127.0.0.1:http", "127.0.0.1:70000", ""):
        with pytest.raises(ConfigError, match="--dashboard"):
            parse_address(bad)


def test_app_serves_state_and_page_and_changes_nothing(tmp_path):
    _feed(tmp_path, fake_stats(0, 0, 4), samples_per_s=50.0)
    view = JobView([{"slot": 0, "host": "127.0.0.1", "context": "cpu", "slowdown": 1.0},
                    {"slot": 1, "host": "127.0.0.1", "context": "cpu", "slowdown": 4.0}], str(tmp_path), "esync")
    client = create_app(view, "127.0.0.1").test_client()
    headers = {"Host": "127.0.0.1:8050"}
    state = client.get("/api/state", headers=headers).get_json()
    assert [d["slot"] for d in state["devices"]] == [0, 1] and state["devices"][0]["round"] == 4
    page = client.get("/", headers=headers)
    assert page.status_code == 200 and b'id="devices"' in page.data and b"/vendor/plotly.min.js" in page.data
    assert "script-src" not in page.headers["Content-Security-Policy"]  # default-src 'self': no inline script
    js = client.get("/vendor/plotly.min.js", headers=headers)
    assert js.status_code == 200 and b"plotly.js" in js.data[:400]
    js.close()
    for method in (client.post, client.put, client.delete):
        assert method("/api/state", headers=headers).status_code == 405
    for path in ("/api/state", "/", "/vendor/plotly.min.js", "/static/dashboard.js"):
        assert client.get(path, headers={"Host": "attacker.example:8050"}).status_code == 400, path
    assert client.get("/api/state", headers={"Host": "localhost:8050"}).status_code == 200


def test_dashboard_serves_over_http_on_a_free_port(tmp_path):
    import urllib.request
    view = JobView([{"slot": 0, "host": "127.0.0.1", "context": "cpu", "slowdown": 1.0}], str(tmp_path), "sync")
    board = Dashboard(view, "127.0.0.1", 0).start()
    try:
        assert board.port > 0
        with urllib.request.urlopen(board.url + "api/state", timeout=10) as response:
            state = json.load(response)
        assert state["job"]["mode"] == "sync" and len(state["devices"]) == 1
    finally:
        board.stop()


def test_worker_observer_feeds_live_and_tensorboard(tmp_path):
    clock = FakeClock()
    obs = WorkerObserver("esync", 0, live_dir=str(tmp_path / "live"), tensorboard_dir=str(tmp_path / "tb"),
                         chief=True, clock=clock)
    reads = []

    def loss():
        reads.append(1)
        return 0.25
    for r in range(1, 6):
        clock.t += 0.6
        obs.step(fake_stats(0, 0, r), loss)
        obs.step(fake_stats(0, 0, r), loss)   # nothing due: the loss is not read again
    assert len(reads) == 5
    obs.loss_point(2.0, 0.9, 3)
    obs.set_phase("evaluating", fake_stats(0, 0, 5), elapsed_s=3.0)
    obs.evaluated(2.0, 0.7, fake_stats(0, 0, 5))
    obs.finished({"final_accuracy": 0.75, "train_time_s": 3.0})
    obs.close(fake_stats(0, 0, 5))
    record = live.read_feed(str(tmp_path / "live"), 0)
    assert record["phase"] == "done" and record["accuracy"] == [[2.0, 0.7]] and record["elapsed_s"] == 3.0
    device = tensorboard.read_scalars(str(tmp_path / "tb" / "device-0"))
    assert [s for s, _, _ in device["device/local_iters"]] == [1, 2, 3, 4, 5]
    assert {"device/compute_ratio", "device/loss", "device/bytes_pushed", "device/bytes_pulled",
            "device/samples_per_s", "device/rtt_s"} <= set(device)
    job = tensorboard.read_scalars(str(tmp_path / "tb" / "job"))
    assert job["job/accuracy"][0][:2] == (2000, pytest.approx(0.7))
    assert job["job/final_accuracy"][0][1] == pytest.approx(0.75)
    assert job["job/train_loss"][0][1] == pytest.approx(0.9)


def test_observer_with_nothing_to_feed_reads_nothing():
    obs = WorkerObserver("sync", 0)
    obs.step(fake_stats(0, 0, 1), lambda: pytest.fail("the loss must not be read"))
    obs.close(fake_stats(0, 0, 1))


def test_write_summary_round_trips(tmp_path):
    summary = {"workers": [{"slot": 0, "rounds": 3, "local_iters": [4, 5, 6], "round_end_s": [1.0, 2.0, 3.0],
                            "compute_ratio": 0.8, "bytes_pushed": 10, "bytes_pulled": 20, "rtt_s": 0.001,
                            "state_replies": 12},
                           {"slot": 1, "rounds": 3, "local_iters": [1, 1, 1], "compute_ratio": None,
                            "bytes_pushed": 10, "bytes_pulled": 20, "rtt_s": 0.0, "state_replies": 0}],
               "curve": [[0.0, 0.1], [2.5, 0.6]], "train_loss": [[2.5, 0.8]], "final_accuracy": 0.65,
               "train_time_s": 3.0}
    runs = tensorboard.write_summary(str(tmp_path), summary, start_unix=1000.0)
    assert sorted(os.path.basename(r) for r in runs) == ["device-0", "device-1", "job"]
    d0 = tensorboard.read_scalars(str(tmp_path / "device-0"))
    assert [(s, v) for s, v, _ in d0["device/local_iters"]] == [(1, 4.0), (2, 5.0), (3, 6.0)]
    assert d0["device/local_iters"][2][2] == pytest.approx(1003.0)
    d1 = tensorboard.read_scalars(str(tmp_path / "device-1"))
    assert "device/compute_ratio" not in d1 and "device/rtt_s" not in d1
    job = tensorboard.read_scalars(str(tmp_path / "job"))
    assert [(s, round(v, 3)) for s, v, _ in job["job/accuracy"]] == [(0, 0.1), (2500, 0.6)]
    assert job["job/final_accuracy"][0][:2] == (3000, pytest.approx(0.65))


# ---------------------------------------------------------------- the launcher's --dashboard


def test_launcher_refuses_a_bad_dashboard_address(capsys):
    from mxhet import launcher
    for bad in ("localhost:8050", "127.0.0.1:99999"):
        assert launcher.main(["-n", "2", "--sync", "sync", "--dashboard", bad, "--", "python", "x.py"]) == 2
        assert "--dashboard" in capsys.readouterr().err


def test_dashboard_gives_every_worker_the_live_dir_and_nothing_else(tmp_path):
    from mxhet import launcher
    from mxhet.observe import launch as live_view
    args = launcher.parse_args(["-n", "2", "-s", "1", "--sync", "esync", "--slowdown", "1,3", "--dashboard", "0",
                                "--", "python", "x.py"])
    assert args.dashboard_address == ("127.0.0.1", 0)
    live_dir = live_view.make_live_dir(args)
    try:
        ports = iter(range(9000, 9010))
        plan = launcher.build_plan(args, free_port=lambda host: next(ports), cpu_count=2, environ={}, cwd="/job")
        for spec in plan.processes:
            assert spec.env.get("MXHET_LIVE_DIR") == (live_dir if spec.role == "worker" else None)
        assert live_view.devices_of(plan) == [{"slot": 0, "host": "127.0.0.1", "context": "cpu", "slowdown": 1.0},
                                              {"slot": 1, "host": "127.0.0.1", "context": "cpu", "slowdown": 3.0}]
    finally:
        live_view.stop(args, None)
    assert not os.path.exists(live_dir)
    plain = launcher.parse_args(["-n", "2", "--sync", "sync", "--", "python", "x.py"])
    assert live_view.make_live_dir(plain) == "" and plain.dashboard_address is None


# ---------------------------------------------------------------- the simulator's --tensorboard


def test_simulator_writes_the_same_tags_in_virtual_time(tmp_path):
    from mxhet.sim import cli
    argv = ["-n", "2", "--sync", "esync", "--slowdown", "1,3", "--base-iter", "0.05", "--time-budget", "2",
            "--model", "smallcnn", "--eval-samples", "100", "--final-eval-samples", "300", "--eval-interval", "1",
            "--metrics-out", str(tmp_path / "m"), "--tensorboard", str(tmp_path / "tb"), "--no-progress"]
    args = cli.build_parser().parse_args(argv)
    args.argv = argv
    summary = cli.run(args)
    for w in summary["workers"]:
        n_i = tensorboard.read_scalars(str(tmp_path / "tb" / ("device-%d" % w["slot"])))["device/local_iters"]
        assert [int(v) for _, v, _ in n_i] == w["local_iters"] and len(n_i) == w["rounds"]
        assert [wall for _, _, wall in n_i] == pytest.approx(w["round_end_s"])   # virtual seconds
    job = tensorboard.read_scalars(str(tmp_path / "tb" / "job"))
    assert [round(v, 4) for _, v, _ in job["job/accuracy"]] == [acc for _, acc in summary["curve"]]
    assert job["job/final_accuracy"][0][1] == pytest.approx(summary["final_accuracy"], abs=1e-6)
