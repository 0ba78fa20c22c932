"""The launcher's command line, validation and process plan (no process is started)."""
import itertools
import shlex
import sys

import pytest

from mxhet import launcher
from mxhet.config import WorkerConfig, worker_config

CMD = ["python", "train.py", "--lr", "0.1"]


def parse(*options, command=CMD):
    return launcher.parse_args([*options, "--", *command])


def plan_of(*options, command=CMD, cpu_count=8, environ=None, cwd="/job dir"):
    ports = itertools.count(9000)   # root 9000, State Server 9001, then the workers' (PORT)
    return launcher.build_plan(parse(*options, command=command), free_port=lambda host: next(ports),
                               cpu_count=cpu_count, environ={} if environ is None else environ, cwd=cwd)


def usage_error(capsys, *argv):
    """Run main(argv), expect exit code 2, return its stderr."""
    assert launcher.main(list(argv)) == 2
    return capsys.readouterr().err


@pytest.fixture
def hostfile(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the cluster\nnode-a\n\n  node-b   # second\n# end\n")
    return str(path)


# ----------------------------------------------------------------- validation

@pytest.mark.parametrize("argv, named", [
    (["-n", "2", "--sync", "bsp", "--", "x"], "bsp"),
    (["-n", "0", "--sync", "sync", "--", "x"], "got 0"),
    (["-n", "-3", "--sync", "sync", "--", "x"], "got -3"),
    (["-n", "2", "-s", "0", "--sync", "sync", "--", "x"], "--num-servers"),
    (["-n", "2", "--sync", "sync", "--contexts", "cpu,cpu,cpu", "--", "x"], "cpu,cpu,cpu"),
    (["-n", "2", "--sync", "sync", "--contexts", "cpu,tpu(0)", "--", "x"], "tpu(0)"),
    (["-n", "2", "--sync", "sync", "--contexts", "gpu", "--", "x"], "'gpu'"),
    (["-n", "3", "--sync", "sync", "--slowdown", "1,20", "--", "x"], "1,20"),
    (["-n", "2", "--sync", "sync", "--slowdown", "1,0.5", "--", "x"], "0.5"),
    (["-n", "2", "--sync", "sync", "--slowdown", "fast", "--", "x"], "fast"),
    (["-n", "2", "--sync", "sync"], "missing the worker command"),
    (["-n", "2", "--sync", "sync", "--"], "missing the worker command"),
    (["-n", "2", "--sync", "local", "--", "x"], "-n 2"),
    (["-n", "2", "--sync", "sync", "--omp-threads", "0", "--", "x"], "--omp-threads"),
    (["-n", "2", "--sync", "sync", "--timeout", "-1", "--", "x"], "-1"),
    (["-n", "2", "--sync", "esync", "--epsilon", "nan", "--", "x"], "--epsilon"),
    (["-n", "2", "--sync", "esync", "--state-server-port", "70000", "--", "x"], "70000"),
    (["-n", "2", "--sync", "esync", "--state-server-port", "6000", "--root-port", "6000", "--", "x"], "6000"),
    (["-n", "2", "--sync", "sync", "--launcher", "ssh", "--", "x"], "--hostfile"),
    (["-n", "2", "--sync", "sync", "--job-file", "/nonexistent-dir/job.json", "--", "x"], "nonexistent-dir"),
    (["-n", "2", "--sync", "sync", "--launcher", "mpi", "--", "x"], "mpi"),
])
def test_bad_options_exit_2_naming_the_value(capsys, argv, named):
    err = usage_error(capsys, *argv)
    assert named in err
    assert "error" in err


def test_missing_hostfile_is_named(capsys, tmp_path):
    missing = str(tmp_path / "no-such-hosts")
    assert missing in usage_error(capsys, "-n", "2", "--sync", "sync", "-H", missing, "--", "x")


def test_hostfile_without_hosts(capsys, tmp_path):
    empty = tmp_path / "hosts"
    empty.write_text("# only a comment\n\n   \n")
    assert "lists no host" in usage_error(capsys, "-n", "2", "--sync", "sync", "-H", str(empty), "--", "x")


def test_hostfile_line_with_two_words(capsys, tmp_path):
    bad = tmp_path / "hosts"
    bad.write_text("node-a node-b\n")
    assert "line 1" in usage_error(capsys, "-n", "2", "--sync", "sync", "-H", str(bad), "--", "x")


def test_hostfile_with_local_launcher_refused(capsys, hostfile):
    err = usage_error(capsys, "-n", "2", "--sync", "sync", "--launcher", "local", "-H", hostfile, "--", "x")
    assert "needs --launcher ssh" in err


def test_help_returns_0(capsys):
    assert launcher.main(["--help"]) == 0
    assert "--slowdown" in capsys.readouterr().out


# -------------------------------------------------------------------- parsing

def test_command_after_separator_keeps_its_own_options():
    args = parse("-n", "2", "--sync", "sync", command=["python", "train.py", "-n", "5", "--", "--sync"])
    assert args.num_workers == 2
    assert args.sync == "sync"
    assert args.command == ["python", "train.py", "-n", "5", "--", "--sync"]


def test_command_without_separator():
    args = launcher.parse_args(["-n", "1", "--sync", "sync", "python", "train.py", "--epochs", "3"])
    assert args.command == ["python", "train.py", "--epochs", "3"]


def test_defaults():
    args = parse("-n", "3", "--sync", "sync")
    assert args.num_servers == 3          # like MXNet's launcher: one server per worker
    assert args.contexts == ["cpu"] * 3
    assert args.slowdowns == [1.0] * 3
    assert args.launcher == "local"
    assert args.python == sys.executable
    assert args.needs_state_server and args.kvstore_type == "dist_sync"  # every distributed job has one
    assert parse("-n", "2").sync == "esync"


def test_single_values_are_broadcast():
    args = parse("-n", "3", "--sync", "sync", "--contexts", "gpu(1)", "--slowdown", "2.5")
    assert args.contexts == ["gpu(1)"] * 3
    assert args.slowdowns == [2.5] * 3


def test_lists_are_per_worker():
    args = parse("-n", "3", "--sync", "sync", "--contexts", "cpu, gpu(0),gpu(1)", "--slowdown", "1,1,20")
    assert args.contexts == ["cpu", "gpu(0)", "gpu(1)"]
    assert args.slowdowns == [1.0, 1.0, 20.0]


def test_hostfile_selects_ssh(hostfile):
    args = parse("-n", "2", "--sync", "sync", "-H", hostfile)
    assert args.launcher == "ssh"
    assert args.hosts == ["node-a", "node-b"]


# ------------------------------------------------------------------- the plan

def test_dist_plan_roles_and_order():
    plan = plan_of("-n", "2", "-s", "2", "--sync", "sync")
    assert [p.name for p in plan.processes] == ["scheduler", "server 0", "server 1", "state-server",
                                                "worker 0", "worker 1"]
    assert plan.kvstore == "dist_sync" and plan.root_port == 9000 and plan.state_server == "tcp://127.0.0.1:9001"
    assert all(p.host == "127.0.0.1" and not p.remote for p in plan.processes)


def test_scheduler_and_server_environment():
    plan = plan_of("-n", "2", "-s", "1", "--sync", "async", "--python", "/opt/py")
    for spec, role in zip(plan.processes[:2], ["scheduler", "server"]):
        assert spec.argv == ("/opt/py", "-m", "kvstore_ext.server")
        env = spec.env
        assert env["DMLC_ROLE"] == role
        assert env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
        assert env["DMLC_PS_ROOT_PORT"] == "9000"
        assert env["DMLC_NUM_WORKER"] == "2"
        assert env["DMLC_NUM_SERVER"] == "1"
        assert env["DMLC_NODE_HOST"] == "127.0.0.1"
        assert "OMP_NUM_THREADS" not in env  # inherited, as under MXNet's launcher
        assert env["PYTHONUNBUFFERED"] == "1"
        assert not any(key.startswith("MXHET_") for key in env)


def test_worker_environment_round_trips_through_worker_config():
    plan = plan_of("-n", "3", "-s", "1", "--sync", "sync", "--contexts", "cpu,cpu,gpu(0)",
                   "--slowdown", "1,1,20", cpu_count=8)
    workers = plan.by_role("worker")
    assert [w.slot for w in workers] == [0, 1, 2]
    for worker in workers:
        env = worker.env
        assert worker.argv == tuple(CMD)
        assert env["DMLC_ROLE"] == "worker"
        assert env["DMLC_PS_ROOT_PORT"] == "9000"
        assert env["DMLC_NODE_HOST"] == "127.0.0.1"
        assert env["OMP_NUM_THREADS"] == "2"          # 8 CPUs / 3 workers
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["MXHET_STATE_SERVER"] == "tcp://127.0.0.1:9001"
    assert worker_config(workers[2].env) == WorkerConfig(
        sync="sync", slot=2, num_slots=3, context="gpu(0)", slowdown=20.0, state_server="tcp://127.0.0.1:9001",
        num_servers=1)
    assert [(w.context, w.slowdown) for w in workers] == [("cpu", 1.0), ("cpu", 1.0), ("gpu(0)", 20.0)]


def test_every_mxnet_process_waits_passively_in_openmp_unless_the_environment_or_an_option_says_otherwise():
    """A spinning OpenMP thread holds a core a busy neighbour needs (bench/results/omp-wait): the launcher's
    processes wait passively by default; the launcher's own environment, then --env-worker/--env-server, decide."""
    options = ("-n", "2", "-s", "1", "--sync", "sync")
    by_default = plan_of(*options)
    assert {p.env["OMP_WAIT_POLICY"] for p in by_default.processes} == {"PASSIVE"}
    assert {p.env["OMP_WAIT_POLICY"] for p in plan_of(*options, environ={"OMP_WAIT_POLICY": "active"})
            .processes} == {"active"}
    chosen = plan_of(*options, "--env-worker", "OMP_WAIT_POLICY:ACTIVE", "--env-server", "OMP_WAIT_POLICY:ACTIVE")
    assert [p.env["OMP_WAIT_POLICY"] for p in chosen.by_role("worker")] == ["ACTIVE", "ACTIVE"]
    assert [p.env["OMP_WAIT_POLICY"] for p in chosen.by_role("server")] == ["ACTIVE"]


def test_omp_threads_option_and_lower_bound():
    assert {w.env["OMP_NUM_THREADS"] for w in plan_of("-n", "2", "--sync", "sync", "--omp-threads", "3")
            .by_role("worker")} == {"3"}
    assert {w.env["OMP_NUM_THREADS"] for w in plan_of("-n", "4", "--sync", "sync", cpu_count=2)
            .by_role("worker")} == {"1"}


def test_children_find_the_source_checkout():
    plan = plan_of("-n", "1", "--sync", "sync", environ={"PYTHONPATH": "/extra"})
    root = launcher._source_root()
    for spec in plan.processes:
        assert spec.env["PYTHONPATH"].split(":") == [root, "/extra"]


def test_no_state_server_for_a_standalone_job():
    plan = plan_of("-n", "1", "--sync", "local")
    assert plan.by_role("state-server") == []
    assert plan.state_server == ""


@pytest.mark.parametrize("mode", ["sync", "async", "dcasgd", "localsgd"])
def test_every_distributed_job_has_a_state_server(mode):
    plan = plan_of("-n", "2", "-s", "1", "--sync", mode)
    assert len(plan.by_role("state-server")) == 1
    assert all(w.env["MXHET_STATE_SERVER"] == plan.state_server for w in plan.by_role("worker"))


@pytest.mark.parametrize("mode, rules", [("sync", "none"), ("ssp", "ssp"), ("localsgd", "membership"),
                                         ("cada", "gcada"), ("preduce", "preduce")])
def test_the_state_server_loads_the_rules_the_mode_spec_names(mode, rules):
    argv = plan_of("-n", "2", "-s", "1", "--sync", mode).by_role("state-server")[0].argv
    assert argv[argv.index("--rules") + 1] == rules


def test_esync_starts_a_state_server():
    plan = plan_of("-n", "2", "-s", "1", "--sync", "esync")
    assert [p.name for p in plan.processes] == ["scheduler", "server 0", "state-server", "worker 0", "worker 1"]
    state = plan.by_role("state-server")[0]
    assert state.argv == (sys.executable, "-m", "mxhet.state_server", "--bind", "tcp://127.0.0.1:9001",
                          "--num-workers", "2", "--rules", "esync,membership")
    assert state.env["OMP_NUM_THREADS"] == "1"
    assert plan.state_server == "tcp://127.0.0.1:9001"
    assert {w.env["MXHET_STATE_SERVER"] for w in plan.by_role("worker")} == {"tcp://127.0.0.1:9001"}


def test_the_worker_commands_round_deadline_reaches_the_state_server():
    train = ["python", "-m", "mxhet.train", "--round-deadline", "2.5"]
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync", command=train).by_role("state-server")[0].argv
    assert argv[argv.index("--round-deadline") + 1] == "2.5"
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync",
                   command=["python", "-m", "mxhet.train"]).by_role("state-server")[0].argv
    assert "--round-deadline" not in argv   # off: the State Server's command is today's


