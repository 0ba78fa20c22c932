"""``--round-deadline`` in the simulator (virtual time): the fast devices aggregate many times per
slow iteration, the late delta enters one round once with its share, every device ends on one model."""
import collections

import pytest

from mxhet.errors import ConfigError
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)

# The paper's 117x profile on 3 devices (two fast, one 117x slower), pinned times, a short budget:
# the slow device finishes its test batch and two or three iterations.
# No accuracy is asserted: the only snapshots are the first and the final model's (they take no
# virtual time, so the pushes and models are those of any snapshot grid), scored on few batches.
ARGV = ("-n", "3", "--eval-samples", "100", "--final-eval-samples", "100", "--sync", "esync", "--no-progress",
        "--eval-interval", "100")
# ResNet-18 costs about 0.1 s of CPU a real iteration at 32 px: a milder profile (8x) keeps it to a few
# dozen iterations, and 16 px inputs to a quarter of that compute (the times are virtual, pinned by
# --base-iter; what is model-dependent is its parameters, the same 45 MB of pushes at any input size,
# which take longer than the small CNN's, so its base time is longer).
# Batches of 16: what is asserted (who pushes in which round, with what share) is fixed by the virtual
# times, not by what a batch holds (the same pushes, rounds and local steps as with 64 samples, for
# 0.6 of the CPU on the small CNN and 0.75 on ResNet-18).
PROFILES = {"smallcnn": ("--slowdown", "1,1,117", "--base-iter", "0.01", "--time-budget", "3.6",
                         "--batch-size", "16"),
            "resnet18_v1": ("--slowdown", "1,1,8", "--base-iter", "0.1", "--time-budget", "2.5",
                            "--input-size", "16", "--bn-batches", "1", "--batch-size", "16")}


def _sim(tmp_path, name, model, *argv):
    args = cli.build_parser().parse_args([*ARGV, *PROFILES[model], "--model", model, *argv,
                                          "--metrics-out", str(tmp_path / name)])
    args.argv = list(argv)
    return cli.run(args)


@pytest.fixture(scope="module")
def deadline_run(tmp_path_factory):
    """``deadline_run(model)``: the run with ``--round-deadline 4`` alone, made once per model for the tests
    that read it (a run is deterministic: the same command line gives the same summary)."""
    runs = {}

    def get(model):
        if model not in runs:
            runs[model] = _sim(tmp_path_factory.mktemp(model), "deadline", model, "--round-deadline", "4")
        return runs[model]
    return get


@pytest.mark.parametrize("model", ["smallcnn", "resnet18_v1"])
def test_fast_devices_aggregate_many_times_per_slow_iteration_and_the_late_delta_enters_once(tmp_path, model,
                                                                                             deadline_run):
    out = deadline_run(model)
    workers = {w["slot"]: w for w in out["workers"]}
    slow, fast = workers[2], workers[0]
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1   # one model at the end
    pushes = out["sim"]["deadline_pushes"]
    late = [(r, share) for slot, r, share in pushes if slot == 2]
    # each of the slow device's aggregated iterations entered exactly one round, once (one in
    # progress when the job stopped is dropped, as Algorithm 1 drops every device's at the end)
    assert len(late) == len(slow["local_iters"]) >= 2 and slow["iterations"] - len(late) in (0, 1)
    assert len({r for r, _ in late}) == len(late)
    by_round = collections.defaultdict(list)
    for slot, r, share in pushes:
        by_round[r].append((slot, share))
    for r, members in by_round.items():
        assert len({s for s, _ in members}) == len(members)            # nobody pushed twice in a round
        assert sum(share for _, share in members) == pytest.approx(1.0)
    # a late delta that missed s rounds weighs 1/(1+s) of an on-time one: share < the fast ones'
    for r, share in late:
        fast_share = dict(by_round[r])[0]
        assert share < fast_share
    # between two of the slow device's iterations the fast devices aggregated many times
    assert fast["rounds"] >= 5 * len(late)
    # the paper's ESync on the same profile: one round per slow iteration
    paper = _sim(tmp_path, "paper", model)
    assert "deadline_pushes" not in paper["sim"]
    assert paper["workers"][0]["rounds"] <= slow["iterations"] + 1 < fast["rounds"]


def test_the_deadline_needs_blocking_queries_and_the_mean(tmp_path):
    with pytest.raises(ConfigError, match="round_deadline.*ack"):
        _sim(tmp_path, "a", "smallcnn", "--round-deadline", "4", "--ack", "delayed")
    with pytest.raises(ConfigError, match="round_deadline.*aggregation"):
        _sim(tmp_path, "b", "smallcnn", "--round-deadline", "4", "--aggregation", "weighted")


