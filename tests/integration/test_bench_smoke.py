"""``mxhet-bench all --preset smoke``: the whole reproduction pipeline with real jobs.

One invocation (module fixture, about 1.5 min on 2 cores) runs Sync, Async and ESync on the smoke
profile (2 fast devices, 1 at slowdown 4) plus the non-i.i.d., fast-devices-only and standalone runs. The
tests check its outputs -- JSON keys of every run, the report's numbers against the JSON, figures -- and,
on the same runs, each mode's synchronization rule under a time budget (workers did different numbers
of iterations, or the same in lockstep) besides the contract every mode keeps
(:func:`jobs.check_mode_contract`; for the modes the preset does not run: test_modes_learn.py,
test_contexts_all_modes.py), and that the bench leaves no process behind.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

from bench import presets
from mxhet.modes import get_mode

from .jobs import ROOT, check_mode_contract

pytestmark = pytest.mark.timeout(600)

EXPERIMENTS = ("table1", "curves", "throughput", "compute-ratio")
TOP_KEYS = {"experiment", "preset", "command", "machine", "profile", "target_accuracy", "runs", "seed"}
RUN_KEYS = {"model", "mode", "dist", "time_to_target_s", "final_accuracy", "samples_per_s", "bytes_per_s",
            "compute_ratio", "local_iters_mean", "curve"}
MODES = presets.get("smoke").modes + (presets.STANDALONE,)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, module_child_pids):
    out = tmp_path_factory.mktemp("bench") / "smoke"
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.cli", "all", "--preset", "smoke", "--out", str(out)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    finally:
        for job_file in glob.glob(str(out / "runs" / "*" / "job.json")):
            module_child_pids.add_job_file(job_file)
    results = {}
    for name in EXPERIMENTS:
        path = out / ("%s.json" % name)
        if path.exists():
            results[name] = json.loads(path.read_text())
    return proc, out, results


def test_smoke_preset_succeeds_and_leaves_no_process(smoke, module_child_pids):
    proc, out, results = smoke
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert not module_child_pids.alive()
    assert set(results) == set(EXPERIMENTS)


def test_every_experiment_and_run_has_the_documented_keys(smoke):
    _, _, results = smoke
    for name, data in results.items():
        assert TOP_KEYS <= set(data) and data["experiment"] == name and data["preset"] == "smoke"
        assert data["failures"] == [] and data["runs"]
        assert "base_iteration_s" in data["profile"]["calibration"]["smallcnn"]
        assert {"cpu", "cores", "mxnet", "contexts"} <= set(data["machine"])
        for run in data["runs"]:
            assert RUN_KEYS <= set(run)
            n = 1 if run["mode"] == "local" else 3
            assert len(run["compute_ratio"]) == len(run["local_iters_mean"]) == n
            assert run["curve"] and run["curve"][-1][1] == pytest.approx(run["final_accuracy"], abs=1e-4)
            if run["mode"] == "local":   # snapshots during training (every 1 s of 3 s), not only the start and end
                assert len(run["curve"]) >= 3, run["curve"]
    assert {r["mode"] for r in results["throughput"]["runs"]} == {"sync", "async", "esync"}
    assert {(r["mode"], r["dist"]) for r in results["curves"]["runs"]} == {
        ("sync", "iid"), ("esync", "iid"), ("local", "iid"), ("sync", "non-iid"), ("esync", "non-iid")}


def _table(text, heading):
    """The body rows (lists of cells) of the first Markdown table after ``heading``."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[start + 2:end]]


