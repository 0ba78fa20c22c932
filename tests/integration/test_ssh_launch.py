"""``--launcher ssh`` against a real OpenSSH server that the test starts itself.

sshd runs as a non-daemon child (``-D -e -f CONFIG``) with its own host key,
key-only login and a free port, listening on 127.0.0.2 and 127.0.0.3 only; the
hostfile names those two addresses, so the job's roles live on two "hosts" and
each binds and advertises its own address. The client options (port, key, no
host-key prompt) are the launcher's ``--ssh-port``, ``--ssh-identity`` and
``--ssh-option``. ``make test`` installs Debian's openssh-server.

Every process of a job carries a unique token in its environment (``--env``),
so the test can tell, from /proc, that none survives the launcher.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from tests.conftest import pid_alive
from tests.integration.jobs import ROOT

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
HOSTS = ("127.0.0.2", "127.0.0.3")
LAUNCH_TIMEOUT_S = 180

pytestmark = pytest.mark.skipif(not (os.path.exists(SSHD) and shutil.which("ssh") and shutil.which("ssh-keygen")),
                                reason="needs OpenSSH (make test installs Debian's openssh-server)")

WORKER = textwrap.dedent('''
    import os, sys
    import mxnet as mx

    def main(behaviour):
        slot = int(os.environ["MXHET_SLOT"])
        kv = mx.kv.create("dist_sync")
        kv.init(5, mx.nd.zeros((4,)))
        if behaviour == "fail" and slot == 1:
            # MXNet keeps this worker alive in PS-LITE's exit barrier; the other waits for its push
            raise RuntimeError("slot 1 fails before its push")
        kv.push(5, mx.nd.ones((4,)) * (slot + 1))
        out = mx.nd.zeros((4,))
        kv.pull(5, out=out)
        print("slot %d on %s pulled %s" % (slot, os.environ["DMLC_NODE_HOST"], out.asnumpy().tolist()))
        print("slot %d is rank %d" % (slot, kv.rank))

    if __name__ == "__main__":
        main(sys.argv[1])
''')


def _free_port():
    with socket.socket() as sock:
        sock.bind((HOSTS[0], 0))
        return sock.getsockname()[1]


@pytest.fixture
def sshd(tmp_path, child_pids):
    """A private sshd on HOSTS:port; returns (port, client key path)."""
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    try:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    except PermissionError:
        pytest.skip("sshd needs /run/sshd, which only root can create here")
    port = _free_port()
    config = d / "sshd_config"
    config.write_text("\n".join([
        *("ListenAddress %s:%d" % (host, port) for host in HOSTS),
        "HostKey %s" % (d / "host"),
        "AuthorizedKeysFile %s" % (d / "authorized_keys"),
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",
        "PidFile %s" % (d / "sshd.pid"), "LogLevel ERROR", ""]))
    log = open(d / "sshd.log", "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    child_pids.add(proc.pid)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((HOSTS[1], port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail("sshd did not start: %s" % (d / "sshd.log").read_text())
            time.sleep(0.1)
    yield port, str(d / "client")
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def _processes_with(token):
    """Pids whose environment holds ``token`` (every process of the job gets it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open("/proc/%s/environ" % entry, "rb") as handle:
                    if token.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return [pid for pid in found if pid_alive(pid)]


def _environ_has(pid, *assignments):
    """True if every ``NAME=VALUE`` of ``assignments`` is in process ``pid``'s environment."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            environ = handle.read().split(b"\0")
    except OSError:
        return False
    return all(a.encode() in environ for a in assignments)


def _launch(tmp_path, child_pids, sshd, behaviour, *extra):
    port, key = sshd
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "worker.py").write_text(WORKER)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("\n".join(HOSTS) + "\n")
    token = "mxhet-ssh-test-%s" % uuid.uuid4().hex
    job_file = tmp_path / "job.json"
    argv = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "-n", "2", "-s", "2", "--sync", "sync",
            "-H", str(hostfile), "--ssh-port", str(port), "--ssh-identity", key,
            "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option", "UserKnownHostsFile=/dev/null",
            "--ssh-option", "LogLevel=ERROR", "--env", "MXHET_TEST_TOKEN", "--job-file", str(job_file),
            "--timeout", "120", *extra, "--", sys.executable, "worker.py", behaviour]
    env = dict(os.environ, PYTHONPATH=ROOT, MXHET_TEST_TOKEN=token)
    try:
        proc = subprocess.run(argv, cwd=str(src), env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    finally:
        if job_file.exists():
            record = child_pids.add_job_file(str(job_file))
            child_pids.add(*(p.get("remote_pid") for p in record["processes"]))
    return proc, json.loads(job_file.read_text()), token


@pytest.mark.timeout(300)
def test_real_ssh_job_runs_on_two_loopback_hosts(tmp_path, child_pids, sshd):
    remote_dir = tmp_path / "synced"
    proc, record, token = _launch(tmp_path, child_pids, sshd, "ok", "--sync-dst-dir", str(remote_dir))
    assert proc.returncode == 0, proc.stderr[-4000:]
    # --sync-dst-dir: the working directory was copied there, and the processes ran in the copy.
    assert (remote_dir / "worker.py").read_text() == WORKER
    placed = {(p["role"], p["slot"]): p["host"] for p in record["processes"]}
    assert placed == {("scheduler", None): "127.0.0.2", ("server", 0): "127.0.0.2", ("server", 1): "127.0.0.3",
                      ("state-server", None): "127.0.0.2", ("worker", 0): "127.0.0.2", ("worker", 1): "127.0.0.3"}
    assert record["state_server"].startswith("tcp://127.0.0.2:")
    assert all(p["remote_pid"] for p in record["processes"])
    # Each worker advertised its own host, and the sum went through both hosts' servers.
    assert "[worker 0] slot 0 on 127.0.0.2 pulled [3.0, 3.0, 3.0, 3.0]" in proc.stdout
    assert "[worker 1] slot 1 on 127.0.0.3 pulled [3.0, 3.0, 3.0, 3.0]" in proc.stdout
    # PS-LITE numbers the workers by host in decreasing address order, then by port (docs/launcher.md)
    assert "[worker 0] slot 0 is rank 1" in proc.stdout and "[worker 1] slot 1 is rank 0" in proc.stdout
    assert _processes_with(token) == []


@pytest.mark.timeout(300)
def test_failed_ssh_job_leaves_no_remote_process(tmp_path, child_pids, sshd):
    # Every process hangs (PS-LITE); the launcher must see the stuck worker
    # (its CPU probed on its host over ssh) and end every remote process.
    proc, record, token = _launch(tmp_path, child_pids, sshd, "fail", "--hang-grace", "5")
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "worker 1" in proc.stderr and "printed an uncaught exception" in proc.stderr
    assert [(p["role"], p["slot"]) for p in record["processes"] if p.get("failure")] == [("worker", 1)]
    remote = {p["remote_pid"] for p in record["processes"]}
    assert None not in remote and len(remote) == 6
    # The launcher has returned: no process of the job may be left, remote ones included.
    assert _processes_with(token) == []
    assert not [pid for pid in remote if pid_alive(pid)]


def _start_elastic_localsgd(tmp_path, child_pids, sshd, max_restarts):
    """Start ``localsgd`` over ssh, 3 workers on the two loopback hosts, ``--elastic --max-restarts
    max_restarts``, writing ``tmp_path/out`` and ``tmp_path/job.json``, and wait until training has started.
    Returns ``(proc, err, token)``: the launcher, its open stderr file and the job's process token."""
    port, key = sshd
    out = tmp_path / "out"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("\n".join(HOSTS) + "\n")
    token = "mxhet-ssh-test-%s" % uuid.uuid4().hex
    argv = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "-n", "3", "-s", "1", "--sync", "localsgd",
            "-H", str(hostfile), "--ssh-port", str(port), "--ssh-identity", key,
            "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option", "UserKnownHostsFile=/dev/null",
            "--ssh-option", "LogLevel=ERROR", "--env", "MXHET_TEST_TOKEN", "--job-file", str(tmp_path / "job.json"),
            "--timeout", "300", "--elastic", "--heartbeat-timeout", "3", "--max-restarts", str(max_restarts),
            "--base-iter", "0.05", "--", sys.executable, "-m", "mxhet.train", "--model", "smallcnn",
            "--metrics-out", str(out), "--eval-samples", "200", "--final-eval-samples", "200",
            "--max-rounds", "150", "--local-steps", "2"]
    env = dict(os.environ, PYTHONPATH=ROOT, MXHET_TEST_TOKEN=token)
    err = open(tmp_path / "launcher.err", "w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    child_pids.add(proc.pid)
    deadline = time.monotonic() + 180
    while not (out / "snapshots" / "000000.params").exists():   # training has started
        if proc.poll() is not None or time.monotonic() >= deadline:
            err.close()
            raise AssertionError((tmp_path / "launcher.err").read_text()[-4000:])
        time.sleep(0.2)
    return proc, err, token


# extended (MXHET_EXTENDED_TESTS=1): make test has the new port's unit tests (test_launcher_restart_port.py)
@pytest.mark.extended
@pytest.mark.timeout(400)
def test_a_remote_worker_killed_and_started_again_gets_a_new_port_over_ssh_and_rejoins(tmp_path, child_pids, sshd):
    # localsgd over ssh, 3 workers on the two loopback hosts, --elastic --max-restarts 1. Slot 2 (127.0.0.2,
    # PS-LITE rank 2: not the chief, which is slot 1 on 127.0.0.3) is killed on its "host" by its remote pid;
    # the launcher starts it again over ssh with a command built again with a new PORT.
    out, job_file = tmp_path / "out", tmp_path / "job.json"
    proc, err, token = _start_elastic_localsgd(tmp_path, child_pids, sshd, 1)
    try:
        record = child_pids.add_job_file(str(job_file))
        [victim] = [p for p in record["processes"] if p["role"] == "worker" and p["slot"] == 2]
        assert victim["host"] == "127.0.0.2"
        # the worker on its "host": the job's token, slot 2's variables (only the ssh command carries them)
        [pid] = [p for p in _processes_with(token) if _environ_has(p, "MXHET_SLOT=2", "DMLC_ROLE=worker")]
        child_pids.add(pid)
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        code = proc.wait(timeout=300)
    finally:
        err.close()
        if job_file.exists():
            record = child_pids.add_job_file(str(job_file))
            child_pids.add(*(p.get("remote_pid") for p in record["processes"]))
    stderr = (tmp_path / "launcher.err").read_text()
    assert code == 0, stderr[-4000:]
    record = json.loads(job_file.read_text())
    [restart] = record["worker_restarts"]
    assert restart["slot"] == 2, restart
    [again] = [p for p in record["processes"] if p["role"] == "worker" and p["slot"] == 2]
    assert again["remote_pid"] and again["remote_pid"] != pid
    assert again["port"] != victim["port"]       # its ssh command carried the new PORT
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(3)}
    assert workers[2]["rejoined_at_round"] is not None and workers[2]["rejoined_at_round"] > 0
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    assert _processes_with(token) == []


