"""The launcher with real processes: PS-LITE scheduler, server and workers on 127.0.0.1.

Each job takes a few seconds (every process imports MXNet); the launcher picks
free ports itself. Every launcher run is bounded by ``LAUNCH_TIMEOUT_S`` and the
``child_pids`` fixture ends whatever a failed test left behind, by PID.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import pid_alive

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_TIMEOUT_S = 120
FAILURE_BOUND_S = 30

# Two MXNet 1.9.1 traps shape this worker. (1) A PS-LITE worker that raises after
# creating a dist kvstore hangs at exit: the kvstore's destructor waits in a
# barrier the other workers never reach; so on an uncaught error it leaves with
# os._exit. (2) A kvstore still alive while the interpreter shuts down (e.g. a
# module global kept by that excepthook) aborts the process with SIGABRT; so the
# kvstore is a local of main(), destroyed when main() returns.
WORKER = textwrap.dedent('''
    import os, sys, time, traceback


    def _die(kind, value, tb):
        traceback.print_exception(kind, value, tb)
        sys.stderr.flush()
        os._exit(1)


    def main(piddir, behaviour):
        slot = int(os.environ["MXHET_SLOT"])
        with open(os.path.join(piddir, "worker-%d.pid" % slot), "w") as handle:
            handle.write(str(os.getpid()))
        if behaviour == "sleep":
            time.sleep(3600)
        import mxnet as mx
        kv = mx.kv.create("dist_sync")
        if slot == 1 and behaviour == "raise":
            raise RuntimeError("deliberate failure in slot 1")
        if slot == 1 and behaviour == "sigkill":
            os.kill(os.getpid(), 9)
        kv.init(7, mx.nd.ones((3,)))
        kv.push(7, mx.nd.ones((3,)))
        out = mx.nd.zeros((3,))
        kv.pull(7, out=out)
        print("slot %d rank %d pulled %s on %s" % (slot, kv.rank, out.asnumpy().tolist(),
                                                    os.environ["DMLC_NODE_HOST"]))


    if __name__ == "__main__":
        sys.excepthook = _die
        main(sys.argv[1], sys.argv[2])
''')

FAKE_SSH = textwrap.dedent('''\
    #!/bin/bash
    # Fake ssh: log the call, drop the options and the host, run the remote command here.
    echo "$*" >> "$(dirname "$0")/ssh.log"
    while [ $# -gt 0 ]; do
      case "$1" in
        -o|-p|-i|-l) shift 2 ;;
        -*) shift ;;
        *) break ;;
      esac
    done
    shift
    exec bash -c "$1"
''')


@pytest.fixture
def job(tmp_path, child_pids):
    """Run the launcher on the worker script; returns a function(behaviour, *options)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    piddir = tmp_path / "pids"
    piddir.mkdir()
    job_file = tmp_path / "job.json"

    def run(behaviour, *options):
        argv = [sys.executable, "tools/launch.py", *options, "--job-file", str(job_file),
                "--", sys.executable, str(script), str(piddir), behaviour]
        try:
            result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
        finally:
            # Whatever happened, record every process so the fixture can end leftovers.
            if job_file.exists():
                child_pids.add_job_file(job_file)
            child_pids.add(*(int(p.read_text()) for p in piddir.glob("*.pid") if p.read_text()))
        result.record = json.loads(job_file.read_text())
        result.worker_pids = {int(p.stem.split("-")[1]): int(p.read_text()) for p in piddir.glob("*.pid")}
        return result

    return run


def _assert_nothing_left(child_pids):
    assert child_pids.pids, "no process was recorded"
    assert child_pids.alive() == []


def _roles(record):
    return [(p["role"], p["slot"]) for p in record["processes"]]