def test_report_and_figures(smoke):
    """The report shows the JSON's numbers, and every figure is a drawn image of a usable size."""
    from PIL import Image
    _, out, results = smoke
    text = (out / "report.md").read_text()
    for heading in ("## Table 1", "## Figure 3", "## Figure 4", "## Figure 5", "## Every run", "## Failed runs"):
        assert heading in text
    table1 = _table(text, "## Table 1")
    assert len(table1) == len(results["table1"]["rows"])
    for cells, row in zip(table1, results["table1"]["rows"]):
        shown = ["%.3f" % row[k] for k in ("esync_accuracy", "standalone_accuracy", "sync_accuracy")]
        assert cells[5:8] == shown, (cells, row)
    runs = {}
    for data in results.values():
        for run in data["runs"]:
            runs.setdefault((run["model"], run["mode"], run["dist"]), []).append(
                ["%.3f" % run["final_accuracy"], "%.0f" % run["samples_per_s"], "%.2f" % (run["bytes_per_s"] / 1e6)])
    every = _table(text, "## Every run")   # model, mode, data, seed, time to target, then these three
    assert {tuple(cells[:3]) for cells in every} == set(runs)
    for cells in every:
        assert cells[5:8] in runs[tuple(cells[:3])], cells
    for png in ("fig3-curves.png", "fig4-throughput.png", "fig5-compute-ratio.png"):
        with Image.open(out / png) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 250, (png, image.size)
            colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
        # a blank or single-colour canvas has a handful of colours; axes, text and curves give hundreds
        assert colours is None or len(colours) > 50, (png, len(colours))


def _summaries(out_dir, results):
    """Every run's summary.json (the launcher job's own output), by mode, i.i.d."""
    out = {}
    for data in results.values():
        for run in data["runs"]:
            if run["dist"] == "iid":
                assert not os.path.isabs(run["run_dir"])
                with open(os.path.join(str(out_dir), run["run_dir"], "summary.json")) as f:
                    out[run["mode"]] = json.load(f)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_mode_contract(smoke, mode):
    """Each mode keeps the contract (it trains, ends cleanly with the same global model on every worker)
    and its synchronization rule (the small CNN has no BatchNorm; see test_model_contract.py for a model
    with it)."""
    _, out, results = smoke
    summary = _summaries(out, results)[mode]
    standalone = get_mode(mode).kvstore_type is None
    check_mode_contract(summary, mode, 1 if standalone else 3)
    # These runs last 3 s of wall clock, so how far they get depends on the machine's load; learning at
    # pinned iteration times is test_modes_learn.py's. The initial model was scored at t = 0 (at chance,
    # check_mode_contract); the same seed gives every mode the same one (taken before the first update
    # could reach it)
    assert summary["curve"][0][1] == _summaries(out, results)["sync"]["curve"][0][1], summary["curve"]
    if not standalone:
        iters = [w["iterations"] for w in sorted(summary["workers"], key=lambda w: w["slot"])]
        if mode == "sync":
            assert iters[0] == iters[2], iters   # lockstep: fast workers wait
        else:
            # nobody waits for the slow worker, whose iterations are padded to 4 x T (--base-iter)
            assert iters[0] > iters[2], iters


def test_sigterm_to_the_bench_ends_the_running_job(tmp_path, child_pids):
    """The launcher runs in a session of its own; the bench must end it."""
    import signal
    import time
    out = tmp_path / "term"
    env = dict(os.environ, PYTHONPATH=ROOT)
    bench = subprocess.Popen([sys.executable, "-m", "bench.cli", "table1", "--preset", "smoke", "--out", str(out),
                              "--time-budget", "60"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child_pids.add(bench.pid)
    job_file = out / "runs" / "smallcnn-sync-iid" / "job.json"
    deadline = time.monotonic() + 120
    # the launcher writes job.json after it has started every process, so a worker's snapshots can come first
    while time.monotonic() < deadline and not ((out / "runs" / "smallcnn-sync-iid" / "snapshots").exists()
                                               and job_file.exists()):
        time.sleep(0.2)
    assert job_file.exists(), "the first run did not start"
    record = child_pids.add_job_file(str(job_file))
    assert record["processes"]
    bench.send_signal(signal.SIGTERM)
    assert bench.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and child_pids.alive():
        time.sleep(0.2)
    assert not child_pids.alive()
