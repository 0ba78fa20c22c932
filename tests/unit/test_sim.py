"""The virtual-time engine: every mode runs on the real policies, deterministically.

In-process jobs on the small CNN, a few virtual seconds each; iteration times
come from the profile, so every assertion about who waits for whom is exact.
"""
import json

import pytest

from mxhet.errors import ConfigError
from mxhet.modes import mode_names
from mxhet.policy import get_spec
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)

FAST = ("--model", "smallcnn", "--eval-samples", "100", "--final-eval-samples", "300", "--eval-interval", "1")


def _sim(tmp_path, name, *argv):
    out = tmp_path / name
    args = cli.build_parser().parse_args([*argv, *FAST, "--metrics-out", str(out)])
    args.argv = list(argv)
    summary = cli.run(args)
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    return summary, {w["slot"]: w for w in summary["workers"]}


@pytest.mark.parametrize("mode", mode_names())
def test_every_mode_runs_in_virtual_time(tmp_path, mode):
    n = 3 if get_spec(mode).distributed else 1
    slowdown = "1,1,4" if n == 3 else "1"
    summary, workers = _sim(tmp_path, mode, "-n", str(n), "--sync", mode, "--slowdown", slowdown,
                            "--base-iter", "0.05", "--time-budget", "3", "--adsp-period", "1", "--adsp-window", "1",
                            "--step-size", "0.0005")     # gcada, cada: AMSGrad's α=0.01 does not learn in 3 s
    assert summary["engine"] == "sim" and summary["mode"] == mode and summary["time_unit"] == "virtual seconds"
    assert 3.0 <= summary["train_time_s"] < 6.0
    assert summary["sim"]["virtual_s_per_wall_s"] > 0
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    # Learning, not just a number in [0, 1]: iteration times are pinned and the seed fixed, so every mode
    # reaches at least 0.47 on these 300 test images (chance: 0.1); 0.4 leaves room for the platform's rounding.
    assert summary["curve"][0][0] == 0.0 and summary["final_accuracy"] >= 0.4
    iters = [workers[s]["iterations"] for s in sorted(workers)]
    assert all(w["rounds"] > 0 and w["samples"] == 64 * w["iterations"] for w in workers.values())
    if mode in ("sync", "localsgd"):
        assert iters[0] == iters[2]                      # lockstep
    elif mode == "ssp":
        assert iters[0] - iters[2] <= 2 + 1              # staleness 2 (+1 for the final step)
    elif mode == "esync":
        assert set(workers[2]["local_iters"]) == {1}     # the slowest does one iteration per round
        assert min(workers[0]["local_iters"][1:]) >= 3   # the others fill its 4 x 0.05 s
    elif mode == "gcada":                                # one group of three: the 4x slower device is never first
        assert workers[2]["uploads"] == 0 and workers[0]["uploads"] + workers[1]["uploads"] > 0
    elif mode == "cada":                                 # groups of one: every selected device uploads
        assert all(w["uploads"] == w["downloads"] > 0 for w in workers.values())
    elif n == 3:
        assert iters[0] > 3 * iters[2] - 3               # nobody waits: 4x faster, exactly


def test_a_rerun_is_bit_identical(tmp_path):
    argv = ("-n", "3", "--sync", "esync", "--ack", "delayed", "--slowdown", "1,2,5", "--net-delay-ms", "5",
            "--jitter", "0.2", "--base-iter", "0.05", "--time-budget", "2", "--seed", "4")
    first, _ = _sim(tmp_path, "a", *argv)
    second, _ = _sim(tmp_path, "b", *argv)
    for summary in (first, second):
        summary.pop("sim")
        summary["evaluation"].pop("seconds")
    assert first == second
    third, _ = _sim(tmp_path, "c", *argv[:-1], "5")
    assert third["workers"][0]["final_model_sha256"] != first["workers"][0]["final_model_sha256"]


def test_delayed_acks_abort_and_never_wait(tmp_path):
    _, workers = _sim(tmp_path, "delayed", "-n", "3", "--sync", "esync", "--ack", "delayed", "--slowdown", "1,1,10",
                      "--net-delay-ms", "100", "--base-iter", "0.05", "--max-rounds", "3", "--time-budget", "60")
    for w in workers.values():
        assert w["rounds"] == 3 and w["query_wait_max_s"] == 0.0
    assert workers[2]["round_aborted"] == [1, 1, 1] and workers[2]["local_iters"] == [1, 1, 1]