def test_the_worker_commands_round_length_reaches_the_state_server_and_needs_the_deadline(capsys):
    train = ["python", "-m", "mxhet.train", "--round-deadline", "4", "--round-length", "4"]
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync", command=train).by_role("state-server")[0].argv
    assert argv[argv.index("--round-length") + 1] == "4.0"
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync",
                   command=train[:-2]).by_role("state-server")[0].argv
    assert "--round-length" not in argv   # off: the State Server's command is the deadline's
    with pytest.raises(SystemExit):
        plan_of("-n", "2", "-s", "1", "--sync", "esync", command=["python", "-m", "mxhet.train", "--round-length", "4"])
    assert "--round-length" in capsys.readouterr().err


def test_the_worker_commands_late_memory_reaches_the_state_server_and_needs_the_deadline(capsys):
    train = ["python", "-m", "mxhet.train", "--round-deadline", "4", "--late-memory"]
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync", command=train).by_role("state-server")[0].argv
    assert "--late-memory" in argv
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync", command=train[:-1]).by_role("state-server")[0].argv
    assert "--late-memory" not in argv
    with pytest.raises(SystemExit):
        plan_of("-n", "2", "-s", "1", "--sync", "esync", command=["python", "-m", "mxhet.train", "--late-memory"])
    assert "--late-memory" in capsys.readouterr().err


