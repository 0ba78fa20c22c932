"""The live view and TensorBoard on one real job (3 workers, one 4x slower, ESync).

While the job trains: ``/api/state`` over HTTP has every device, then the page
in Debian's headless chromium (driven over the DevTools protocol, see
``headless.py``; nothing fetched from the network) renders the devices and
its charts, polls by itself and shows new rounds, and a screenshot is taken.
After training, the evaluated accuracy appears as rank 0 scores the
snapshots. After the job: the TensorBoard event files hold every device's n_i
per round and the job's accuracy curve, equal to the summary.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from mxhet.observe.tensorboard import read_scalars

from .headless import HeadlessChromium
from .jobs import ROOT, load_summary, train_command

pytestmark = pytest.mark.timeout(400)
SLOWDOWNS = [1.0, 1.0, 4.0]
# The two tests that need the job training were done 13.5 s after the launch in CI's run (8.1 + 5.4 s,
# start-up included) and 16-17 s after it at load 4.3 on 2 cores (three runs). Since the page test waits
# for 3 measured rounds before it opens the browser, a clean make test beside a bench (load about 5) saw
# the page load at round 36 of a 20 s job, near its end, and wait in vain for a new round: 40 s of
# training leave the page 20 s more (sleeping processes, mostly: iterations are padded to --base-iter);
# the last test waits for the end
TRAIN_SECONDS = 40
# Iterations pinned to 0.1 s (the slow device's to 0.4 s): which device the State Server names the slowest
# follows from the profile, not the load (at 0.05 s a fast device beside a load of 11 on 2 cores once took
# longer than the slow one's 0.2 s, and the page showed it as the slowest)
BASE_ITER_S = 0.1


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
                "--base-iter", str(BASE_ITER_S), "--dashboard", "127.0.0.1:0", "--timeout", "300", "--",
                *train_command(self.metrics, "--time-budget", str(TRAIN_SECONDS), "--eval-interval", "3",
                               "--eval-samples", "300", "--final-eval-samples", "1000",
                               "--tensorboard", str(self.tensorboard))]
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
        # how large rates and times are is the bench's business; here each device has trained (a share of its
        # time computing, samples in the rate window) and queried the State Server (a measured round trip)
        assert 0 < d["compute_ratio"] <= 1 and d["samples_per_s"] > 0 and d["rtt_s"] > 0, d
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
    assert later["job"]["rounds"] > job_state["rounds"] and len(later["devices"]) == 3   # the view follows the job

    # read-only: nothing but GET is answered
    for method in ("POST", "PUT", "DELETE"):
        request = urllib.request.Request(job.url + "api/state", data=b"{}", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405


PAGE_FACTS = """(() => {
  const rows = [...document.querySelectorAll('#devices tbody tr')];
  return {slots: rows.map((r) => +r.dataset.slot), rounds: rows.map((r) => +r.dataset.round),
          slowest: rows.map((r) => r.classList.contains('slowest')),
          updates: +document.getElementById('updates').dataset.count,
          job_rounds: +(document.body.dataset.rounds || 0),
          charts: document.querySelectorAll('.plot-container').length,
          mode: document.getElementById('mode').textContent,
          accuracy: document.getElementById('accuracy').textContent};
})()"""


def test_page_renders_the_devices_and_updates_in_a_headless_browser(job, module_child_pids):
    # the page is opened once the State Server has measured every device for a few rounds: before that, a
    # fast device held up at the start (rank 0's set-up, a loaded machine) can be the slowest it has seen,
    # and the page rightly shows that
    wait_for(job, lambda s: all(d["fed"] and d["round"] >= 3 for d in s["devices"])
             and s["job"]["slowest_slot"] == 2, "feed from every device and the 4x slower one named the slowest")
    with HeadlessChromium(job.tmp / "chromium-profile", module_child_pids) as browser:
        browser.navigate(job.url)
        browser.wait_until("document.querySelectorAll('#devices tbody tr').length === 3 && "
                           "document.querySelectorAll('.plot-container').length >= 4", "devices and charts")
        first = browser.evaluate(PAGE_FACTS)
        assert first["slots"] == [0, 1, 2] and first["mode"] == "esync"
        assert first["charts"] >= 4 and first["updates"] >= 1 and first["job_rounds"] >= 1
        assert first["slowest"] == [False, False, True]
        # the same page, left alone, polls and shows new rounds
        browser.wait_until("+document.body.dataset.rounds > %d && +document.getElementById('updates').dataset.count"
                           " > %d" % (first["job_rounds"], first["updates"] + 1), "the page to update itself")
        later = browser.evaluate(PAGE_FACTS)
        assert sum(later["rounds"]) > sum(first["rounds"])
        shot = browser.screenshot(job.tmp / "dashboard.png")
    with open(str(shot), "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000   # a rendered page, not a blank one


def test_accuracy_appears_as_rank_0_scores_the_snapshots(job):
    seen = []   # (phase, accuracy) while the job lasts; snapshots are scored after training
    deadline = time.monotonic() + 240
    while job.proc.poll() is None and time.monotonic() < deadline:
        try:
            state = job.state()
        except (urllib.error.URLError, ConnectionError):
            break   # the job has ended and the dashboard with it
        seen.append((state["job"]["phase"], state["job"]["accuracy"], len(state["job"]["accuracy_curve"])))
        time.sleep(0.2)
    assert job.proc.wait(timeout=240) == 0, job.log()
    summary = load_summary(job.metrics)
    scored = [(phase, acc, n) for phase, acc, n in seen if acc is not None]
    assert scored, "no evaluated accuracy was ever shown: %s" % seen[-10:]
    assert all(phase in ("evaluating", "done") for phase, _, _ in scored)
    assert all(acc == summary["curve"][n - 1][1] for _, acc, n in scored)   # the latest point scored so far


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
