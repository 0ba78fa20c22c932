"""Shared test setup: make the repository root importable; end leftover children."""
import json
import resource
import os
import signal
import sys
import time

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
# The decompressed Fashion-MNIST copies every test's workers share (mxhet/data.py), in the
# checkout (runs/ is ignored), not the user's ~/.cache; the launched processes inherit it.
os.environ.setdefault("MXHET_DATA_CACHE", os.path.join(_ROOT, "runs", "idx-cache"))
# Likewise MXNet's compiled operator functions (mxhet/mxnet_import.py), written here first, by the pytest
# process, before the jobs' processes read them: each of those imports MXNet in about 1 CPU s less.
os.environ.setdefault("MXHET_MXNET_CACHE", os.path.join(_ROOT, "runs", "mxnet-cache"))
from mxhet.mxnet_import import import_mxnet  # noqa: E402

import_mxnet()


@pytest.fixture(autouse=True)
def _thread_settings_stay():
    """Put back the compute-thread variables a bench run in this process set (bench.runner.share_cores sets
    them in ``os.environ`` for the jobs it starts), so the processes later tests start get the usual ones."""
    names = ("OMP_NUM_THREADS", "MXNET_ENGINE_TYPE")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# --- child processes ---------------------------------------------------------


def pid_alive(pid):
    """True if ``pid`` runs (a zombie does not count: it has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class ChildPids:
    """PIDs a test started, directly or through the launcher.

    At teardown every one still running is ended by PID: SIGTERM to it (to its
    process group when it leads one), SIGKILL after a grace period. Never by name.
    """

    def __init__(self):
        self.pids = []

    def add(self, *pids):
        for pid in pids:
            if pid and pid not in self.pids:
                self.pids.append(int(pid))

    def add_job_file(self, path):
        """Record every pid of a launcher ``--job-file``; returns the parsed file."""
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        self.add(*(p["pid"] for p in record["processes"]))
        return record

    def alive(self):
        """The recorded pids that still run."""
        return [pid for pid in self.pids if pid_alive(pid)]

    def _signal(self, pid, signum):
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def end_all(self, grace=3.0):
        """End every recorded pid still running; returns the ones that were."""
        leftovers = self.alive()
        for pid in leftovers:
            self._signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
        for pid in self.alive():
            self._signal(pid, signal.SIGKILL)
        for pid in self.pids:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap the ones that are our own children
            except ChildProcessError:
                pass
        return leftovers


@pytest.fixture
def child_pids():
    """A :class:`ChildPids`; the processes still running at teardown are ended."""
    pids = ChildPids()
    yield pids
    pids.end_all()


@pytest.fixture(scope="module")
def module_child_pids():
    """A :class:`ChildPids` shared by a module's tests, ended after the last one."""
    pids = ChildPids()
    yield pids
    pids.end_all()


EXTENDED_ENV = "MXHET_EXTENDED_TESTS"
"""Set to 1 to run the tests marked ``extended`` too: more real-process launches of a behaviour that
``make test`` already covers in one or two modes (the other modes' launches, each a minute of mostly
sleeping processes), kept out of the default run so that it stays within its time budget."""


def pytest_configure(config):
    config.addinivalue_line("markers", "extended: a further real-process launch, run only with %s=1" % EXTENDED_ENV)


def pytest_collection_modifyitems(config, items):
    if os.environ.get(EXTENDED_ENV) == "1":
        return
    skip = pytest.mark.skip(reason="an extended launch: run with %s=1" % EXTENDED_ENV)
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)


def _cpu_spent():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test's CPU seconds (its process's and every process it started and waited for: the jobs'
    workers and servers, through their launcher) become its property ``cpu_s``, which ``--junitxml``
    writes: on 2 cores the suite's length is its CPU time, and a test's wall time says little about
    that while other tests run beside it."""
    item.mxhet_cpu_start = _cpu_spent()
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and hasattr(item, "mxhet_cpu_start"):   # before the report copies the properties
        item.user_properties.append(("cpu_s", round(_cpu_spent() - item.mxhet_cpu_start, 2)))