def test_the_worker_commands_wait_needed_reaches_the_state_server_and_needs_the_deadline(capsys):
    train = ["python", "-m", "mxhet.train", "--round-deadline", "4", "--wait-needed", "2"]
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync", command=train).by_role("state-server")[0].argv
    assert argv[argv.index("--wait-needed") + 1] == "2.0"
    argv = plan_of("-n", "2", "-s", "1", "--sync", "esync", command=train[:-2]).by_role("state-server")[0].argv
    assert "--wait-needed" not in argv   # off: the State Server's command is the deadline's
    with pytest.raises(SystemExit):
        plan_of("-n", "2", "-s", "1", "--sync", "esync", command=["python", "-m", "mxhet.train", "--wait-needed", "2"])
    assert "wait_needed" in capsys.readouterr().err


def test_esync_port_and_epsilon_options():
    plan = plan_of("-n", "2", "--sync", "esync", "--state-server-port", "5555", "--epsilon", "0.25",
                   "--root-port", "7000")
    state = plan.by_role("state-server")[0]
    assert state.argv[3:] == ("--bind", "tcp://127.0.0.1:5555", "--num-workers", "2",
                              "--epsilon", "0.25", "--rules", "esync,membership")
    assert plan.root_port == 7000
    assert plan.by_role("scheduler")[0].env["DMLC_PS_ROOT_PORT"] == "7000"


