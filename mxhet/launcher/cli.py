"""The command line of ``mxhet-launch``: the parser, its validation and :func:`main`."""
import argparse
import os
import shlex
import shutil
import sys
import tempfile

from ..config import parse_base_iter, parse_context, parse_delay_ms, parse_slowdown, parse_slowdown_schedule
from ..control.membership import CLUSTER_ELASTIC_MODES, RESTART_MODES
from ..errors import ConfigError
from ..observe import launch as live_view
from ..policy.flags import add_mode_arguments, resolve_args
from .jobplan import (DEFAULT_STATE_SERVER_RESTARTS, DEFAULT_SYNC, EXIT_OK, EXIT_USAGE, _lookup_mode,
                      build_plan, minimum_restart_delay, read_hostfile)
from .supervisor import run_plan
from .watch import DEFAULT_HANG_GRACE_S, DEFAULT_ORPHAN_GRACE_S, DEFAULT_START_GRACE_S

_PROG = "mxhet-launch"
# CLUSTER_ELASTIC_MODES (mxhet.control.membership): the modes in which a worker may die and the others go on;
# RESTART_MODES: those in which a worker started again takes part again


def build_parser():
    """The argparse parser of ``mxhet-launch`` (validation is in :func:`parse_args`)."""
    parser = argparse.ArgumentParser(
        prog=_PROG,
        usage="%(prog)s -n WORKERS [-s SERVERS] [options] -- COMMAND...",
        description="Launch a heterogeneity-aware MXNet job: PS-LITE scheduler and servers, "
                    "the State Server when the mode needs one, and one COMMAND per worker slot.",
        epilog="Exit codes: 0 success, 1 a process failed, 2 usage error, 124 timeout, "
               "130/143 interrupted by SIGINT/SIGTERM.")
    job = parser.add_argument_group("job")
    job.add_argument("-n", "--num-workers", type=int, required=True, metavar="WORKERS",
                     help="number of worker slots")
    job.add_argument("-s", "--num-servers", type=int, default=None, metavar="SERVERS",
                     help="number of parameter servers (default: WORKERS; ignored for standalone modes)")
    job.add_argument("--sync", default=DEFAULT_SYNC, metavar="MODE",
                     help="synchronization mode: esync, sync, async, local, ... (default: %(default)s)")
    job.add_argument("--timeout", type=float, default=0.0, metavar="SECONDS",
                     help="end the job after this many seconds, exit 124 (default: 0 = no limit)")
    job.add_argument("--job-file", default=None, metavar="PATH",
                     help="write the job description (pids, ports, exit codes) to this JSON file")

    het = parser.add_argument_group("heterogeneity (one value for all workers, or one per worker)")
    het.add_argument("--contexts", default="cpu", metavar="LIST",
                     help="comma-separated contexts, e.g. cpu,cpu,gpu(0) (default: %(default)s)")
    het.add_argument("--slowdown", default="1", metavar="LIST",
                     help="comma-separated slowdown factors >= 1, e.g. 1,1,20 (default: %(default)s)")
    het.add_argument("--slowdown-schedule", action="append", default=None, metavar="SLOT:SPEC",
                     help="a worker whose speed changes during training, e.g. 2:0-60=1,60-=8 (seconds since "
                          "training started = factor); repeat for several workers")
    het.add_argument("--net-delay-ms", default="0", metavar="LIST",
                     help="emulated one-way delay of each worker's State Server link, milliseconds, "
                          "e.g. 0,0,30 (default: %(default)s)")
    het.add_argument("--base-iter", type=float, default=0.0, metavar="SECONDS",
                     help="emulate speeds exactly: a worker of slowdown f pads each iteration to f x SECONDS "
                          "(default 0: it sleeps (f - 1) x its compute time)")
    het.add_argument("--slowdown-dist", choices=["fixed", "exp"], default="fixed",
                     help="with --base-iter: 'exp' draws each iteration's time from an exponential law of mean "
                          "f x SECONDS, seeded per worker (the G-CADA paper's model; default %(default)s)")
    het.add_argument("--omp-threads", type=int, default=None, metavar="N",
                     help="OMP_NUM_THREADS of each worker (default: CPUs of its host / its workers)")
    het.add_argument("--server-omp-threads", type=int, default=None, metavar="N",
                     help="OMP_NUM_THREADS of the scheduler and servers (default: inherited from this "
                          "launcher's environment, as under MXNet's tools/launch.py)")

    state = parser.add_argument_group("State Server (modes that need one, e.g. esync)")
    state.add_argument("--state-server-port", type=int, default=None, metavar="PORT",
                       help="port of the State Server (default: a free port)")
    state.add_argument("--staleness", type=int, default=None, metavar="S",
                       help="ssp: iterations a worker may run ahead of the slowest (State Server default: 2)")
    state.add_argument("--adsp-period", type=float, default=None, metavar="SECONDS",
                       help="adsp: check period Γ (State Server default: 2 s)")
    state.add_argument("--adsp-epoch", type=float, default=None, metavar="SECONDS",
                       help="adsp: seconds between commit-rate searches (State Server default: 60 s)")
    state.add_argument("--adsp-window", type=int, default=None, metavar="PERIODS",
                       help="adsp: check periods per evaluated commit rate (State Server default: 2)")
    state.add_argument("--heartbeat-timeout", type=float, default=None, metavar="SECONDS",
                       help="seconds of silence after which the State Server declares a worker hung and the "
                            "job ends (State Server default: 30; 0 = never)")
    state.add_argument("--state-server-restarts", type=int, default=DEFAULT_STATE_SERVER_RESTARTS, metavar="N",
                       help="start a State Server that died again, on the same address, up to N times; "
                            "workers retry and register again (default: %(default)s)")
    state.add_argument("--elastic", action="store_true",
                       help="a worker that dies (killed, crashed, silent for --heartbeat-timeout, default 5 s "
                            "here) leaves the job and the others train on, in the modes whose rounds the State "
                            "Server names or counts, async and preduce (%s; sync then runs rounds of one local step, "
                            "sgd/nag only); without it the job fails fast" % ", ".join(CLUSTER_ELASTIC_MODES))
    state.add_argument("--min-workers", type=int, default=1, metavar="N",
                       help="with --elastic: fewest workers still training that a death may leave; fewer end "
                            "the job with an error (default: %(default)s)")
    state.add_argument("--max-restarts", type=int, default=0, metavar="K",
                       help="with --elastic: start a worker that died again on its host, in its slot, up to K times "
                            "in all; it takes PS-LITE's recovery of the dead node's rank, the current global model, "
                            "and joins at the next round boundary (preduce: the groups from its first READY; async: "
                            "its first push after pulling the model; gcada, cada: its group from the iteration after "
                            "its first request); above 1 the launcher "
                            "starts K spare workers with the job, idle until one takes a dead worker's slot "
                            "(PS-LITE's scheduler serves one recovery per job); in modes %s (default: %%(default)s)"
                            % ", ".join(RESTART_MODES))
    state.add_argument("--restart-delay", type=float, default=None, metavar="SECONDS",
                       help="with --max-restarts: the least seconds between a worker's death and its restart "
                            "(default and minimum: the longer of PS-LITE's and the State Server's heartbeat "
                            "timeouts + 2 s, 7 s under --elastic; a shorter value is refused); e.g. the fault "
                            "bench restarts a device at 60%% of the run")
    state.add_argument("--no-auth", action="store_true",
                       help="do not authenticate the State Server link (by default the launcher makes "
                            "CURVE keys for each job and only the job's workers get answers)")
    state.add_argument("--state-stats", default=None, metavar="PATH",
                       help="the State Server writes its per-round / per-checkpoint statistics here (JSON)")
    state.add_argument("--epsilon", type=float, default=None, metavar="SECONDS",
                       help="the State Server's epsilon (default: the server's own)")

    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--launcher", choices=("local", "ssh"), default=None,
                         help="where processes run (default: ssh with -H, else local)")
    cluster.add_argument("-H", "--hostfile", default=None, metavar="HOSTFILE",
                         help="hosts for --launcher ssh, one per line; the first runs the scheduler "
                              "and the State Server, servers and workers go round-robin")
    cluster.add_argument("--ssh-command", default="ssh", metavar="CMD",
                         help="ssh program and options (default: %(default)s)")
    cluster.add_argument("--root-port", type=int, default=None, metavar="PORT",
                         help="PS-LITE scheduler port (default: a free port)")
    cluster.add_argument("--python", default=sys.executable, metavar="PATH",
                         help="Python interpreter of the scheduler, servers and State Server "
                              "(default: this one)")
    cluster.add_argument("--ssh-port", type=int, default=None, metavar="PORT",
                         help="port of the hosts' ssh servers (default: the ssh client's own, e.g. from "
                              "~/.ssh/config)")
    cluster.add_argument("--ssh-identity", default=None, metavar="KEYFILE",
                         help="private key the ssh client logs in with (only this one is offered)")
    cluster.add_argument("--ssh-option", action="append", default=None, metavar="KEY=VALUE",
                         help="an ssh client option (ssh -o), e.g. StrictHostKeyChecking=accept-new; repeatable")
    cluster.add_argument("--sync-dst-dir", default=None, metavar="DIR",
                         help="with --launcher ssh: rsync this working directory to DIR on every host first, "
                              "and run the processes there (as MXNet's tools/launch.py)")

    mxenv = parser.add_argument_group("environment (as MXNet's tools/launch.py)")
    mxenv.add_argument("--env", action="append", default=None, metavar="NAME[,NAME...]",
                       help="pass these variables' values from this environment to every process (local "
                            "processes inherit the whole environment anyway); repeatable")
    mxenv.add_argument("--env-server", action="append", default=None, metavar="NAME:VALUE[,...]",
                       help="set variables for the servers, e.g. OMP_NUM_THREADS:3; repeatable")
    mxenv.add_argument("--env-worker", action="append", default=None, metavar="NAME:VALUE[,...]",
                       help="set variables for the workers, e.g. OMP_NUM_THREADS:3; repeatable")

    watch = parser.add_argument_group("failure detection")
    watch.add_argument("--hang-grace", type=float, default=DEFAULT_HANG_GRACE_S, metavar="SECONDS",
                       help="a worker whose output ends in an uncaught Python exception and that neither "
                            "exits, writes nor uses CPU for this long fails the job (MXNet keeps such a "
                            "worker in PS-LITE's exit barrier; 0 = off; default: %(default)s)")
    watch.add_argument("--orphan-grace", type=float, default=DEFAULT_ORPHAN_GRACE_S, metavar="SECONDS",
                       help="the last running worker, idle (no CPU) this long after every other worker "
                            "exited, fails the job (0 = off; default: %(default)s)")
    watch.add_argument("--start-grace", type=float, default=DEFAULT_START_GRACE_S, metavar="SECONDS",
                       help="a local worker whose mxhet.Trainer exists but has not finished a step, idle (no "
                            "CPU) this long, fails the job (e.g. waiting in PS-LITE's start-up; 0 = off; "
                            "default: %(default)s); so does a worker started again (--max-restarts) that has "
                            "been starting this long when every other worker has exited (a younger one is "
                            "ended as too late)")

    live_view.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="the worker command, after --")
    return parser


