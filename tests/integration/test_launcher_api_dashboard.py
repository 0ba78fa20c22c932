"""The launcher's library API serves the live view when the plan asks for it.

``mxhet-launch --dashboard`` has its own test (test_dashboard.py, a real
training job in a browser); this one checks, with a single plain Python worker
and no MXNet, that :func:`mxhet.launcher.run` does the same for a plan made
with ``--dashboard``: the page answers while the job runs, lists the plan's
device, the worker gets the live directory, and the view and the directory are
gone when ``run`` returns.
"""
import io
import json
import os
import re
import sys
import threading
import urllib.error
import urllib.request

from mxhet import launcher

# The worker records the live directory it was given, then waits until the
# test has read the page (or 20 s pass), so the job outlives the query.
WORKER = ("import os, sys, time\n"
          "open(sys.argv[1], 'w').write(os.environ.get('MXHET_LIVE_DIR', ''))\n"
          "deadline = time.time() + 20\n"
          "while not os.path.exists(sys.argv[2]) and time.time() < deadline:\n"
          "    time.sleep(0.05)\n")


class _Output(io.StringIO):
    """The job's output, readable by the hook while the job writes it."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            return super().write(text)

    def text(self):
        with self.lock:
            return self.getvalue()


class _ReadThePage:
    """A supervisor hook: once the dashboard's address is printed, read /api/state."""

    def __init__(self, out, done_file):
        self.out, self.done_file = out, done_file
        self.url = self.state = self.error = None

    def polled(self, supervisor):
        if self.state is not None or self.error is not None:
            return
        match = re.search(r"dashboard at (http://\S+/) ", self.out.text())
        if match is None:
            self.error = "no dashboard address in the job's output: %r" % self.out.text()
        else:
            self.url = match.group(1)
            try:
                with urllib.request.urlopen(self.url + "api/state", timeout=10) as response:
                    self.state = json.loads(response.read().decode())
            except OSError as exc:
                self.error = "GET %sapi/state failed: %s" % (self.url, exc)
        open(self.done_file, "w").close()  # let the worker exit


def test_run_serves_the_live_view_of_a_plan_made_with_dashboard(tmp_path):
    seen, done = str(tmp_path / "live-dir-seen"), str(tmp_path / "page-read")
    plan = launcher.plan(["-n", "1", "--sync", "local", "--dashboard", "127.0.0.1:0", "--",
                          sys.executable, "-c", WORKER, seen, done])
    assert plan.live_view == ("127.0.0.1", 0) and os.path.isdir(plan.live_dir)
    assert plan.live_dir in plan.scratch

    out = _Output()
    hook = _ReadThePage(out, done)
    result = launcher.run(plan, out=out, hooks=[hook], timeout=60)

    assert result.exit_code == 0, out.text()
    assert hook.error is None, hook.error
    assert hook.state["job"]["status"] == "running"
    assert [d["slot"] for d in hook.state["devices"]] == [0]
    with open(seen) as f:
        assert f.read() == plan.live_dir          # the worker was told where to write
    assert not os.path.exists(plan.live_dir)      # removed with the job
    try:
        urllib.request.urlopen(hook.url + "api/state", timeout=5)
        still_serving = True
    except (urllib.error.URLError, ConnectionError):
        still_serving = False
    assert not still_serving, "the live view still answers after run() returned"


def test_run_serves_nothing_without_dashboard(tmp_path):
    plan = launcher.plan(["-n", "1", "--sync", "local", "--", sys.executable, "-c", "pass"])
    assert plan.live_view is None and plan.live_dir == ""
    assert all("MXHET_LIVE_DIR" not in p.env for p in plan.processes)
    out = _Output()
    assert launcher.run(plan, out=out, timeout=60).exit_code == 0
    assert "dashboard at" not in out.text()