def test_local_mode_runs_one_standalone_worker():
    plan = plan_of("-n", "1", "--sync", "local", "-s", "4")
    assert [p.name for p in plan.processes] == ["worker 0"]
    env = plan.processes[0].env
    assert not any(key.startswith("DMLC_") for key in env)
    assert env["MXHET_SYNC"] == "local" and env["MXHET_NUM_SLOTS"] == "1"
    assert plan.root_port is None and plan.kvstore is None
    assert not worker_config(env).launched


# ------------------------------------------------------------------------ ssh

def _remote(spec):
    """Split an ssh argv into (ssh part, host, cwd, env dict, remote command)."""
    *ssh, host, remote = spec.argv
    words = shlex.split(remote)
    assert words[0] == "cd" and words[2:9] == ["&&", "echo", "__mxhet_remote_pid__=$$", ">&2", "&&", "exec", "env"]
    env, rest = {}, words[9:]
    while rest and "=" in rest[0] and not rest[0].startswith("/"):
        key, value = rest.pop(0).split("=", 1)
        env[key] = value
    return ssh, host, words[1], env, rest


def test_ssh_plan_places_processes(hostfile):
    plan = plan_of("-n", "3", "-s", "3", "--sync", "esync", "-H", hostfile)
    placed = [(p.name, p.host) for p in plan.processes]
    assert placed == [("scheduler", "node-a"), ("server 0", "node-a"), ("server 1", "node-b"),
                      ("server 2", "node-a"), ("state-server", "node-a"),
                      ("worker 0", "node-a"), ("worker 1", "node-b"), ("worker 2", "node-a")]
    assert plan.root_uri == "node-a"
    assert plan.state_server == "tcp://node-a:9001"
    # ZeroMQ cannot bind to a host name: the State Server binds every interface.
    state_argv = _remote(plan.by_role("state-server")[0])[4]
    assert state_argv[state_argv.index("--bind") + 1] == "tcp://*:9001"
    # OMP threads per host: node-a runs 2 workers, node-b 1 (8 CPUs each).
    assert [w.env["OMP_NUM_THREADS"] for w in plan.by_role("worker")] == ["4", "8", "4"]