def _split_list(parser, option, text, n, parse):
    items = [item.strip() for item in text.split(",")]
    if len(items) not in (1, n):
        parser.error("%s %r has %d values; give 1 (for all workers) or %d (one per worker)"
                     % (option, text, len(items), n))
    values = []
    for item in items:
        try:
            values.append(parse(item))
        except ConfigError as exc:
            parser.error("%s: %s" % (option, exc))
    return values * n if len(values) == 1 else values


def _format_context(item):
    kind, index = parse_context(item)
    return "cpu" if kind == "cpu" else "gpu(%d)" % index


def _check_port(parser, option, value):
    if value is not None and not 1 <= value <= 65535:
        parser.error("%s must be in 1..65535, got %d" % (option, value))


def _check_seconds(parser, option, value):
    if value is not None and not (0 <= value < float("inf")):
        parser.error("%s must be a finite number of seconds >= 0, got %r" % (option, value))


def _env_pairs(parser, option, values):
    """``NAME:VALUE[,NAME:VALUE...]`` items (repeatable) as a dict; the value may hold ':'."""
    pairs = {}
    for text in values or ():
        for item in filter(None, text.split(",")):
            name, sep, value = item.partition(":")
            if not sep or not name.strip() or "=" in name:
                parser.error("%s %r: expected NAME:VALUE (e.g. OMP_NUM_THREADS:3)" % (option, item))
            pairs[name.strip()] = value
    return pairs


