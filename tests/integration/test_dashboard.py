"""The live view and TensorBoard on one real job (3 workers, one 4x slower, ESync).

While the job trains: ``/api/state`` over HTTP has every device, then the page
in Debian's headless chromium (``--dump-dom`` and ``--screenshot``: no driver,
nothing fetched from the network) renders the devices, polls by itself and
shows new rounds. After the job: the TensorBoard event files hold every
device's n_i per round and the job's accuracy curve, equal to the summary.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from mxhet.observe.tensorboard import read_scalars

from .jobs import ROOT, load_summary, train_command

pytestmark = pytest.mark.timeout(400)
SLOWDOWNS = [1.0, 1.0, 4.0]
TRAIN_SECONDS = 30


def find_chromium():
    """Debian's chromium, or skip (fail under CI, where ``make test`` installs it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        why = "Debian's chromium is not installed (make test installs it: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path


class Job:
    def __init__(self, tmp):
        self.tmp = tmp
        self.metrics = tmp / "metrics"
        self.tensorboard = tmp / "tb"
        self.job_file = str(tmp / "job.json")
        self.lines = []
        self.url = None
        self._seen_url = threading.Event()
        argv = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", self.job_file,
                "-n", "3", "-s", "1", "--sync", "esync", "--slowdown", ",".join(map(str, SLOWDOWNS)),
                "--base-iter", "0.05", "--dashboard", "127.0.0.1:0", "--timeout", "300", "--",
                *train_command(self.metrics, "--time-budget", str(TRAIN_SECONDS), "--eval-interval", "3",
                               "--eval-samples", "300", "--tensorboard", str(self.tensorboard))]
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            found = re.search(r"dashboard at (http://127\.0\.0\.1:\d+/)", line)
            if found:
                self.url = found.group(1)
                self._seen_url.set()

    def wait_url(self, timeout=60):
        if not self._seen_url.wait(timeout):
            pytest.fail("the launcher printed no dashboard address:\n" + "".join(self.lines[-30:]))
        return self.url

    def state(self):
        with urllib.request.urlopen(self.url + "api/state", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("application/json")
            return json.load(response)

    def log(self):
        return "".join(self.lines[-40:])


@pytest.fixture(scope="module")
def job(tmp_path_factory, module_child_pids):
    pids = module_child_pids
    running = Job(tmp_path_factory.mktemp("dashboard"))
    pids.add(running.proc.pid)
    try:
        running.wait_url()
        yield running
    finally:
        if os.path.exists(running.job_file):
            pids.add_job_file(running.job_file)
        if running.proc.poll() is None:
            try:
                running.proc.wait(timeout=240)   # the last test waits for the end; this is for failures
            except subprocess.TimeoutExpired:
                pass   # module_child_pids ends what is left, by pid


def wait_for(job, predicate, what, timeout=120):
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        assert job.proc.poll() is None, "the job ended before %s:\n%s" % (what, job.log())
        state = job.state()
        if predicate(state):
            return state
        time.sleep(0.5)
    pytest.fail("no %s within %d s; last state %s\n%s" % (what, timeout, json.dumps(state)[:2000], job.log()))


def test_api_state_has_every_device_while_the_job_runs(job):
    state = wait_for(job, lambda s: all(d["fed"] and d["round"] >= 3 for d in s["devices"]),
                     "feed from every device")
    devices = state["devices"]
    assert [d["slot"] for d in devices] == [0, 1, 2]
    assert sorted(d["rank"] for d in devices) == [0, 1, 2]
    assert [d["slowdown"] for d in devices] == SLOWDOWNS
    for d in devices:
        assert d["context"] == "cpu" and d["host"] == "127.0.0.1" and d["phase"] == "training"
        assert 0 < d["compute_ratio"] <= 1 and d["samples_per_s"] > 0 and d["rtt_s"] > 0
        assert d["local_iters"] and all(k >= 1 for _, k in d["local_iters"])
        assert d["bytes_pushed"] > 0 and d["bytes_pulled"] > 0
    job_state = state["job"]
    assert job_state["mode"] == "esync" and job_state["status"] == "running"
    assert job_state["reporting"] == 3 and job_state["rounds"] >= 3 and job_state["elapsed_s"] > 0
    # the State Server takes the 4x slower device for the slowest; the fast ones run more local iterations
    assert job_state["slowest_slot"] == 2 and [d["slowest"] for d in devices] == [False, False, True]
    fast = [k for d in devices[:2] for _, k in d["local_iters"]]
    slow = [k for _, k in devices[2]["local_iters"]]
    assert sum(fast) / len(fast) > sum(slow) / len(slow)

    later = wait_for(job, lambda s: s["job"]["rounds"] > job_state["rounds"], "new round")
    assert later["job"]["elapsed_s"] > job_state["elapsed_s"]

    # read-only: nothing but GET is answered
    for method in ("POST", "PUT", "DELETE"):
        request = urllib.request.Request(job.url + "api/state", data=b"{}", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405


def chromium(job, *flags, timeout=120):
    """Run headless chromium on the dashboard; every non-loopback request goes to a closed local port."""
    profile = job.tmp / ("chromium-profile-%d" % time.monotonic_ns())
    argv = [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--proxy-server=http://127.0.0.1:9", "--user-data-dir=%s" % profile,
            "--window-size=1400,1100", "--virtual-time-budget=6000", *flags, job.url]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def page_facts(dom):
    rows = re.findall(r'<tr data-slot="(\d+)" data-round="(\d+)"', dom)
    updates = re.search(r'id="updates" data-count="(\d+)"', dom)
    rounds = re.search(r'<body[^>]*data-rounds="(\d+)"', dom)
    return ([(int(s), int(r)) for s, r in rows], int(updates.group(1)) if updates else 0,
            int(rounds.group(1)) if rounds else -1)


def test_page_renders_the_devices_and_updates_in_a_headless_browser(job):
    find_chromium()
    wait_for(job, lambda s: all(d["fed"] for d in s["devices"]), "feed from every device")
    first = chromium(job, "--dump-dom").stdout
    rows, updates, rounds = page_facts(first)
    assert [slot for slot, _ in rows] == [0, 1, 2], first[:3000]
    assert updates >= 2, "the page did not poll /api/state by itself"
    assert rounds >= 1 and "slowest" in first and "esync" in first
    assert first.count("plot-container") >= 4    # the four plotly charts were drawn

    shot = job.tmp / "dashboard.png"
    chromium(job, "--screenshot=%s" % shot, "--hide-scrollbars")
    with open(str(shot), "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000   # a rendered page, not a blank one

    later = wait_for(job, lambda s: s["job"]["rounds"] > rounds, "new round after the first page load")
    assert later["job"]["rounds"] > rounds
    rows2, _, rounds2 = page_facts(chromium(job, "--dump-dom").stdout)
    assert rounds2 > rounds and sum(r for _, r in rows2) > sum(r for _, r in rows)


def test_tensorboard_event_files_match_the_summary(job):
    assert job.proc.wait(timeout=240) == 0, job.log()
    summary = load_summary(job.metrics)
    for worker in summary["workers"]:
        scalars = read_scalars(str(job.tensorboard / ("device-%d" % worker["slot"])))
        n_i = scalars["device/local_iters"]
        assert [step for step, _, _ in n_i] == list(range(1, worker["rounds"] + 1))
        assert [int(v) for _, v, _ in n_i] == worker["local_iters"]
        for tag in ("device/compute_ratio", "device/bytes_pushed", "device/bytes_pulled", "device/loss",
                    "device/samples_per_s", "device/rtt_s"):
            assert scalars[tag], tag
        assert scalars["device/bytes_pushed"][-1][1] == pytest.approx(worker["bytes_pushed"], rel=1e-6)
    job_scalars = read_scalars(str(job.tensorboard / "job"))
    assert [round(v, 4) for _, v, _ in job_scalars["job/accuracy"]] == [acc for _, acc in summary["curve"]]
    assert [step for step, _, _ in job_scalars["job/accuracy"]] == [int(round(t * 1000)) for t, _ in summary["curve"]]
    assert job_scalars["job/final_accuracy"][-1][1] == pytest.approx(summary["final_accuracy"], abs=1e-6)
    assert len(job_scalars["job/train_loss"]) == len(summary["train_loss"])