def _spare_files(token):
    """The order files (``MXHET_SPARE_FILE``) of the job's spare processes on their hosts."""
    files = set()
    for pid in _processes_with(token):
        try:
            with open("/proc/%d/environ" % pid, "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        files.update(a.split(b"=", 1)[1].decode() for a in environ if a.startswith(b"MXHET_SPARE_FILE="))
    return files


@pytest.mark.extended
@pytest.mark.timeout(400)
def test_a_remote_worker_killed_is_taken_over_by_a_spare_on_its_host_over_ssh(tmp_path, child_pids, sshd):
    # localsgd over ssh, 3 workers on the two loopback hosts, --elastic --max-restarts 2: two spares, spare 0
    # on 127.0.0.2 and spare 1 on 127.0.0.3. Slot 2 (127.0.0.2) is killed on its "host"; the launcher writes
    # spare 0's order on 127.0.0.2 over ssh, spare 0 trains as slot 2, spare 1 is released at the end.
    out, job_file = tmp_path / "out", tmp_path / "job.json"
    proc, err, token = _start_elastic_localsgd(tmp_path, child_pids, sshd, 2)
    try:
        record = child_pids.add_job_file(str(job_file))
        child_pids.add(*(p.get("remote_pid") for p in record["processes"]))
        spares = [p for p in record["processes"] if p["role"] == "spare"]
        assert [(p["slot"], p["host"]) for p in spares] == [(0, HOSTS[0]), (1, HOSTS[1])]
        orders = _spare_files(token)   # on the spares' hosts, named in their ssh commands
        assert len(orders) == 2 and not any(os.path.exists(f) for f in orders)
        [victim] = [p for p in record["processes"] if p["role"] == "worker" and p["slot"] == 2]
        assert victim["host"] == HOSTS[0]
        [pid] = [p for p in _processes_with(token) if _environ_has(p, "MXHET_SLOT=2", "DMLC_ROLE=worker")]
        child_pids.add(pid)
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        code = proc.wait(timeout=300)
    finally:
        err.close()
        if job_file.exists():
            record = child_pids.add_job_file(str(job_file))
            child_pids.add(*(p.get("remote_pid") for p in record["processes"]))
    stderr = (tmp_path / "launcher.err").read_text()
    assert code == 0, stderr[-4000:]
    assert "spare 0 takes over its slot" in stderr, stderr[-3000:]
    record = json.loads(job_file.read_text())
    [restart] = record["worker_restarts"]
    assert (restart["slot"], restart["spare"]) == (2, 0), restart
    assert restart["ended"] == "exit code 0", restart
    # spare 0 now carries slot 2 on its own host; spare 1, never needed, was released and exited 0 by itself
    ends = sorted((p["role"], p["slot"], p["host"], p["exit_code"] == 0) for p in record["processes"]
                  if p["role"] in ("worker", "spare"))
    assert ends == sorted([("worker", 0, HOSTS[0], True), ("worker", 1, HOSTS[1], True),
                           ("worker", 2, HOSTS[0], False), ("worker", 2, HOSTS[0], True),
                           ("spare", 1, HOSTS[1], True)]), ends
    workers = {s: json.loads((out / ("worker-%d.json" % s)).read_text()) for s in range(3)}
    joined = workers[2]["rejoined_at_round"]
    assert joined is not None and joined > 0
    digests = {w["final_model_sha256"] for w in workers.values()}
    assert len(digests) == 1 and "" not in digests, digests
    summary = json.loads((out / "summary.json").read_text())   # the chief's: slot 1, on 127.0.0.3
    assert set(summary["round_members"][joined:]) == {3}, summary["round_members"]
    events = summary["elastic"]["events"]
    assert [(e["event"], e["slot"], e["rank"]) for e in events] == [("leave", 2, 2), ("join", 2, 2)], events
    # a remote chief reads neither the launcher's exits nor its takeovers (both local to the launcher)
    assert events[0]["cause"] == "heartbeat timeout" and "spare" not in events[1], events
    assert not any(os.path.exists(f) or os.path.exists(f + ".tmp") for f in orders)   # each spare removed its order
    assert _processes_with(token) == []