def test_a_device_slowed_mid_run_becomes_the_slowest(tmp_path):
    _, workers = _sim(tmp_path, "dynamic", "-n", "3", "--sync", "esync", "--slowdown", "1,1,3",
                      "--slowdown-schedule", "0:3-=12", "--base-iter", "0.05", "--time-budget", "8")
    changing = workers[0]
    after = [i for i, t in enumerate(changing["round_end_s"]) if t >= 3.0][2:]
    before = [k for k, t in zip(changing["local_iters"], changing["round_end_s"]) if t < 3.0]
    assert after and max(before) >= 2
    assert all(changing["local_iters"][i] == 1 and changing["round_slowest"][i] == 0 for i in after)


def test_a_slower_device_costs_fewer_real_iterations(tmp_path):
    # iterations and local steps follow the virtual times: batches of 16 count as 64 would, for less CPU
    common = ("-n", "3", "--sync", "esync", "--base-iter", "0.05", "--time-budget", "4", "--batch-size", "16")
    _, ten = _sim(tmp_path, "ten", *common, "--slowdown", "1,1,10")
    _, slow = _sim(tmp_path, "slow", *common, "--slowdown", "1,1,117")
    assert slow[2]["iterations"] <= ten[2]["iterations"]
    assert slow[2]["iterations"] == slow[2]["rounds"] and slow[0]["local_iters"][0] > ten[0]["local_iters"][0]


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_equal_stragglers_end_the_first_round_together_after_their_test_batch(tmp_path, ack):
    """Algorithm 1 line 3: every device reports a test batch's time with k = 0
    before its first local iteration, so of two equally slow devices neither
    counts as infinitely slow when the other asks: both do one iteration in
    round 0 and none idles (before, the first to report ran a second one while
    the other waited a whole slow iteration: local_iters [2, 1])."""
    base, slow = 0.05, 20
    _, workers = _sim(tmp_path, ack, "-n", "4", "--sync", "esync", "--ack", ack,
                      "--slowdown", "%d,%d,1,1" % (slow, slow), "--base-iter", str(base), "--max-rounds", "2",
                      "--time-budget", "60")
    for slot in (0, 1):
        w = workers[slot]
        assert w["local_iters"] == [1, 1], (slot, w["local_iters"])
        assert w["round_blocked_s"][0] < base           # messages only: no slow iteration's worth of idling
        assert w["test_batch_s"] == pytest.approx(slow * base)
    for w in workers.values():
        # round 0: the test batch, then one slow iteration (and the messages)
        assert 2 * slow * base < w["round_end_s"][0] < 2 * slow * base + base
        assert w["iterations"] == sum(w["local_iters"]) and w["samples"] == 64 * w["iterations"]
        applied = w["test_batch_s"] + w["iterations"] * w["slowdown"] * base   # the test batch's time is compute
        if ack == "blocking":
            assert w["compute_s"] == pytest.approx(applied)
        else:   # plus the parts of aborted iterations
            assert applied - 1e-9 <= w["compute_s"] <= applied + w["aborted"] * w["slowdown"] * base
        assert w["round_queries"][0] == w["local_iters"][0] + 1   # the test batch's k = 0 query, then one per iteration
    assert min(workers[2]["local_iters"][0], workers[3]["local_iters"][0]) > slow   # the fast devices fill both


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_a_local_step_cap_bounds_the_fast_devices_rounds(tmp_path, ack):
    common = ("-n", "3", "--sync", "esync", "--ack", ack, "--slowdown", "1,1,10", "--base-iter", "0.05",
              "--max-rounds", "4", "--time-budget", "60")
    _, free = _sim(tmp_path, "free", *common)
    _, capped = _sim(tmp_path, "capped", *common, "--max-local-steps", "3")
    assert min(free[0]["local_iters"][1:]) > 3          # without the cap they fill the slowest's 10 x 0.05 s
    for slot in (0, 1):
        assert capped[slot]["local_iters"] == [3, 3, 3, 3] and capped[slot]["round_slowest"] == [-1] * 4
        assert capped[slot]["sync_s"] > free[slot]["sync_s"]   # the idle time the cap costs: they wait
    assert capped[2]["local_iters"] == [1, 1, 1, 1]
    assert capped[2]["round_end_s"] == pytest.approx(free[2]["round_end_s"], rel=0.05)   # rounds as long as before
    assert len({w["final_model_sha256"] for w in capped.values()}) == 1