def _check_mxnet_env(parser, args, environ=None):
    """MXNet's --env, --env-server, --env-worker; --server-omp-threads; the failure watch."""
    environ = os.environ if environ is None else environ
    args.env_pass = []
    for text in args.env or ():
        for name in filter(None, (n.strip() for n in text.split(","))):
            if ":" in name or "=" in name:
                parser.error("--env %r: expected variable names (use --env-worker/--env-server NAME:VALUE "
                             "to set a value)" % (name,))
            if name not in environ:
                parser.error("--env %s: the variable is not set in this environment" % name)
            args.env_pass.append(name)
    args.env_server_pairs = _env_pairs(parser, "--env-server", args.env_server)
    args.env_worker_pairs = _env_pairs(parser, "--env-worker", args.env_worker)
    if args.server_omp_threads is not None and args.server_omp_threads < 1:
        parser.error("--server-omp-threads must be >= 1, got %d" % args.server_omp_threads)
    _check_seconds(parser, "--hang-grace", args.hang_grace)
    _check_seconds(parser, "--orphan-grace", args.orphan_grace)
    _check_seconds(parser, "--start-grace", args.start_grace)
    _check_port(parser, "--ssh-port", args.ssh_port)
    if args.ssh_identity is not None:
        if not os.path.isfile(args.ssh_identity):
            parser.error("--ssh-identity %r: no such file" % (args.ssh_identity,))
        args.ssh_identity = os.path.abspath(args.ssh_identity)
    for option in args.ssh_option or ():
        if "=" not in option or option.startswith("="):
            parser.error("--ssh-option %r: expected KEY=VALUE" % (option,))


