"""A simulator run killed part-way and resumed from its checkpoint ends as an uninterrupted run.

Every run here is the small CNN for a few virtual seconds unless it says otherwise, on batches
of 16 (what a checkpoint keeps does not depend on what a batch holds); a run is stopped by the
test hook --checkpoint-stop-at (save at the first point after that virtual time, then stop, as
a SIGTERM does) or killed for real (SIGKILL after a periodic save), then run again with --resume.
"""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mxhet.errors import ConfigError
from mxhet.sim import checkpoint, cli

pytestmark = pytest.mark.timeout(600)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ("--model", "smallcnn", "--batch-size", "16", "--eval-samples", "100", "--final-eval-samples", "200",
         "--eval-interval", "1", "--base-iter", "0.05", "--no-progress")
TIMING = ("wall_s", "cpu_s", "virtual_s_per_wall_s", "checkpoint")


def _job(mode, *extra, budget="4"):
    n = "1" if mode == "local" else "3"
    return ["-n", n, "--sync", mode, "--slowdown", "1" if n == "1" else "1,1,4", "--time-budget", budget,
            *SMALL, *extra]


def _run(out, argv):
    args = cli.build_parser().parse_args(list(argv) + ["--metrics-out", str(out)])
    args.argv = list(argv)
    return cli.run(args)


def _stopped(out, argv, at):
    with pytest.raises(checkpoint.Stopped) as stop:
        _run(out, list(argv) + ["--checkpoint-every-min", "10", "--checkpoint-stop-at", str(at)])
    assert os.path.exists(os.path.join(str(out), "checkpoint", checkpoint.FILE))
    return stop.value


def _comparable(summary):
    """A summary without the wall-clock figures (the only ones a resumed run may change)."""
    s = json.loads(json.dumps(summary))
    for key in TIMING:
        s["sim"].pop(key, None)
    s.pop("wall_s", None)
    s["evaluation"].pop("seconds", None)
    return s


def _digests(summary):
    return {w["slot"]: w["final_model_sha256"] for w in summary["workers"]}


def _check_resumed(tmp_path, argv, at, stopped=None):
    """``stopped(path)``: called with the checkpoint file of the stopped run before it is resumed."""
    whole = _run(tmp_path / "whole", list(argv) + ["--checkpoint-every-min", "10"])
    stop = _stopped(tmp_path / "cut", argv, at)
    assert at <= stop.virtual_s < float(argv[argv.index("--time-budget") + 1])
    if stopped is not None:
        stopped(tmp_path / "cut" / "checkpoint" / checkpoint.FILE)
    resumed = _run(tmp_path / "cut", list(argv) + ["--checkpoint-every-min", "10", "--resume"])
    assert resumed["sim"]["checkpoint"]["resumed_at_s"] == [stop.virtual_s]
    here = checkpoint.code_commit()
    assert resumed["sim"]["checkpoint"]["segments"] == [{"from_s": 0.0, "commit": here},
                                                        {"from_s": stop.virtual_s, "commit": here}]
    assert _digests(resumed) == _digests(whole) and len(set(_digests(whole).values())) == 1
    assert resumed["curve"] == whole["curve"] and len(whole["curve"]) >= 3
    assert _comparable(resumed) == _comparable(whole)
    for slot in _digests(whole):   # the worker files too
        name = "worker-%d.json" % slot
        assert json.loads((tmp_path / "cut" / name).read_text()) == json.loads((tmp_path / "whole" / name).read_text())
    # the command recorded is the uninterrupted run's; a finished run keeps no checkpoint
    assert resumed["sim"]["command"] == whole["sim"]["command"] and "--resume" not in resumed["sim"]["command"]
    assert not os.path.exists(str(tmp_path / "cut" / "checkpoint" / checkpoint.FILE))
    return whole, resumed


@pytest.mark.parametrize("mode, extra", [
    ("esync", ()), ("esync", ("--ack", "delayed")), ("sync", ()), ("local", ()), ("async", ()), ("dcasgd", ("--momentum", "0.9")),
    ("adsp", ("--adsp-period", "0.5", "--adsp-epoch", "1.5")), ("localsgd", ()), ("ssp", ()),
])
def test_a_resumed_run_ends_with_the_uninterrupted_runs_model_curve_and_files(tmp_path, mode, extra):
    _check_resumed(tmp_path, _job(mode, "--stop-at-target", "--target-accuracy", "0.99", *extra), 1.5)