def test_a_local_step_cap_on_a_zoo_model(tmp_path):
    """The cap on the paper's ResNet-18 (GroupNorm, as recommended with it), not only the small CNN."""
    argv = ["-n", "3", "--sync", "esync", "--slowdown", "1,1,6", "--base-iter", "0.05", "--max-rounds", "2",
            "--time-budget", "60", "--max-local-steps", "2", "--model", "resnet18_v1", "--norm", "group",
            "--input-size", "16", "--batch-size", "16", "--eval-samples", "50", "--final-eval-samples", "100",
            "--eval-interval", "10"]
    args = cli.build_parser().parse_args(argv + ["--metrics-out", str(tmp_path / "zoo")])
    args.argv = argv
    workers = {w["slot"]: w for w in cli.run(args)["workers"]}
    assert workers[0]["local_iters"] == workers[1]["local_iters"] == [2, 2]   # uncapped: 6 and 5
    assert workers[2]["local_iters"] == [1, 1]
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1


@pytest.mark.parametrize("argv, message", [
    (("-n", "2", "--sync", "local", "--base-iter", "0.1"), "standalone"),
    (("-n", "2", "--sync", "esync", "--base-iter", "0"), "--base-iter"),
    (("-n", "2", "--sync", "esync", "--base-iter", "0.1", "--slowdown", "1,2,3"), "one per device"),
    (("-n", "2", "--sync", "esync", "--base-iter", "0.1", "--slowdown-schedule", "5:1-=2"), "slot"),
    (("-n", "2", "--sync", "esync", "--base-iter", "0.1", "--eval-min-iterations", "-1"), "eval-min-iterations"),
    (("-n", "2", "--sync", "esync", "--base-iter", "0.1", "--max-local-steps", "-2"), "max-local-steps"),
    (("-n", "2", "--sync", "esync", "--base-iter", "0.1", "--worker-contexts", "cpu,cpu"), "worker-contexts"),
])
def test_bad_command_lines_are_refused(tmp_path, argv, message):
    args = cli.build_parser().parse_args([*argv, "--metrics-out", str(tmp_path)])
    with pytest.raises(ConfigError, match=message):
        cli.make_job(args)


def test_stop_at_target_ends_the_run_at_the_first_snapshot_that_reaches_it(tmp_path):
    summary, workers = _sim(tmp_path, "target", "-n", "2", "--sync", "esync", "--slowdown", "1,3", "--base-iter",
                            "0.05", "--time-budget", "300", "--stop-at-target", "--target-accuracy", "0.6",
                            "--lr", "0.1")
    reached = summary["sim"]["stopped_at_target_s"]
    assert reached is not None and summary["train_time_s"] < 300
    assert all(w["train_time_s"] < reached + 2 for w in workers.values())   # stopped within a round of it


def test_snapshots_follow_the_growing_schedule_and_in_run_scores_are_kept(tmp_path):
    summary, _ = _sim(tmp_path, "growth", "-n", "2", "--sync", "sync", "--slowdown", "1,2", "--base-iter", "0.05",
                      "--time-budget", "6", "--eval-growth", "0.5", "--stop-at-target", "--target-accuracy", "0.99")
    times = [t for t, _ in summary["curve"]]
    for a, b in zip(times[:-2], times[1:-1]):
        assert b - a == pytest.approx(max(1.0, 0.5 * a), abs=1e-6)
    assert summary["sim"]["stopped_at_target_s"] is None and summary["train_time_s"] >= 6.0


def test_a_snapshot_waits_for_the_minimum_iterations_since_the_last_one(tmp_path):
    """Sync on 2 devices, the slower at 4x: a round (2 iterations) takes 0.2 s and the grid is 1 s (10
    iterations); with --eval-min-iterations 25 a snapshot needs 13 rounds, so points are >= 2.6 s apart."""
    argv = ("-n", "2", "--sync", "sync", "--slowdown", "1,4", "--base-iter", "0.05", "--time-budget", "9")
    dense, _ = _sim(tmp_path, "dense", *argv)
    sparse, workers = _sim(tmp_path, "sparse", *argv, "--eval-min-iterations", "25")
    times = [t for t, _ in sparse["curve"]][:-1]   # the last point is the final model's
    assert len([t for t, _ in dense["curve"]][:-1]) >= 9
    assert len(times) >= 3 and all(b - a >= 2.6 - 1e-6 for a, b in zip(times, times[1:]))
    assert sum(w["iterations"] for w in workers.values()) >= 25 * (len(times) - 1)