def test_a_round_length_gives_the_fast_devices_l_local_steps_a_round(tmp_path):
    """``--round-length 4`` at 10x: a round lasts about 4 fast iterations (the paper's profile's 117x would
    need a longer budget for the late device to push), the late device's deltas still enter with shares."""
    ten_x = ("--slowdown", "1,1,10", "--time-budget", "1.2")   # (the last of a repeated flag wins)
    long_ = _sim(tmp_path, "length", "smallcnn", *ten_x, "--round-deadline", "4", "--round-length", "4")
    short = _sim(tmp_path, "deadline", "smallcnn", *ten_x, "--round-deadline", "4")
    workers = {w["slot"]: w for w in long_["workers"]}
    for slot in (0, 1):
        steps = workers[slot]["local_iters"]
        assert steps and sum(steps) / len(steps) == pytest.approx(4, abs=0.5)
        assert sorted(steps)[len(steps) // 2] == 4
    pushes = long_["sim"]["deadline_pushes"]
    late = [(r, share) for slot, r, share in pushes if slot == 2]
    assert len(late) >= 5 and len({r for r, _ in late}) == len(late)
    by_round = collections.defaultdict(dict)
    for slot, r, share in pushes:
        by_round[r][slot] = share
    for r, share in late:
        assert share < by_round[r][0]
    for members in by_round.values():
        assert sum(members.values()) == pytest.approx(1.0)
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    # the deadline alone: one fast iteration a round (round 0 waits until the slow test batch is past the
    # bound), several times the rounds
    fast = [w for w in short["workers"] if w["slot"] < 2]
    assert len(fast) == 2
    for w in fast:
        assert sorted(w["local_iters"])[len(w["local_iters"]) // 2] == 1
    assert short["workers"][0]["rounds"] >= 3 * workers[0]["rounds"]


def test_a_round_length_needs_the_deadline(tmp_path):
    with pytest.raises(ConfigError, match="--round-length.*--round-deadline"):
        _sim(tmp_path, "a", "smallcnn", "--round-length", "4")


@pytest.mark.parametrize("model", ["smallcnn", "resnet18_v1"])
def test_the_late_memory_adds_each_late_delta_to_the_rounds_its_device_misses(tmp_path, model, deadline_run):
    """``--late-memory``: each late delta is pushed to the slow device's memory keys; the keeper (slot 0,
    the lowest rank on time) pulls each one once, before the first round without the slow device, and the
    job ends on another model than without the memory (the same rounds and pushes: only the arithmetic and
    the memory's transfers differ)."""
    out = _sim(tmp_path, "memory", model, "--round-deadline", "4", "--late-memory")
    log = out["sim"]["memory_log"]
    pushes = [(slot, r) for slot, r, op, _, _ in log if op == "push"]
    pulls = [(slot, r, rank, version) for slot, r, op, rank, version in log if op == "pull"]
    late = [r for slot, r, _ in out["sim"]["deadline_pushes"] if slot == 2]
    assert pushes == [(2, r) for r in late] and late
    rounds = {r for _, r, _ in out["sim"]["deadline_pushes"]}
    absent = [r for r in sorted(rounds) if r > late[0] and r not in late]
    needed = sorted({max(t for t in late if t < r) for r in absent})
    assert needed
    # slot 0 pulled each late delta once, in the first round that missed it; slot 1 never
    assert [(rank, version) for _, _, rank, version in pulls] == [(2, v) for v in needed]
    assert all(slot == 0 for slot, _, _, _ in pulls)
    assert [r for _, r, _, _ in pulls] == [min(r for r in absent if r > v) for v in needed]
    workers = {w["slot"]: w for w in out["workers"]}
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert [workers[s]["late_memory"] for s in (0, 1, 2)] == [
        {"pushes": 0, "pulls": len(needed)}, {"pushes": 0, "pulls": 0}, {"pushes": len(late), "pulls": 0}]
    plain = deadline_run(model)
    assert "memory_log" not in plain["sim"] and "late_memory" not in plain["workers"][0]
    assert plain["workers"][0]["final_model_sha256"] != workers[0]["final_model_sha256"]


def test_the_late_memory_needs_the_deadline(tmp_path):
    with pytest.raises(ConfigError, match="late_memory.*round_deadline"):
        _sim(tmp_path, "a", "smallcnn", "--late-memory")