# With slot 2 4x slower and D = 2 it is late: stopped at 0.42 virtual s, its delta waits (a deferred
# READY) for the next round to close; at 1.5 nothing is pending.
@pytest.mark.parametrize("at, pending", [(0.42, True), (1.5, False)])
def test_a_round_deadline_run_resumes_with_its_rounds_and_pushes(tmp_path, at, pending):
    """``--round-deadline``: the replay rebuilds the State Server's round book (late deltas due,
    deferred READYs, rounds closed) and the log of pushes; the late delta is pushed after the resume."""
    argv = _job("esync", "--round-deadline", "2", "--stop-at-target", "--target-accuracy", "0.99")
    books = []

    def stopped(path):
        books.append(pickle.loads(path.read_bytes())["record"]["deadline"])

    whole, resumed = _check_resumed(tmp_path, argv, at, stopped)
    [book] = books
    assert (book["due"], book["deferred"]) == (({"2": book["closed"] + 1}, [2]) if pending else ({}, []))
    assert resumed["sim"]["deadline_pushes"] == whole["sim"]["deadline_pushes"]
    pushes = whole["sim"]["deadline_pushes"]
    late = [r for slot, r, _ in pushes if slot == 2]
    assert len(late) >= 3 and len({r for _, r, _ in pushes}) > 3 * len(late)   # fast rounds between late pushes
    assert len([r for r in late if r > book["closed"]]) >= 2                     # pushed after the resume


def test_sync_over_the_fast_devices_only_resumes_too(tmp_path):
    """The bench's sync-fast variant: Sync over the two fast devices, the straggler left out."""
    argv = ["-n", "2", "--sync", "sync", "--slowdown", "1", "--time-budget", "2", *SMALL]
    _check_resumed(tmp_path, argv, 1.0)


def test_resnet18_resumes_with_its_batchnorm_statistics(tmp_path):
    """The paper's model: BatchNorm running statistics (parameters without gradients), MKL-DNN layouts.
    16 px inputs and two precise-BN batches per score: what a checkpoint saves (every parameter and
    statistic, 45 MB a copy) is the same at any input size; a snapshot before the stop and two after."""
    argv = ["-n", "3", "--sync", "esync", "--slowdown", "1,1,4", "--time-budget", "1", "--model", "resnet18_v1",
            "--input-size", "16", "--batch-size", "16", "--eval-samples", "50", "--final-eval-samples", "100",
            "--eval-interval", "0.5", "--bn-batches", "2", "--base-iter", "0.05", "--no-progress"]
    _check_resumed(tmp_path, argv, 0.4)


def test_alexnet_draws_the_same_dropout_masks_after_a_resume(tmp_path):
    """AlexNet's Dropout draws from MXNet's random stream, which no checkpoint can save: each
    iteration reseeds it from (seed, slot, iteration)."""
    argv = ["-n", "2", "--sync", "sync", "--slowdown", "1,2", "--time-budget", "1", "--model", "alexnet",
            "--batch-size", "8", "--eval-samples", "50", "--final-eval-samples", "100", "--eval-interval", "0.5",
            "--base-iter", "0.05", "--no-progress"]
    _check_resumed(tmp_path, argv, 0.4)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An esync run stopped at its checkpoint at 1.5 virtual s (copy it before changing it)."""
    out = tmp_path_factory.mktemp("saved") / "run"
    _stopped(out, _job("esync"), 1.5)
    return out


def _copy(saved, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(str(saved), str(out))
    return out


def test_the_comparison_sees_a_checkpoint_that_restores_the_wrong_numbers(saved, tmp_path):
    """A control: the same resume with one replica's saved parameters nudged ends elsewhere."""
    argv = _job("esync")
    whole = _run(tmp_path / "whole", argv + ["--checkpoint-every-min", "10"])
    out = _copy(saved, tmp_path)
    path = out / "checkpoint" / checkpoint.FILE
    state = pickle.loads(path.read_bytes())
    state["devices"][1]["params"][0] += 1e-3
    path.write_bytes(pickle.dumps(state))
    resumed = _run(out, argv + ["--checkpoint-every-min", "10", "--resume"])
    assert _digests(resumed) != _digests(whole)


@pytest.mark.parametrize("change, message", [
    (("--seed", "1"), "belongs to another run: its seed is 0, this run's 1"),
    (("--lr", "0.05"), "belongs to another run: its argv"),
])
def test_a_checkpoint_of_another_run_is_refused(saved, tmp_path, change, message):
    out = _copy(saved, tmp_path)
    with pytest.raises(ConfigError, match=message):
        _run(out, _job("esync", *change) + ["--checkpoint-every-min", "10", "--resume"])
    args = _job("sync") + ["--checkpoint-every-min", "10", "--resume"]
    with pytest.raises(ConfigError, match="its mode is 'esync', this run's 'sync'"):
        _run(out, args)