@pytest.mark.parametrize("mode", ["esync", "sync", "async"])
def test_the_compute_cap_stops_every_device_soon_after_the_cap(tmp_path, mode):
    summary, workers = _sim(tmp_path, mode, "-n", "3", "--sync", mode, "--slowdown", "1,1,4", "--base-iter", "0.05",
                            "--time-budget", "300", "--max-iterations", "60")
    capped = summary["sim"]["stopped_at_cap_s"]
    total = sum(w["iterations"] for w in workers.values())
    assert capped is not None and summary["train_time_s"] < 300
    assert 60 <= total < 60 + 3 * 10   # every device stops at its next chance (a sync round, an ESync round)
    assert summary["sim"]["max_iterations"] == 60


def test_group_norm_runs_in_the_simulator_and_is_recorded(tmp_path):
    """--norm group reaches the devices' replicas and the evaluation copy (stop at the target builds one)."""
    argv = ["-n", "2", "--sync", "esync", "--slowdown", "1,2", "--base-iter", "0.1", "--time-budget", "0.6",
            "--stop-at-target", "--model", "resnet18_v1", "--norm", "group", "--input-size", "16",
            "--bn-batches", "2", "--eval-samples", "50", "--final-eval-samples", "100", "--eval-interval", "0.3"]
    args = cli.build_parser().parse_args(argv + ["--metrics-out", str(tmp_path / "gn")])
    args.argv = argv
    summary = cli.run(args)
    workers = summary["workers"]
    assert summary["model"] == "resnet18_v1" and summary["norm"] == "group"
    assert summary["sim"]["command"][-len(argv):] == argv
    assert len({w["final_model_sha256"] for w in workers}) == 1 and workers[0]["iterations"] >= 2
    args = cli.build_parser().parse_args(["-n", "2", "--sync", "esync", "--base-iter", "0.1", "--norm", "group",
                                          "--metrics-out", str(tmp_path / "x")])
    with pytest.raises(ConfigError, match="smallcnn has no BatchNorm"):
        cli.run(args)


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_a_slow_link_does_not_make_the_slowest_device_wait_for_the_fast_ones(tmp_path, ack):
    """A 21 ms one-way link (1 ms + --net-delay-ms 20) on every device, messages'
    cost otherwise nil: the State Server predicts the slowest device's next query
    at its arrival, so no fast device starts an iteration the slowest then waits
    for. The slowest is blocked per round only by messages (blocking: its query's
    and the exchange's round trips, 4 one-way trips; delayed: the exchange's 2,
    its query's being spent on an iteration it abandons) and a round lasts one
    slow iteration plus 4 trips. Before, a blocking fast device ran a 5th
    iteration whose query came 18 ms after the slowest's."""
    one_way, slow_iter, fast_iter = 0.021, 0.3, 0.03
    _, workers = _sim(tmp_path, ack, "-n", "3", "--sync", "esync", "--ack", ack, "--slowdown", "1,1,10",
                      "--base-iter", str(fast_iter), "--net-delay-ms", "20", "--per-key-ms", "0",
                      "--bandwidth-gbps", "1e6", "--max-rounds", "4", "--time-budget", "60")
    slow = workers[2]
    messages = (4 if ack == "blocking" else 2) * one_way
    assert slow["round_blocked_s"][1:] == pytest.approx([messages] * 3, abs=1e-4)
    ends = slow["round_end_s"]
    assert [b - a for a, b in zip(ends[1:], ends[2:])] == pytest.approx([slow_iter + 4 * one_way] * 2, abs=1e-4)
    if ack == "blocking":
        # A fast query every 30 ms + 42 ms from 51 ms after the pull; the slowest's comes at 321 ms:
        # the 4th (at 267 ms) is the last whose next iteration's query (339 ms) would be later.
        assert workers[0]["local_iters"][1:] == workers[1]["local_iters"][1:] == [4, 4, 4]
