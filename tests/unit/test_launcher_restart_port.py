"""A worker started again (``--max-restarts``) listens on a new PS-LITE port: at its slot's old port,
PS-LITE's other nodes would not connect the dead worker id it is given to it when that id was another
slot's (ps-lite ``connected_nodes_`` is keyed by host:port), and it would hang in its first request
(docs/operations.md, two workers killed at once). A remote worker's environment is in its ssh command,
which is built again with the new port."""
import shlex

from mxhet import launcher
from mxhet.launcher.jobplan import REMOTE_PID_MARK, ProcessSpec, with_env
from mxhet.launcher.supervisor import _fresh_port


def _worker(remote=False):
    return ProcessSpec("worker", 2, "127.0.0.1", ("python", "train.py"),
                       {"PORT": "40000", "DMLC_ROLE": "worker"}, remote=remote)


def test_a_local_worker_started_again_gets_a_free_port_other_than_its_slots():
    env = _fresh_port(_worker())
    assert set(env) == {"PORT"} and env["PORT"] != "40000" and int(env["PORT"]) > 0
    spec = with_env(_worker(), **env)
    assert spec.env["PORT"] == env["PORT"] and spec.argv == ("python", "train.py")


def test_a_process_without_a_port_keeps_its_environment():
    assert _fresh_port(ProcessSpec("state-server", None, "127.0.0.1", ("python",), {})) == {}


def _remote_command(spec):
    """The remote shell command of an ssh spec, as (cwd, {K: V}, argv) the host's shell would see."""
    words = shlex.split(spec.argv[-1])
    assert words[:5] == ["cd", spec.cwd, "&&", "echo", REMOTE_PID_MARK + "$$"] and words[7:9] == ["exec", "env"]
    assignments = [w for w in words[9:] if "=" in w and w.split("=")[0].isupper()]
    return words[1], dict(w.split("=", 1) for w in assignments), words[9 + len(assignments):]


def test_a_remote_worker_started_again_gets_a_new_port_in_its_ssh_command(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.7\n10.0.0.8\n")
    # --no-auth: an ssh job's keys would be made in the working directory
    plan = launcher.plan(["-n", "2", "-s", "1", "--sync", "esync", "-H", str(hosts), "--no-auth", "--elastic",
                          "--max-restarts", "1", "--ssh-port", "2222", "--", "python", "train.py", "--x", "a b"])
    worker = plan.by_role("worker")[1]
    assert worker.remote and worker.host == "10.0.0.8"
    cwd, env, argv = _remote_command(worker)
    assert env["PORT"] == worker.env["PORT"] and argv == ["python", "train.py", "--x", "a b"]
    fresh = _fresh_port(worker)
    assert set(fresh) == {"PORT"} and fresh["PORT"] != worker.env["PORT"]
    again = with_env(worker, **fresh)
    # the same ssh client, host, directory and program; the same environment but PORT
    assert again.argv[:-1] == worker.argv[:-1] and again.argv[-2] == "10.0.0.8"
    cwd2, env2, argv2 = _remote_command(again)
    assert (cwd2, argv2) == (cwd, argv)
    assert env2 == dict(env, PORT=fresh["PORT"]) and again.env == env2
    assert (again.ssh, again.host, again.cwd, again.command) == (worker.ssh, worker.host, worker.cwd, worker.command)


# A remote worker's first life notes the PORT it was given and dies by SIGKILL; its second notes it and ends.
_REMOTE_WORKER = """
import os, signal, sys, time
with open(sys.argv[1], "a") as f:
    f.write(os.environ["PORT"] + "\\n")
if len(open(sys.argv[1]).read().split()) == 1:
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_supervisor_starts_a_remote_worker_again_with_a_new_port_in_its_ssh_command(tmp_path):
    """Fake processes (no MXNet, no sshd): the "ssh client" is a shell that runs the remote command here,
    so the replacement sees exactly the environment its ssh command carries."""
    import io
    import json
    import sys
    from mxhet.launcher.jobplan import Plan, remote_command
    from mxhet.launcher.supervisor import run_plan
    idle = (sys.executable, "-c", "import time; time.sleep(300)")
    local = lambda role, slot, argv: ProcessSpec(role=role, slot=slot, host="127.0.0.1", argv=argv, env={})
    ssh = ("sh", "-c", 'eval "$2"', "fake-ssh")   # $1: the host, $2: the remote command
    ports = tmp_path / "ports"
    command = (sys.executable, "-c", _REMOTE_WORKER, str(ports))
    env = {"PORT": "40001", "DMLC_ROLE": "worker"}
    remote = ProcessSpec(role="worker", slot=1, host="10.0.0.8", env=env, remote=True, ssh=ssh, cwd=str(tmp_path),
                         command=command, argv=(*ssh, "10.0.0.8", remote_command(str(tmp_path), env, command)))
    plan = Plan(mode="esync", kvstore="dist_async", launcher="ssh", root_uri="127.0.0.1", root_port=1,
                state_server="", elastic=True, worker_restarts=1, worker_restart_delay=0.0, processes=(
                    local("scheduler", None, idle), local("server", 0, idle), local("state-server", None, idle),
                    local("worker", 0, (sys.executable, "-c", "import time; time.sleep(3)")), remote))
    out = io.StringIO()
    job_file = tmp_path / "job.json"
    code = run_plan(plan, timeout=60, job_file=str(job_file), server_grace=0.5, kill_grace=1.0,
                    poll_interval=0.05, orphan_grace=30.0, start_grace=120.0, late_grace=0.5, out=out)
    assert code == 0, out.getvalue()
    first, second = ports.read_text().split()
    assert first == "40001" and second != first     # the replacement listens on a port of its own
    [restart] = json.loads(job_file.read_text())["worker_restarts"]
    assert restart["slot"] == 1 and "SIGKILL" in restart["cause"]
    [entry] = [p for p in json.loads(job_file.read_text())["processes"] if p["role"] == "worker" and p["slot"] == 1]
    assert entry["port"] == int(second)