def test_a_corrupt_checkpoint_is_refused_and_a_half_written_one_ignored(saved, tmp_path):
    out = _copy(saved, tmp_path)
    path = out / "checkpoint" / checkpoint.FILE
    path.with_name(checkpoint.FILE + ".tmp").write_bytes(b"a save killed half-way")   # never read
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ConfigError, match="cannot be read .*remove it to run from the start"):
        _run(out, _job("esync") + ["--checkpoint-every-min", "10", "--resume"])
    path.write_bytes(data)
    resumed = _run(out, _job("esync") + ["--checkpoint-every-min", "10", "--resume"])
    assert resumed["sim"]["checkpoint"]["resumed_at_s"]


def test_a_checkpoint_the_replay_does_not_reach_is_refused(saved, tmp_path):
    """What the code would do differently (another commit, other data) shows in the replay: refused."""
    out = _copy(saved, tmp_path)
    path = out / "checkpoint" / checkpoint.FILE
    state = pickle.loads(path.read_bytes())
    state["record"]["devices"][2]["stats"]["iterations"] += 1
    path.write_bytes(pickle.dumps(state))
    with pytest.raises(ConfigError, match=r"does not replay here .*devices\[2\]\.stats\.iterations"):
        _run(out, _job("esync") + ["--checkpoint-every-min", "10", "--resume"])


def test_each_sessions_commit_is_recorded_with_where_it_took_over(saved, tmp_path):
    """A run made in three sessions on three commits names each with the virtual second it started from;
    a checkpoint from before segments were kept gives its last writer's commit and None before."""
    out = _copy(saved, tmp_path)
    path = out / "checkpoint" / checkpoint.FILE
    state = pickle.loads(path.read_bytes())
    at = state["virtual_s"]
    state["header"]["commit"] = "a" * 40        # the second session ran other code and saved at ``at``
    state["resumed_at_s"] = [0.5]
    state["segments"] = [{"from_s": 0.0, "commit": "b" * 40}, {"from_s": 0.5, "commit": "a" * 40}]
    path.write_bytes(pickle.dumps(state))
    argv = _job("esync") + ["--checkpoint-every-min", "10", "--resume"]
    resumed = _run(out, argv)
    here = checkpoint.code_commit()
    assert resumed["sim"]["checkpoint"]["segments"] == [
        {"from_s": 0.0, "commit": "b" * 40}, {"from_s": 0.5, "commit": "a" * 40}, {"from_s": at, "commit": here}]
    assert resumed["sim"]["checkpoint"]["resumed_at_s"] == [0.5, at]
    older = _copy(saved, tmp_path / "older")
    path = older / "checkpoint" / checkpoint.FILE
    state = pickle.loads(path.read_bytes())
    state["header"]["commit"] = "a" * 40
    state["resumed_at_s"] = [0.5]
    del state["segments"]
    path.write_bytes(pickle.dumps(state))
    resumed = _run(older, argv)
    assert resumed["sim"]["checkpoint"]["segments"] == [
        {"from_s": 0.0, "commit": None}, {"from_s": 0.5, "commit": "a" * 40}, {"from_s": at, "commit": here}]


def test_a_run_without_resume_starts_afresh(saved, tmp_path):
    out = _copy(saved, tmp_path)
    fresh = _run(out, _job("esync") + ["--checkpoint-every-min", "10"])
    assert fresh["sim"]["checkpoint"]["resumed_at_s"] == []
    assert fresh["sim"]["checkpoint"]["segments"] == [{"from_s": 0.0, "commit": checkpoint.code_commit()}]


@pytest.mark.parametrize("argv, message", [
    (_job("nodelay") + ["--checkpoint-every-min", "5"], "mode nodelay cannot be checkpointed"),
    (_job("esync") + ["--resume"], "--resume continues from a checkpoint: give --checkpoint-every-min"),
    (_job("esync") + ["--checkpoint-every-min", "-1"], "--checkpoint-every-min must be >= 0"),
    (_job("esync") + ["--checkpoint-every-min", "5", "--score-members", "50"], "--score-members"),
    (_job("localsgd") + ["--checkpoint-every-min", "5", "--events", "2:leave@1"], "--events"),
])
def test_what_a_checkpoint_cannot_keep_is_refused(tmp_path, argv, message):
    args = cli.build_parser().parse_args(argv + ["--metrics-out", str(tmp_path)])
    with pytest.raises(ConfigError, match=message):
        cli.make_job(args)


