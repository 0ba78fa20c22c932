"""The supervisor's state machine (mxhet.launcher.watch) on made-up observations,
and the launcher's MXNet drop-in options and API in plan form (no process starts)."""
import pytest

from mxhet import launcher
from mxhet.errors import ConfigError
from mxhet.launcher.watch import CONTINUE, JobWatch, Observation

from tests.unit.test_launcher_args import hostfile, plan_of  # noqa: F401  (fixture)


def obs(name, role, code=None, last_output=0.0, exception=False, cpu=None, progress=None):
    return Observation(name=name, role=role, returncode=code, last_output=last_output, exception=exception,
                       cpu_s=cpu, progress=progress)


def job(*workers, services=(("scheduler", None), ("server 0", None), ("state-server", None))):
    roles = {"scheduler": "scheduler", "server 0": "server", "state-server": "state-server"}
    return ([obs(name, roles[name], code) for name, code in services]
            + [w if isinstance(w, Observation) else obs("worker %d" % i, "worker", w) for i, w in enumerate(workers)])


def watch(**kw):
    settings = dict(server_grace=10, worker_grace=5, hang_grace=10, orphan_grace=30, state_server_restarts=1)
    settings.update(kw)
    return JobWatch(**settings)


def test_success_drains_then_finishes():
    w = watch()
    assert w.decide(job(None, None), 0).action == "continue"
    d = w.decide(job(0, 0), 1)
    assert d.action == "continue" and "all 2 workers finished" in d.note and w.phase == "draining"
    d = w.decide(job(0, 0, services=(("scheduler", 0), ("server 0", 0), ("state-server", 0))), 2)
    assert (d.action, d.exit_code) == ("finish", 0)


def test_servers_still_running_after_the_grace_end_with_success():
    w = watch()
    w.decide(job(0, 0), 0)
    assert w.decide(job(0, 0), 9).action == "continue"
    d = w.decide(job(0, 0), 10)
    assert (d.action, d.exit_code) == ("finish", 0) and "scheduler, server 0" in d.note


def test_a_failed_process_fails_the_job_and_is_named():
    d = watch().decide(job(None, 3), 0)
    assert (d.action, d.exit_code) == ("finish", 1)
    assert d.failures == ((4, "exited with code 3"),)


def test_state_server_is_restarted_then_blamed():
    w = watch(state_server_restarts=1)
    dead = job(None, None, services=(("scheduler", None), ("server 0", None), ("state-server", -9)))
    d = w.decide(dead, 0)
    assert (d.action, d.index) == ("restart", 2)
    d = w.decide(dead, 1)
    assert d.action == "finish" and d.failures[0][0] == 2


def test_a_service_that_stops_early_gets_the_workers_grace():
    w = watch(worker_grace=5)
    early = job(None, None, services=(("scheduler", 0), ("server 0", None), ("state-server", None)))
    assert w.decide(early, 0).action == "continue"
    d = w.decide(early, 5)
    assert d.action == "finish" and "while workers were still running (worker 0, worker 1)" in d.failures[0][1]


def test_a_worker_still_using_cpu_after_the_scheduler_stopped_is_tearing_down_not_hung():
    """A worker past PS-LITE's final barrier may spend seconds tearing MXNet down on a loaded machine: the
    grace counts from its last CPU use, up to the cap (CI failed 5 jobs that way with a flat 5 s)."""
    from mxhet.launcher.watch import EARLY_EXIT_BUSY_CAP_S
    w = watch(worker_grace=5)

    def poll(now, cpu):
        return w.decide(job(obs("worker 0", "worker", None, cpu=cpu), obs("worker 1", "worker", 0),
                            services=(("scheduler", 0), ("server 0", None), ("state-server", None))), now)
    assert poll(0, 1.0).action == "continue"
    assert poll(6, 2.0).action == "continue"        # busy: 1 CPU s since the last poll
    assert poll(10, 2.0).action == "continue"       # idle since 6 s only
    d = poll(11, 2.0)
    assert d.action == "finish" and d.failures == ((0, "exited with code 0 while workers were still running "
                                                       "(worker 0)"),)
    busy = watch(worker_grace=5)
    cap = int(EARLY_EXIT_BUSY_CAP_S)
    for now in range(0, cap, 2):
        assert busy.decide(job(obs("worker 0", "worker", None, cpu=float(now)), services=(
            ("scheduler", 0), ("server 0", None), ("state-server", None))), now).action == "continue"
    d = busy.decide(job(obs("worker 0", "worker", None, cpu=float(cap)), services=(
        ("scheduler", 0), ("server 0", None), ("state-server", None))), cap)
    assert d.action == "finish" and "still running (worker 0)" in d.failures[0][1]


