"""Spare workers over ``--launcher ssh`` (``--max-restarts`` above 1): a remote spare reads its order from a
file on its own host (``MXHET_SPARE_FILE``, part of its ssh command), which the launcher writes there over
ssh, atomically; an order that cannot be delivered fails the job (docs/operations.md). The supervisor runs
with a stand-in ssh client: a shell that runs the remote command here."""
import io
import json
import os
import shlex
import subprocess
import sys

from mxhet import launcher
from mxhet.launcher.jobplan import REMOTE_PID_MARK, REMOTE_SPARE_DIR, Plan, ProcessSpec, remote_command
from mxhet.launcher.supervisor import Supervisor, run_plan
from mxhet.spares import read_order, remote_write_command

FAKE_SSH = ("sh", "-c", 'eval "$2"', "fake-ssh")   # $1: the host, $2: the remote command


def _remote_env(spec):
    """The environment a remote spec's ssh command sets on its host."""
    words = shlex.split(spec.argv[-1])
    assert words[:5] == ["cd", spec.cwd, "&&", "echo", REMOTE_PID_MARK + "$$"] and words[7:9] == ["exec", "env"]
    return dict(w.split("=", 1) for w in words[9:] if "=" in w and w.split("=")[0].isupper())


def _ssh_plan(tmp_path, *extra):
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.7\n10.0.0.8\n")
    # --no-auth: an ssh job's keys would be made in the working directory
    return launcher.plan(["-n", "3", "-s", "1", "--sync", "localsgd", "-H", str(hosts), "--no-auth", "--elastic",
                          "--max-restarts", "2", *extra, "--", "python", "train.py"])


def test_ssh_plans_remote_spares_whose_order_file_is_on_their_host_in_their_ssh_command(tmp_path):
    plan = _ssh_plan(tmp_path)
    spares, workers = plan.by_role("spare"), plan.by_role("worker")
    assert [s.host for s in spares] == ["10.0.0.7", "10.0.0.8"] and all(s.remote for s in spares)
    paths = [s.env["MXHET_SPARE_FILE"] for s in spares]
    assert len(set(paths)) == 2 and all(os.path.dirname(p) == REMOTE_SPARE_DIR for p in paths)
    for spare in spares:
        remote_env = _remote_env(spare)
        assert remote_env == spare.env and remote_env["DMLC_ROLE"] == "worker"
        assert int(remote_env["PORT"]) > max(int(w.env["PORT"]) for w in workers)
        assert spare.argv[len(spare.ssh)] == spare.host
    assert all("MXHET_SPARE_FILE" not in w.env for w in workers)
    assert all(p.env["DMLC_NUM_WORKER"] == "5" for p in workers + spares)
    # another job's spares read other files (a host may run two jobs, or another user's)
    assert _ssh_plan(tmp_path).by_role("spare")[0].env["MXHET_SPARE_FILE"] != paths[0]


def test_the_remote_write_command_puts_the_order_in_place_by_a_rename(tmp_path):
    path = str(tmp_path / "spare 0")   # quoted for the remote shell
    done = subprocess.run(["sh", "-c", remote_write_command(path)], input='{"over": true}', text=True)
    assert done.returncode == 0 and read_order(path) == {"over": True}
    assert sorted(os.listdir(tmp_path)) == ["spare 0"]   # the temporary file was renamed, not copied
    done = subprocess.run(["sh", "-c", remote_write_command(str(tmp_path / "no-dir" / "spare-1"))],
                          input="{}", text=True, stderr=subprocess.DEVNULL)
    assert done.returncode != 0


# A stand-in spare: waits for its order (mxhet.spares, as a real spare does), notes it and the env it
# runs with, and exits 0; a stand-in worker that dies by SIGKILL at once; one that works 4 s.
_SPARE = """
import json, os, sys
from mxhet.spares import wait_for_order
order = wait_for_order(os.environ["MXHET_SPARE_FILE"], poll_s=0.05)
with open(sys.argv[1], "w") as f:
    json.dump({"order": order, "file_left": os.path.exists(os.environ["MXHET_SPARE_FILE"])}, f)
"""
_DIES = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
_WORKS = "import time; time.sleep(4)"


def _remote(role, slot, host, cwd, code, env, *args):
    command = (sys.executable, "-c", code, *args)
    return ProcessSpec(role=role, slot=slot, host=host, env=env, remote=True, ssh=FAKE_SSH, cwd=cwd,
                       command=command, argv=(*FAKE_SSH, host, remote_command(cwd, env, command)))