def _check_worker_mode_options(parser, command, sync):
    """A worker command ``python -m mxhet.train ...``: its mode options checked
    by the mode's spec now, so a bad value fails before any process starts
    (the worker would refuse it later; its own ``--sync`` wins, as there).
    Returns the resolved options ({} for another command)."""
    if "mxhet.train" not in command:
        return {}
    at = command.index("mxhet.train")
    if at == 0 or command[at - 1] != "-m":
        return {}
    worker = argparse.ArgumentParser(prog="the worker command", add_help=False, allow_abbrev=False)
    worker.add_argument("--sync", default=sync)
    add_mode_arguments(worker)
    try:
        given, _ = worker.parse_known_args(command[at + 1:])
    except SystemExit:   # a value outside a flag's choices: argparse named it already
        parser.exit(EXIT_USAGE)
    try:
        return resolve_args(given, given.sync)
    except ConfigError as exc:
        parser.error("worker command: %s" % exc)


def parse_args(argv=None):
    """Parse and validate the command line.

    Everything before the first ``--`` is an option; everything after it is the
    worker command. Adds ``contexts`` and ``slowdowns`` (one per worker),
    ``hosts``, ``kvstore_type`` and ``needs_state_server``.

    Raises:
        SystemExit: code 2 with a message naming the bad value; 0 for ``--help``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        args.command = args.command + argv[cut + 1:]
    else:
        args = parser.parse_args(argv)

    n = args.num_workers
    if n < 1:
        parser.error("-n/--num-workers must be >= 1, got %d" % n)
    if not args.command:
        parser.error("missing the worker command (put it after --)")
    try:
        mode = _lookup_mode(args.sync)
    except ConfigError as exc:
        parser.error("--sync: %s" % exc)
    args.kvstore_type = mode.kvstore
    worker_options = _check_worker_mode_options(parser, args.command, args.sync)
    # ESync's --round-deadline, --round-length, --late-memory and --wait-needed are worker options the State
    # Server decides with (its rounds' members, their lengths, the memories they add)
    args.round_deadline = worker_options.get("round_deadline") or None
    args.round_length = worker_options.get("round_length") or None
    args.late_memory = bool(worker_options.get("late_memory"))
    args.wait_needed = worker_options.get("wait_needed") or None
    if args.round_length and not args.round_deadline:
        parser.error("worker command: esync: round_length (--round-length) %r needs round_deadline "
                     "(--round-deadline) > 0" % (args.round_length,))
    if args.late_memory and not args.round_deadline:
        parser.error("worker command: esync: late_memory (--late-memory) needs round_deadline "
                     "(--round-deadline) > 0")
    if args.wait_needed and not args.round_deadline:
        parser.error("worker command: esync: wait_needed (--wait-needed) %r needs round_deadline "
                     "(--round-deadline) > 0" % (args.wait_needed,))
    # Every distributed job gets a State Server: the algorithm's control plane
    # for esync, ssp and adsp, and for every mode the watch on silent workers
    # (heartbeats) and the check that all workers train the same model.
    args.needs_state_server = mode.needs_state_server or mode.distributed
    args.state_rules = mode.state_rules
    if args.kvstore_type is None:
        if n > 1:
            parser.error("--sync %s runs one standalone worker without parameter servers; "
                         "got -n %d (use a distributed mode such as sync or esync)" % (args.sync, n))
    else:
        if args.num_servers is None:
            args.num_servers = n
        if args.num_servers < 1:
            parser.error("-s/--num-servers must be >= 1 for --sync %s, got %d"
                         % (args.sync, args.num_servers))

    args.contexts = _split_list(parser, "--contexts", args.contexts, n, _format_context)
    args.slowdowns = _split_list(parser, "--slowdown", args.slowdown, n, parse_slowdown)
    args.net_delays = _split_list(parser, "--net-delay-ms", args.net_delay_ms, n, parse_delay_ms)
    args.schedules = {}
    for item in args.slowdown_schedule or ():
        slot_text, _, spec = item.partition(":")
        try:
            slot = int(slot_text)
            if not 0 <= slot < n:
                raise ValueError
        except ValueError:
            parser.error("--slowdown-schedule %r: must start with a worker slot 0..%d and ':'" % (item, n - 1))
        try:
            parse_slowdown_schedule(spec)
        except ConfigError as exc:
            parser.error("--slowdown-schedule: %s" % exc)
        if slot in args.schedules:
            parser.error("--slowdown-schedule given twice for slot %d" % slot)
        args.schedules[slot] = spec
    try:
        parse_base_iter(args.base_iter)
    except ConfigError as exc:
        parser.error("--base-iter: %s" % exc)
    if args.slowdown_dist == "exp" and not args.base_iter > 0:
        parser.error("--slowdown-dist exp needs --base-iter (the mean of the exponential iteration time)")
    if args.omp_threads is not None and args.omp_threads < 1:
        parser.error("--omp-threads must be >= 1, got %d" % args.omp_threads)
    _check_port(parser, "--state-server-port", args.state_server_port)
    _check_port(parser, "--root-port", args.root_port)
    if args.root_port and args.root_port == args.state_server_port:
        parser.error("--root-port and --state-server-port are both %d; they must differ" % args.root_port)
    _check_seconds(parser, "--timeout", args.timeout)
    _check_seconds(parser, "--epsilon", args.epsilon)
    _check_seconds(parser, "--heartbeat-timeout", args.heartbeat_timeout)
    if args.min_workers < 1:
        parser.error("--min-workers must be >= 1, got %d" % args.min_workers)
    if args.max_restarts < 0:
        parser.error("--max-restarts must be >= 0, got %d" % args.max_restarts)
    if args.max_restarts and not args.elastic:
        parser.error("--max-restarts %d needs --elastic" % args.max_restarts)
    if args.max_restarts and args.sync not in RESTART_MODES:
        parser.error("--max-restarts works in modes %s, not %r (a restarted worker rejoins the job's "
                     "aggregation from the current global model)"
                     % (", ".join(RESTART_MODES), args.sync))
    if args.restart_delay is not None:
        if not args.max_restarts:
            parser.error("--restart-delay %g needs --max-restarts" % args.restart_delay)
        least = minimum_restart_delay(args.heartbeat_timeout)
        if not least <= args.restart_delay < float("inf"):
            parser.error("--restart-delay must be a finite number of seconds >= %g (PS-LITE and the State Server "
                         "must count the dead worker dead before its replacement connects), got %r"
                         % (least, args.restart_delay))
    if args.elastic and args.sync not in CLUSTER_ELASTIC_MODES:
        parser.error("--elastic works in modes %s, not %r (a death there fails the job fast: its servers or "
                     "rules count a fixed number of workers)" % (", ".join(CLUSTER_ELASTIC_MODES), args.sync))
    if args.state_server_restarts < 0:
        parser.error("--state-server-restarts must be >= 0, got %d" % args.state_server_restarts)
    for option, value in (("--adsp-period", args.adsp_period), ("--adsp-epoch", args.adsp_epoch)):
        if value is not None and not (0 < value < float("inf")):
            parser.error("%s must be a finite number of seconds > 0, got %r" % (option, value))
    for option, value in (("--staleness", args.staleness), ("--adsp-window", args.adsp_window)):
        if value is not None and value < (0 if option == "--staleness" else 1):
            parser.error("%s must be >= %d, got %d" % (option, 0 if option == "--staleness" else 1, value))
    if args.state_stats is not None:
        args.state_stats = os.path.abspath(args.state_stats)
    _check_mxnet_env(parser, args)
    live_view.check(args, parser)

    if args.job_file is not None:
        directory = os.path.dirname(os.path.abspath(args.job_file))
        if not args.job_file or not os.path.isdir(directory):
            parser.error("--job-file %r: directory %r does not exist" % (args.job_file, directory))

    if args.launcher is None:
        args.launcher = "ssh" if args.hostfile else "local"
    args.hosts = []
    if args.launcher == "ssh":
        if not args.hostfile:
            parser.error("--launcher ssh needs -H/--hostfile")
        try:
            args.hosts = read_hostfile(args.hostfile)
        except ConfigError as exc:
            parser.error(str(exc))
        try:
            if not shlex.split(args.ssh_command):
                raise ValueError("empty")
        except ValueError:
            parser.error("--ssh-command %r is not a command" % (args.ssh_command,))
    elif args.hostfile:
        parser.error("-H/--hostfile %r needs --launcher ssh" % (args.hostfile,))
    return args


def main(argv=None):
    """Run ``mxhet-launch``; returns the exit code (see the module docstring)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        if exc.code is None:
            return EXIT_OK
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    keys = None
    try:
        if args.needs_state_server and not args.no_auth:
            keys = make_job_keys(args)
            args.control_keys = keys
        live_view.make_live_dir(args)
        plan = build_plan(args)
    except OSError as exc:
        print("%s: cannot prepare the job: %s" % (_PROG, exc), file=sys.stderr)
        live_view.stop(args, None)
        if keys:
            shutil.rmtree(keys, ignore_errors=True)
        return EXIT_USAGE
    board = code = None
    try:
        board = live_view.start(plan)
        code = run_plan(plan, timeout=args.timeout or None, job_file=args.job_file,
                        state_server_restarts=args.state_server_restarts)
        return code
    except ConfigError as exc:  # the dashboard's address cannot be bound
        print("%s: %s" % (_PROG, exc), file=sys.stderr)
        return EXIT_USAGE
    finally:
        live_view.stop(args, board, code)
        if keys:
            shutil.rmtree(keys, ignore_errors=True)


def make_job_keys(args):
    """Create this job's CURVE keys in a new private directory; returns its path.

    Local jobs keep it in the temporary directory; ssh jobs in the working
    directory, which every host must share (see the module docstring).
    """
    from ..control.auth import create_job_keys
    parent = os.getcwd() if args.launcher == "ssh" else None
    return create_job_keys(tempfile.mkdtemp(prefix=".mxhet-keys-", dir=parent))