def test_a_worker_stuck_after_an_uncaught_exception_fails_the_job():
    w = watch(hang_grace=10)

    def poll(now, cpu=5.0):
        return w.decide(job(None, obs("worker 1", "worker", None, 2.0, True, cpu)), now)
    assert poll(3).action == "continue"
    assert poll(11).action == "continue"            # idle only since 3 s
    d = poll(13)
    assert d.action == "finish" and d.failures[0][0] == 4 and "uncaught exception" in d.failures[0][1]


def test_an_exception_with_cpu_still_in_use_is_not_a_hang():
    w = watch(hang_grace=10)
    for now in range(0, 40, 2):  # it keeps computing (CPU grows): not stuck
        d = w.decide(job(None, obs("worker 1", "worker", None, 0.0, True, cpu=float(now))), now)
        assert d.action == "continue"


def test_hang_rule_goes_by_output_alone_when_cpu_is_unknown_and_can_be_off():
    d = watch(hang_grace=10).decide(job(None, obs("worker 1", "worker", None, 0.0, True, None)), 10)
    assert d.action == "finish"
    d = watch(hang_grace=0).decide(job(None, obs("worker 1", "worker", None, 0.0, True, None)), 100)
    assert d.action == "continue"


def test_an_idle_orphaned_worker_fails_the_job_a_busy_one_does_not():
    w = watch(orphan_grace=30)
    assert w.decide(job(0, obs("worker 1", "worker", None, cpu=1.0)), 0).action == "continue"
    assert w.decide(job(0, obs("worker 1", "worker", None, cpu=1.0)), 29).action == "continue"
    d = w.decide(job(0, obs("worker 1", "worker", None, cpu=1.0)), 30)
    assert d.action == "finish" and "every other worker exited" in d.failures[0][1]
    busy = watch(orphan_grace=30)
    for now in range(0, 100, 5):  # rank 0 evaluating after the others left: CPU in use
        assert busy.decide(job(obs("worker 0", "worker", None, cpu=float(now)), 0), now).action == "continue"


def test_a_worker_idle_before_its_first_step_fails_the_job_after_the_start_grace():
    # its Trainer exists, no step returned, no CPU: e.g. a second dist kvstore in PS-LITE's start-up barrier
    w = watch(start_grace=120)

    def poll(now, cpu=3.0, progress="trainer"):
        return w.decide(job(None, obs("worker 1", "worker", None, 1.0, False, cpu, progress)), now)

    assert poll(0, cpu=1.0).action == "continue"      # loading data, building the model: CPU in use
    assert poll(10).action == "continue"              # idle from t = 10 on
    assert poll(129).action == "continue"
    d = poll(130)
    assert (d.action, d.exit_code) == ("finish", 1) and d.failures[0][0] == 4
    assert "has not finished a step, and has used no CPU for 120 s" in d.failures[0][1]


@pytest.mark.parametrize("progress", ["batch", None])
def test_an_idle_worker_that_finished_a_step_or_wrote_no_note_is_not_stalled(progress):
    # "batch": waiting for a slow peer's evaluation; None: a plain MXNet program (or a remote worker)
    w = watch(start_grace=120)
    for now in range(0, 1000, 50):
        d = w.decide(job(None, obs("worker 1", "worker", None, 0.0, False, 3.0, progress)), now)
        assert d.action == "continue", d


def test_the_start_rule_needs_the_cpu_and_can_be_off():
    unknown_cpu = watch(start_grace=120)
    off = watch(start_grace=0)
    for now in range(0, 1000, 50):
        assert unknown_cpu.decide(job(None, obs("worker 1", "worker", None, progress="trainer")), now) == CONTINUE
        assert off.decide(job(None, obs("worker 1", "worker", None, cpu=3.0, progress="trainer")), now) == CONTINUE


def test_watch_refuses_bad_graces():
    with pytest.raises(ValueError, match="hang_grace"):
        watch(hang_grace=-1)
    with pytest.raises(ValueError, match="start_grace"):
        watch(start_grace=-1)


# ---------------------------------------------------------------- MXNet drop-in options

def test_env_worker_and_env_server_set_variables(monkeypatch):
    plan = plan_of("-n", "2", "-s", "1", "--sync", "sync", "--env-server", "OMP_NUM_THREADS:3,A:x:y",
                   "--env-worker", "B:1", "--env-worker", "OMP_NUM_THREADS:5")
    server = plan.by_role("server")[0]
    assert server.env["OMP_NUM_THREADS"] == "3" and server.env["A"] == "x:y" and "B" not in server.env
    assert "A" not in plan.by_role("scheduler")[0].env  # MXNet: --env-server is for the servers
    for worker in plan.by_role("worker"):
        assert worker.env["B"] == "1" and worker.env["OMP_NUM_THREADS"] == "5" and "A" not in worker.env
        assert worker.env["DMLC_ROLE"] == "worker"  # the launcher's own variables cannot be overridden