def test_two_workers_succeed(job, child_pids):
    result = job("ok", "-n", "2", "-s", "1", "--sync", "sync")
    assert result.returncode == 0, result.stderr
    record = result.record
    assert _roles(record) == [("scheduler", None), ("server", 0), ("state-server", None), ("worker", 0), ("worker", 1)]
    assert record["status"] == "succeeded" and record["exit_code"] == 0
    assert record["mode"] == "sync" and record["kvstore"] == "dist_sync" and record["root_port"] > 0
    # these workers never join the State Server, which the launcher ends after them
    assert [p["exit_code"] for p in record["processes"] if p["role"] != "state-server"] == [0, 0, 0, 0]
    # The job file names the very processes that ran the workers.
    workers = {p["slot"]: p["pid"] for p in record["processes"] if p["role"] == "worker"}
    assert workers == result.worker_pids
    for slot in (0, 1):
        assert "[worker %d] slot %d rank" % (slot, slot) in result.stdout
        assert "pulled [2.0, 2.0, 2.0]" in result.stdout
    assert sorted({line.split(" rank ")[1].split()[0] for line in result.stdout.splitlines()
                   if " rank " in line}) == ["0", "1"]
    _assert_nothing_left(child_pids)


@pytest.mark.parametrize("behaviour, why", [
    ("raise", "exited with code 1"),
    ("sigkill", "was killed by signal SIGKILL"),
])
def test_failing_worker_ends_the_job(job, child_pids, behaviour, why):
    result = job(behaviour, "-n", "2", "-s", "1", "--sync", "sync", "--timeout", str(FAILURE_BOUND_S))
    # Exit 1, not the timeout's 124: the failure was noticed well within the bound.
    assert result.returncode == 1, result.stderr
    assert "worker 1 (pid %d on 127.0.0.1) %s" % (result.worker_pids[1], why) in result.stderr
    if behaviour == "raise":
        tail = result.stderr.split("last ")[1]
        assert "RuntimeError: deliberate failure in slot 1" in tail
    record = result.record
    assert record["status"] == "failed"
    failed = [p for p in record["processes"] if p["role"] == "worker" and p["slot"] == 1][0]
    assert failed["exit_code"] == (1 if behaviour == "raise" else -signal.SIGKILL)
    assert not failed["ended_by_launcher"]
    _assert_nothing_left(child_pids)


def test_timeout_ends_everything(job, child_pids):
    result = job("sleep", "-n", "1", "-s", "1", "--sync", "sync", "--timeout", "5")
    assert result.returncode == 124, result.stderr
    assert "timeout" in result.stderr
    assert result.record["status"] == "timeout"
    assert all(p["ended_by_launcher"] for p in result.record["processes"])
    _assert_nothing_left(child_pids)