def _sim_process(out, argv):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "mxhet.sim", *argv, "--metrics-out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


# Long enough in wall time that the kill comes well before the end: the run took 3.9 s of wall time at
# load 4 on 2 cores (16 virtual s took 7.7 s), and the first save comes after 0.18 s.
KILLED_BUDGET = 8
KILLED = _job("esync", budget=str(KILLED_BUDGET))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run of :data:`KILLED`, which both signals' resumed runs must end as."""
    return _run(tmp_path_factory.mktemp("uninterrupted") / "run", KILLED + ["--checkpoint-every-min", "10"])


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_process_killed_after_a_periodic_save_resumes_to_the_same_model(tmp_path, signum, uninterrupted):
    """A real kill: SIGKILL (the session's end) leaves the last periodic checkpoint; SIGTERM saves
    one more and exits 143."""
    argv = KILLED
    often = argv + ["--checkpoint-every-min", "0.003"]   # a save every 0.18 s of wall time
    path = tmp_path / "cut" / "checkpoint" / checkpoint.FILE
    proc = _sim_process(tmp_path / "cut", often)
    try:
        deadline = time.monotonic() + 300
        while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.exists() and proc.poll() is None, proc.stderr.read().decode()[-2000:]
        proc.send_signal(signum)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signal.SIGTERM)
    assert path.exists() and not (tmp_path / "cut" / "summary.json").exists()
    at = pickle.loads(path.read_bytes())["virtual_s"]
    assert 0 < at < KILLED_BUDGET
    resumed = _run(tmp_path / "cut", often + ["--resume"])
    assert resumed["sim"]["checkpoint"]["resumed_at_s"] == [at]
    assert _digests(resumed) == _digests(uninterrupted)
    assert resumed["curve"] == uninterrupted["curve"]


def test_a_late_memory_run_resumes_with_the_servers_memory_and_the_keepers_copies(tmp_path):
    """``--late-memory``: the replay rebuilds which rank is remembered from which round; the checkpoint
    restores the servers' memory keys and the keeper's copies, so the rounds after the resume add the
    same remembered deltas as an uninterrupted run (its final model bit for bit)."""
    argv = _job("esync", "--round-deadline", "2", "--late-memory", "--stop-at-target", "--target-accuracy", "0.99")
    saved, closed = [], []

    def stopped(path):
        state = pickle.loads(path.read_bytes())
        saved.append((state["record"]["deadline"]["remembered"], state["memory"]))
        closed.append(state["record"]["deadline"]["closed"])

    whole, resumed = _check_resumed(tmp_path, argv, 1.5, stopped)
    [(remembered, memory)] = saved
    assert remembered == {"2": memory["servers"][2][0]} and memory["caches"][0][2][0] <= memory["servers"][2][0]
    assert resumed["sim"]["memory_log"] == whole["sim"]["memory_log"]
    # a memory was pulled after the resume too (a round after the last one closed before the stop)
    assert [e for e in whole["sim"]["memory_log"] if e[2] == "pull" and e[1] > closed[0]]


def test_a_wait_needed_run_resumes_with_each_devices_smoothed_loss(tmp_path):
    """``--wait-needed``: the replay feeds the logged losses back into the queries, so the State Server's
    smoothed losses (in the checkpoint's record) and the rounds that wait for a needed device after the
    resume are an uninterrupted run's."""
    argv = _job("esync", "--round-deadline", "2", "--wait-needed", "1.5", "--dist", "non-iid",
                "--stop-at-target", "--target-accuracy", "0.99")
    saved = []

    def stopped(path):
        deadline = pickle.loads(path.read_bytes())["record"]["deadline"]
        saved.append((deadline["losses"], deadline["closed"]))

    whole, resumed = _check_resumed(tmp_path, argv, 1.5, stopped)
    [(losses, closed)] = saved
    assert sorted(losses) == ["0", "1", "2"]   # every device had reported a loss by the stop
    needed = whole["sim"]["needed_rounds"]
    assert resumed["sim"]["needed_rounds"] == needed
    # rounds before and after the stop waited for slot 2 (the slow one on label-sorted data)
    assert any(r <= closed and 2 in slots for r, slots in needed)
    assert any(r > closed and 2 in slots for r, slots in needed)