def _spares_plan(tmp_path, order_dir):
    """Services here; workers 0 and 1 and two spares "on" hosts a and b, worker 1 (host b) dies at once."""
    idle = (sys.executable, "-c", "import time; time.sleep(300)")
    local = lambda role, slot: ProcessSpec(role=role, slot=slot, host="127.0.0.1", argv=idle, env={})
    cwd = str(tmp_path)
    worker = {"DMLC_ROLE": "worker", "MXHET_SPARE_RANKS": "2,3"}
    processes = (local("scheduler", None), local("server", 0), local("state-server", None),
                 _remote("worker", 0, "a", cwd, _WORKS, dict(worker, MXHET_SLOT="0", PORT="40000")),
                 _remote("worker", 1, "b", cwd, _DIES, dict(worker, MXHET_SLOT="1", PORT="40001")))
    for j, host in enumerate(("a", "b")):
        env = dict(worker, MXHET_SLOT="0", PORT=str(40002 + j), MXHET_SPARE_FILE=os.path.join(order_dir, "o%d" % j))
        processes += (_remote("spare", j, host, cwd, _SPARE, env, str(tmp_path / ("spare-%d.json" % j))),)
    return Plan(mode="localsgd", kvstore="dist_async", launcher="ssh", root_uri="127.0.0.1", root_port=1,
                state_server="", elastic=True, worker_restarts=2, worker_restart_delay=0.0, slot_ranks=(0, 1),
                processes=processes)


def _run(plan, tmp_path):
    out = io.StringIO()
    job_file = tmp_path / "job.json"
    code = run_plan(plan, timeout=60, job_file=str(job_file), server_grace=0.5, kill_grace=1.0, poll_interval=0.05,
                    orphan_grace=30.0, start_grace=120.0, late_grace=0.5, out=out)
    return code, out.getvalue(), json.loads(job_file.read_text())


def test_a_remote_spare_on_the_dead_workers_host_gets_its_order_over_ssh_and_the_idle_one_is_released(tmp_path):
    orders = tmp_path / "remote-tmp"
    orders.mkdir()
    code, out, job = _run(_spares_plan(tmp_path, str(orders)), tmp_path)
    assert code == 0, out
    taken = json.loads((tmp_path / "spare-1.json").read_text())   # spare 1 is on host b, worker 1's
    assert taken["order"]["slot"] == 1 and taken["order"]["rank"] == 1
    # the slot's environment, less its PS-LITE identity (the spare keeps its own)
    assert taken["order"]["env"]["MXHET_SLOT"] == "1" and "PORT" not in taken["order"]["env"]
    assert not any(k.startswith("DMLC_") for k in taken["order"]["env"])
    assert taken["file_left"] is False
    released = json.loads((tmp_path / "spare-0.json").read_text())
    assert released == {"order": {"over": True}, "file_left": False}
    assert os.listdir(orders) == []   # nothing left on the "hosts"
    [restart] = job["worker_restarts"]
    assert (restart["slot"], restart["spare"]) == (1, 1) and "SIGKILL" in restart["cause"]
    assert "cannot" not in out


def test_an_order_that_cannot_be_delivered_over_ssh_fails_the_job_naming_the_spare(tmp_path):
    code, out, job = _run(_spares_plan(tmp_path, str(tmp_path / "missing")), tmp_path)
    assert code == 1
    assert "spare 1" in out and "could not be handed worker 1's slot" in out
    assert "missing/o1" in out and job["status"] == "failed"


def test_an_order_write_that_hangs_is_given_up_after_the_timeout(tmp_path):
    hung = ("sh", "-c", "sleep 30", "fake-ssh")
    spec = ProcessSpec(role="spare", slot=0, host="h", argv=(), env={"MXHET_SPARE_FILE": str(tmp_path / "o")},
                       remote=True, ssh=hung)
    supervisor = Supervisor(Plan(mode="localsgd", kvstore="dist_async", launcher="ssh", root_uri="h", root_port=1,
                                 state_server="", processes=()))
    why = supervisor._deliver_order(spec, {"over": True}, timeout=0.5)
    assert why == "writing %s on h over ssh took over 0.5 s" % (tmp_path / "o")
    assert not (tmp_path / "o").exists()