def test_ssh_launcher_with_fake_ssh(job, child_pids, tmp_path):
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text("# two names for this machine\n127.0.0.1\n\n127.0.0.1   # again\n")
    result = job("ok", "-n", "2", "-s", "1", "--sync", "sync", "-H", str(hosts),
                 "--ssh-command", str(ssh))
    assert result.returncode == 0, result.stderr
    assert result.record["launcher"] == "ssh"
    for slot in (0, 1):
        # MXHET_SLOT and DMLC_NODE_HOST reached the worker through the remote command.
        assert "[worker %d] slot %d rank" % (slot, slot) in result.stdout
    assert result.stdout.count("on 127.0.0.1") == 2
    calls = (tmp_path / "ssh.log").read_text().splitlines()
    starts = [call for call in calls if call.startswith("-o BatchMode=yes 127.0.0.1 cd ")]
    assert len(starts) == 5  # scheduler, server, State Server, 2 workers
    # The rest end what still ran when the workers were done (e.g. the State Server) on its host, or
    # read a quiet worker's CPU time there (the hang watch asks when a worker is idle for a while, as
    # one can be on a loaded machine).
    others = [call for call in calls if call not in starts]
    assert all(" kill -" in call or "getconf CLK_TCK" in call for call in others), others
    _assert_nothing_left(child_pids)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_to_launcher_ends_everything(tmp_path, child_pids, signum, code):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    piddir = tmp_path / "pids"
    piddir.mkdir()
    job_file = tmp_path / "job.json"
    argv = [sys.executable, "tools/launch.py", "-n", "1", "-s", "1", "--sync", "sync",
            "--job-file", str(job_file), "--", sys.executable, str(script), str(piddir), "sleep"]
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        launcher = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err)
    child_pids.add(launcher.pid)
    try:
        deadline = time.monotonic() + FAILURE_BOUND_S
        # the launcher writes the job file once it has started every process, the worker's pid file can
        # come first (1.6 s apart on a loaded machine)
        while not ((piddir / "worker-0.pid").exists() and job_file.exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job_file.exists(), "the launcher did not start the job"
        child_pids.add_job_file(job_file)
        launcher.send_signal(signum)
        assert launcher.wait(timeout=FAILURE_BOUND_S) == code
    finally:
        if job_file.exists():
            child_pids.add_job_file(job_file)
    assert signal.Signals(signum).name in (tmp_path / "err.txt").read_text()
    assert json.loads(job_file.read_text())["status"] == "interrupted"
    child_pids.add(int((piddir / "worker-0.pid").read_text()))
    _assert_nothing_left(child_pids)


# ---------------------------------------------- run_plan in-process, tiny children

def _python(code):
    return (sys.executable, "-c", code)


def _plan(*specs):
    from mxhet.launcher import Plan, ProcessSpec
    return Plan(mode="sync", kvstore="dist_sync", launcher="local", root_uri="127.0.0.1", root_port=1,
                state_server="", processes=tuple(ProcessSpec(role, slot, "127.0.0.1", argv, {})
                                                 for role, slot, argv in specs))


def _run(plan, tmp_path, child_pids, **kwargs):
    from mxhet.launcher import run_plan
    job_file = tmp_path / "job.json"
    try:
        return run_plan(plan, timeout=FAILURE_BOUND_S, job_file=str(job_file), **kwargs)
    finally:
        if job_file.exists():
            record = child_pids.add_job_file(job_file)
            assert record["status"] != "running"


def test_output_is_prefixed_and_lingering_servers_are_ended(tmp_path, child_pids, capsys):
    plan = _plan(("scheduler", None, _python("import time; time.sleep(60)")),
                 ("worker", 0, _python("import sys; print('to out'); print('to err', file=sys.stderr)")))
    assert _run(plan, tmp_path, child_pids, server_grace=0.5) == 0
    out, err = capsys.readouterr()
    assert "[worker 0] to out\n" in out
    assert "[worker 0] to err\n" in err
    assert "scheduler still running" in err
    processes = json.loads((tmp_path / "job.json").read_text())["processes"]
    assert [(p["exit_code"] == 0, p["ended_by_launcher"]) for p in processes] == [(False, True), (True, False)]
    _assert_nothing_left(child_pids)


def test_server_exiting_before_the_workers_fails_the_job(tmp_path, child_pids, capsys):
    plan = _plan(("server", 0, _python("pass")),
                 ("worker", 0, _python("import time; time.sleep(60)")))
    assert _run(plan, tmp_path, child_pids, worker_grace=0.5) == 1
    assert "server 0 (pid" in capsys.readouterr().err
    _assert_nothing_left(child_pids)


def test_command_that_cannot_start(tmp_path, child_pids, capsys):
    plan = _plan(("scheduler", None, _python("import time; time.sleep(60)")),
                 ("worker", 0, (str(tmp_path / "no-such-program"),)))
    assert _run(plan, tmp_path, child_pids) == 1
    assert "cannot start worker 0" in capsys.readouterr().err
    _assert_nothing_left(child_pids)


def test_a_launcher_killed_with_sigkill_takes_its_job_along(tmp_path, child_pids):
    """SIGKILL cannot be caught: the children die with the launcher (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    job_file = tmp_path / "job.json"
    program = ("import sys; from mxhet import launcher; "
               "launcher.run(launcher.plan(['-n', '1', '--sync', 'local', '--job-file', sys.argv[1], "
               "'--', 'sleep', '300']))")
    api = subprocess.Popen([sys.executable, "-c", program, str(job_file)], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT))
    child_pids.add(api.pid)
    deadline = time.monotonic() + 60
    while not job_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = child_pids.add_job_file(str(job_file))["processes"][0]["pid"]
    assert pid_alive(worker)
    api.kill()
    api.wait()
    deadline = time.monotonic() + 30
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(worker)