def test_ssh_command_construction(hostfile):
    command = ["python", "my train.py", "--tag", "it's"]
    plan = plan_of("-n", "2", "-s", "1", "--sync", "sync", "-H", hostfile,
                   "--ssh-command", "ssh -p 2222", command=command, cwd="/job dir")
    for spec in plan.processes:
        assert spec.remote
        if spec.role == "state-server":
            continue
        ssh, host, cwd, env, rest = _remote(spec)
        assert ssh == ["ssh", "-p", "2222", "-o", "BatchMode=yes"]
        assert host == spec.host
        assert cwd == "/job dir"
        assert env == spec.env
        assert env["DMLC_NODE_HOST"] == spec.host
        assert env["DMLC_PS_ROOT_URI"] == "node-a"
    worker1 = plan.by_role("worker")[1]
    assert _remote(worker1)[1] == "node-b"
    assert _remote(worker1)[4] == command
    assert _remote(worker1)[3]["MXHET_SLOT"] == "1"


def test_ssh_state_server_binds_a_numeric_first_host(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.7\n10.0.0.8\n")
    plan = plan_of("-n", "2", "--sync", "esync", "-H", str(hosts))
    state_argv = _remote(plan.by_role("state-server")[0])[4]
    assert state_argv[state_argv.index("--bind") + 1] == "tcp://10.0.0.7:9001"


def test_ssh_argv_helper():
    argv = launcher.ssh_argv("ssh", "h1", "/w", {"B": "2", "A": "x y"}, ["python", "-c", "print(1)"])
    assert argv == ("ssh", "-o", "BatchMode=yes", "h1",
                    "cd /w && echo __mxhet_remote_pid__=$$ >&2 && exec env 'A=x y' B=2 python -c 'print(1)'")


# -------------------------------------------------------------------- helpers

def test_describe_exit():
    assert launcher.describe_exit(3) == "exited with code 3"
    assert launcher.describe_exit(-9) == "was killed by signal SIGKILL (9)"
    assert launcher.describe_exit(None) == "is still running"


def test_find_free_port_is_bindable():
    import socket
    port = launcher.find_free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_net_delay_and_slowdown_schedule_reach_the_workers():
    plan = plan_of("-n", "3", "-s", "1", "--sync", "esync", "--net-delay-ms", "0,0,30",
                   "--slowdown-schedule", "2:0-60=1,60-=8")
    workers = plan.by_role("worker")
    configs = [worker_config(w.env) for w in workers]
    assert [c.net_delay_ms for c in configs] == [0.0, 0.0, 30.0]
    assert configs[2].slowdown_schedule == ((0.0, 60.0, 1.0), (60.0, None, 8.0))
    assert configs[0].slowdown_schedule == () and configs[1].slowdown_schedule == ()
    assert all(c.base_iter_s == 0.0 for c in configs)  # off unless asked for


def test_base_iteration_time_reaches_every_worker():
    plan = plan_of("-n", "2", "-s", "1", "--sync", "esync", "--slowdown", "1,10", "--base-iter", "0.25")
    configs = [worker_config(w.env) for w in plan.by_role("worker")]
    assert [(c.slowdown, c.base_iter_s) for c in configs] == [(1.0, 0.25), (10.0, 0.25)]


@pytest.mark.parametrize("argv, named", [
    (["--net-delay-ms", "-5"], "--net-delay-ms"),
    (["--net-delay-ms", "1,2"], "--net-delay-ms"),
    (["--base-iter", "-1"], "--base-iter"),
    (["--base-iter", "inf"], "--base-iter"),
    (["--slowdown-schedule", "3:0-=2"], "slot"),
    (["--slowdown-schedule", "0:nonsense"], "--slowdown-schedule"),
    (["--slowdown-schedule", "0:0-=2", "--slowdown-schedule", "0:5-=3"], "twice"),
])
def test_bad_heterogeneity_options(capsys, argv, named):
    err = usage_error(capsys, "-n", "3", "-s", "1", "--sync", "esync", *argv, "--", "x")
    assert named in err


def test_ssp_and_adsp_options_reach_the_state_server(tmp_path):
    stats = str(tmp_path / "state.json")
    for mode in ("ssp", "adsp"):
        plan = plan_of("-n", "2", "-s", "1", "--sync", mode, "--staleness", "3", "--adsp-period", "1.5",
                       "--adsp-window", "2", "--state-stats", stats)
        argv = plan.by_role("state-server")[0].argv
        for flag, value in (("--staleness", "3"), ("--adsp-period", "1.5"), ("--adsp-window", "2"),
                            ("--stats-out", stats)):
            assert argv[argv.index(flag) + 1] == value


@pytest.mark.parametrize("argv", [["--staleness", "-1"], ["--adsp-period", "0"], ["--adsp-window", "0"]])
def test_bad_ssp_adsp_options(capsys, argv):
    err = usage_error(capsys, "-n", "2", "-s", "1", "--sync", "adsp", *argv, "--", "x")
    assert argv[0] in err


# ------------------------------------------- the worker command's mode options

TRAIN = ["python", "-m", "mxhet.train", "--model", "smallcnn", "--metrics-out", "runs/x"]


@pytest.mark.parametrize("sync, flags, named", [
    ("dylu", ["--local-steps", "0"], "dylu: local_steps (--local-steps) must be >= 1, got 0"),
    ("gcada", ["--beta2", "1"], "gcada: beta2 (--beta2) must be in [0, 1)"),
    ("esync", ["--sync", "preduce", "--group-size", "1"], "preduce: group_size (--group-size)"),  # the worker's --sync
    ("esync", ["--ack", "sometimes"], "--ack: invalid choice: 'sometimes'"),
])
def test_worker_mode_options_are_checked_before_any_process_starts(capsys, sync, flags, named):
    err = usage_error(capsys, "-n", "2", "--sync", sync, "--", *TRAIN, *flags)
    assert named in err


def test_worker_mode_options_of_other_modes_and_other_commands_are_left_alone():
    args = parse("-n", "2", "--sync", "esync", command=TRAIN + ["--local-steps", "0", "--ack", "delayed"])
    assert args.sync == "esync"
    assert parse("-n", "2", "--sync", "dylu", command=["python", "train.py", "--local-steps", "0"]).sync == "dylu"