def test_server_omp_threads_sets_scheduler_and_servers():
    plan = plan_of("-n", "2", "-s", "2", "--sync", "sync", "--server-omp-threads", "4")
    assert [p.env["OMP_NUM_THREADS"] for p in plan.processes if p.role in ("scheduler", "server")] == ["4"] * 3


def test_env_passes_named_variables_over_ssh(monkeypatch, hostfile):  # noqa: F811
    monkeypatch.setenv("MY_VAR", "v 1")
    args = launcher.parse_args(["-n", "2", "--sync", "sync", "-H", hostfile, "--env", "MY_VAR", "--", "x"])
    ports = iter(range(9000, 9010))
    plan = launcher.build_plan(args, free_port=lambda host: next(ports), cpu_count=4,
                               environ={"MY_VAR": "v 1", "OMP_NUM_THREADS": "2", "HOME": "/h"}, cwd="/w")
    for spec in plan.processes:
        assert spec.env["MY_VAR"] == "v 1"
        assert "HOME" not in spec.env
    assert plan.by_role("scheduler")[0].env["OMP_NUM_THREADS"] == "2"  # dmlc passes it when set


@pytest.mark.parametrize("argv, named", [
    (["--env", "NOT_SET_ANYWHERE_42"], "NOT_SET_ANYWHERE_42"),
    (["--env", "A:1"], "--env-worker"),
    (["--env-server", "novalue"], "novalue"),
    (["--env-worker", ":3"], ":3"),
    (["--server-omp-threads", "0"], "--server-omp-threads"),
    (["--hang-grace", "-1"], "--hang-grace"),
    (["--start-grace", "-1"], "--start-grace"),
    (["--ssh-option", "nokey"], "nokey"),
    (["--ssh-identity", "/no/such/key"], "/no/such/key"),
])
def test_bad_drop_in_options_are_named(argv, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        launcher.plan(["-n", "2", "--sync", "sync", *argv, "--", "x"])


def test_ssh_options_and_sync_dst_dir(hostfile, tmp_path):  # noqa: F811
    key = tmp_path / "id"
    key.write_text("k")
    plan = plan_of("-n", "2", "-s", "1", "--sync", "sync", "-H", hostfile, "--ssh-port", "2222",
                   "--ssh-identity", str(key), "--ssh-option", "StrictHostKeyChecking=no",
                   "--sync-dst-dir", "/remote/job", cwd="/here")
    worker = plan.by_role("worker")[1]
    assert worker.ssh == ("ssh", "-o", "BatchMode=yes", "-o", "Port=2222", "-o", "IdentityFile=%s" % key,
                          "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no")
    assert worker.argv[:len(worker.ssh)] == worker.ssh and worker.argv[len(worker.ssh)] == "node-b"
    assert worker.argv[-1].startswith("cd /remote/job && ")
    assert [cmd[-1] for cmd in plan.prepare] == ["node-a:/remote/job", "node-b:/remote/job"]
    assert plan.prepare[0][:2] == ("rsync", "-az") and plan.prepare[0][4] == "/here/"


def test_api_plan_is_data_and_carries_the_run_settings(tmp_path):
    plan = launcher.plan(["-n", "2", "-s", "1", "--sync", "sync", "--timeout", "30", "--no-auth",
                          "--job-file", str(tmp_path / "job.json"), "--hang-grace", "4", "--start-grace", "7",
                          "--", "python", "t.py"])
    assert plan.timeout == 30 and plan.job_file == str(tmp_path / "job.json") and plan.hang_grace == 4
    assert plan.start_grace == 7
    assert [p.name for p in plan.processes] == ["scheduler", "server 0", "state-server", "worker 0", "worker 1"]
    assert plan.scratch == ()
    with pytest.raises(ConfigError, match="bsp"):
        launcher.plan(["-n", "2", "--sync", "bsp", "--", "x"])


def test_remote_cpu_probe_reads_a_process_group_like_the_local_one():
    """The command the launcher runs over ssh, run here by a POSIX shell."""
    import subprocess
    import sys

    from mxhet.launcher.supervisor import parse_remote_cpu, process_group_cpu, remote_cpu_command
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        out = subprocess.run(["sh", "-c", remote_cpu_command(child.pid)], capture_output=True, text=True,
                             timeout=30).stdout
        remote, local = parse_remote_cpu(out), process_group_cpu(child.pid)
        assert remote is not None and local is not None
        assert abs(remote - local) < 0.5  # the same group, read a moment apart
    finally:
        child.kill()
        child.wait()
    assert parse_remote_cpu("100\n250\n") == 2.5
    assert parse_remote_cpu("garbage") is None
