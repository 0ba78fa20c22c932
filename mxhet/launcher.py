"""The cluster launcher: start a PS-LITE job (scheduler, servers, State Server,
workers), forward their output, watch them and end them together.

``mxhet-launch`` and ``tools/launch.py`` are thin wrappers over :func:`main`,
which chains three functions that can also be used on their own:

* :func:`parse_args` reads and validates the command line (exit code 2 with a
  message naming the bad value);
* :func:`build_plan` turns the options into a :class:`Plan`, the list of
  :class:`ProcessSpec` to start; it starts nothing, so unit tests can check
  every command line and environment variable;
* :func:`run_plan` starts the processes, prefixes their output with their role
  (``[worker 1] ...``), and ends the whole job when one process fails, when the
  time limit passes or when the launcher gets SIGINT/SIGTERM.

Every child runs in its own session, so the launcher ends a child together with
its own children with ``os.killpg(pid, ...)``: by process id, never by name.

With ``--launcher ssh`` every host must see the same working directory and
Python path (a shared file system), and ports are chosen free on *this*
machine. Ending the local ssh client does not reliably end the remote process
(ssh forwards no signal without a tty): the remote side then stops only when
it next writes to its closed output.

Exit codes of :func:`run_plan`: 0 all workers succeeded; 1 a process failed
(or could not be started); 124 the ``--timeout`` passed; 130 / 143 the
launcher got SIGINT / SIGTERM. :func:`main` returns 2 for a usage error.
"""
import argparse
import collections
import dataclasses
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Optional

from .config import parse_base_iter, parse_context, parse_delay_ms, parse_slowdown, parse_slowdown_schedule
from .errors import ConfigError

SCHEDULER = "scheduler"
SERVER = "server"
STATE_SERVER = "state-server"
WORKER = "worker"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
EXIT_STATE_SERVER_SILENT_WORKER = 4  # mxhet.state_server: a worker went silent
DEFAULT_STATE_SERVER_RESTARTS = 3

LOCAL_HOST = "127.0.0.1"
DEFAULT_SYNC = "esync"
#: Seconds the scheduler and servers get to stop on their own once every worker
#: has exited 0 (PS-LITE servers stop when the workers finalize).
DEFAULT_SERVER_GRACE_S = 10.0
#: Seconds the workers get to exit once the scheduler, a server or the State
#: Server has exited 0 before them; past it the job has failed.
DEFAULT_WORKER_GRACE_S = 5.0
#: Seconds between SIGTERM and SIGKILL when the launcher ends a process group.
DEFAULT_KILL_GRACE_S = 3.0
#: Seconds between two checks of the children's state.
DEFAULT_POLL_INTERVAL_S = 0.1
#: Seconds to wait for a child's output to drain before reporting its failure.
OUTPUT_DRAIN_S = 2.0
#: Number of stderr lines kept per child for the failure report.
STDERR_TAIL_LINES = 20
JOB_FILE_FORMAT = "mxhet-job/1"

_PROG = "mxhet-launch"


# --------------------------------------------------------------------------- plan

@dataclasses.dataclass(frozen=True)
class ProcessSpec:
    """One process of the job, ready to start.

    ``env`` holds the variables the launcher sets for this process on top of its
    own environment. With ``remote`` (``--launcher ssh``) they are already part
    of ``argv``'s remote command and are *not* set on the local ssh process.
    ``slot`` is the worker slot or the server index; ``None`` for the scheduler
    and the State Server.
    """
    role: str
    slot: Optional[int]
    host: str
    argv: tuple
    env: dict
    context: Optional[str] = None
    slowdown: Optional[float] = None
    remote: bool = False

    @property
    def name(self):
        """``worker 1``, ``server 0``, ``scheduler``, ``state-server``."""
        return self.role if self.slot is None else "%s %d" % (self.role, self.slot)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything :func:`run_plan` starts, plus what the job file records."""
    mode: str
    kvstore: Optional[str]        # "dist_sync", "dist_async" or None (standalone)
    launcher: str                 # "local" or "ssh"
    root_uri: Optional[str]       # host of the PS-LITE scheduler
    root_port: Optional[int]
    state_server: str             # "tcp://HOST:PORT", or "" without a State Server
    processes: tuple              # of ProcessSpec, in start order

    def by_role(self, role):
        """The process specs of one role, in start order."""
        return [p for p in self.processes if p.role == role]


def find_free_port(host=LOCAL_HOST):
    """A TCP port that is free on ``host`` now (bind to port 0, then release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def read_hostfile(path):
    """Hosts listed in ``path``: one per line; ``#`` comments and blank lines ignored.

    Raises:
        ConfigError: if the file cannot be read, lists no host, or a line holds
            more than one word.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise ConfigError("cannot read hostfile %r: %s" % (path, exc.strerror or exc)) from None
    hosts = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if len(words) > 1:
            raise ConfigError("hostfile %r line %d: expected one host, got %r" % (path, number, line.strip()))
        hosts.extend(words)
    if not hosts:
        raise ConfigError("hostfile %r lists no host" % (path,))
    return hosts


def _lookup_mode(name):
    """The registered sync mode's :class:`~mxhet.policy.ModeSpec` (no MXNet import)."""
    from .policy import get_spec
    return get_spec(name)


def _source_root():
    """The directory holding the ``mxhet`` and ``kvstore_ext`` packages."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child_pythonpath(environ):
    """PYTHONPATH for the children: the source checkout first, so that
    ``-m kvstore_ext.server`` and ``-m mxhet.state_server`` resolve without
    installing the package; unchanged when mxhet runs from site-packages."""
    current = environ.get("PYTHONPATH", "")
    root = _source_root()
    installed = {os.path.abspath(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}
    if root in installed or root in current.split(os.pathsep):
        return current
    return root + (os.pathsep + current if current else "")


def _bind_address(host, port, launcher):
    # ZeroMQ binds to an interface address, not a host name: bind to every
    # interface when the first host of the hostfile is a name.
    if launcher == "local":
        return "tcp://%s:%d" % (LOCAL_HOST, port)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "tcp://*:%d" % port
    return "tcp://%s:%d" % (host, port)


def ssh_argv(ssh_command, host, cwd, env, argv):
    """The local command that runs ``argv`` on ``host`` in ``cwd`` with ``env``.

    ``[*ssh_command, "-o", "BatchMode=yes", host, "cd CWD && env K=V ... ARGV"]``,
    every part shell-quoted for the remote shell.
    """
    assignments = " ".join(shlex.quote("%s=%s" % (key, env[key])) for key in sorted(env))
    remote = "cd %s && env %s %s" % (shlex.quote(cwd), assignments, shlex.join(argv))
    return (*shlex.split(ssh_command), "-o", "BatchMode=yes", host, remote)


def build_plan(args, *, free_port=find_free_port, cpu_count=None, environ=None, cwd=None):
    """Turn validated options (from :func:`parse_args`) into a :class:`Plan`.

    Starts nothing. ``free_port(host)`` supplies the ports not given on the
    command line; ``cpu_count``, ``environ`` and ``cwd`` default to this
    machine's (they are parameters so tests can pin them).

    Order: scheduler, servers, State Server, workers; scheduler and servers only
    for a distributed kvstore, the State Server only for modes that need it.
    """
    environ = os.environ if environ is None else environ
    cpu_count = (os.cpu_count() or 1) if cpu_count is None else cpu_count
    cwd = os.getcwd() if cwd is None else cwd
    remote = args.launcher == "ssh"
    hosts = list(args.hosts) if remote else [LOCAL_HOST]
    first = hosts[0]
    n = args.num_workers
    dist = args.kvstore_type is not None
    num_servers = args.num_servers if dist else 0

    base = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": _child_pythonpath(environ)}
    taken = set()

    def port(given):
        # Free on this machine: with --launcher ssh only a likely-free guess for
        # the first host (pin it with --root-port / --state-server-port).
        if given:
            chosen = given
        else:
            chosen = free_port(LOCAL_HOST)
            while chosen in taken:
                chosen = free_port(LOCAL_HOST)
        taken.add(chosen)
        return chosen

    root_port = None
    dmlc = {}
    if dist:
        root_port = port(args.root_port)
        dmlc = {
            "DMLC_PS_ROOT_URI": first,
            "DMLC_PS_ROOT_PORT": str(root_port),
            "DMLC_NUM_WORKER": str(n),
            "DMLC_NUM_SERVER": str(num_servers),
        }

    def spec(role, slot, host, argv, env, **extra):
        argv = tuple(argv)
        if remote:
            argv = ssh_argv(args.ssh_command, host, cwd, env, argv)
        return ProcessSpec(role=role, slot=slot, host=host, argv=argv, env=env, remote=remote, **extra)

    server_argv = (args.python, "-m", "kvstore_ext.server")
    processes = []
    if dist:
        processes.append(spec(SCHEDULER, None, first, server_argv,
                              {**base, **dmlc, "DMLC_ROLE": SCHEDULER, "DMLC_NODE_HOST": first,
                               "OMP_NUM_THREADS": "1"}))
        for index in range(num_servers):
            host = hosts[index % len(hosts)]
            processes.append(spec(SERVER, index, host, server_argv,
                                  {**base, **dmlc, "DMLC_ROLE": SERVER, "DMLC_NODE_HOST": host,
                                   "OMP_NUM_THREADS": "1"}))

    state_server = ""
    if args.needs_state_server:
        state_port = port(args.state_server_port)
        state_server = "tcp://%s:%d" % (first, state_port)
        argv = [args.python, "-m", "mxhet.state_server",
                "--bind", _bind_address(first, state_port, args.launcher), "--num-workers", str(n)]
        if args.epsilon is not None:
            argv += ["--epsilon", repr(args.epsilon)]
        if getattr(args, "control_keys", ""):
            argv += ["--keys", args.control_keys]
        for option in ("staleness", "adsp_period", "adsp_epoch", "adsp_window", "heartbeat_timeout",
                       "state_stats"):
            value = getattr(args, option)
            if value is not None:
                flag = "--stats-out" if option == "state_stats" else "--" + option.replace("_", "-")
                argv += [flag, str(value)]
        processes.append(spec(STATE_SERVER, None, first, argv, {**base, "OMP_NUM_THREADS": "1"}))

    worker_hosts = [hosts[slot % len(hosts)] for slot in range(n)]
    for slot, host in enumerate(worker_hosts):
        threads = args.omp_threads or max(1, cpu_count // worker_hosts.count(host))
        env = {**base, "OMP_NUM_THREADS": str(threads),
               "MXHET_SYNC": args.sync, "MXHET_SLOT": str(slot), "MXHET_NUM_SLOTS": str(n),
               "MXHET_CONTEXT": args.contexts[slot], "MXHET_SLOWDOWN": repr(args.slowdowns[slot]),
               "MXHET_STATE_SERVER": state_server, "MXHET_NET_DELAY_MS": repr(args.net_delays[slot]),
               "MXHET_BASE_ITER_S": repr(args.base_iter),
               "MXHET_CONTROL_KEYS": getattr(args, "control_keys", "") if state_server else ""}
        if slot in args.schedules:
            env["MXHET_SLOWDOWN_SCHEDULE"] = args.schedules[slot]
        if dist:
            env.update(dmlc, DMLC_ROLE=WORKER, DMLC_NODE_HOST=host)
        processes.append(spec(WORKER, slot, host, args.command, env,
                              context=args.contexts[slot], slowdown=args.slowdowns[slot]))

    return Plan(mode=args.sync, kvstore=args.kvstore_type, launcher=args.launcher,
                root_uri=first if dist else None, root_port=root_port,
                state_server=state_server, processes=tuple(processes))


# ------------------------------------------------------------------ command line

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
    het.add_argument("--omp-threads", type=int, default=None, metavar="N",
                     help="OMP_NUM_THREADS of each worker (default: CPUs of its host / its workers)")

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
    # Every distributed job gets a State Server: the algorithm's control plane
    # for esync, ssp and adsp, and for every mode the watch on silent workers
    # (heartbeats) and the check that all workers train the same model.
    args.needs_state_server = mode.needs_state_server or mode.distributed
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
    if args.omp_threads is not None and args.omp_threads < 1:
        parser.error("--omp-threads must be >= 1, got %d" % args.omp_threads)
    _check_port(parser, "--state-server-port", args.state_server_port)
    _check_port(parser, "--root-port", args.root_port)
    if args.root_port and args.root_port == args.state_server_port:
        parser.error("--root-port and --state-server-port are both %d; they must differ" % args.root_port)
    _check_seconds(parser, "--timeout", args.timeout)
    _check_seconds(parser, "--epsilon", args.epsilon)
    _check_seconds(parser, "--heartbeat-timeout", args.heartbeat_timeout)
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
        plan = build_plan(args)
    except OSError as exc:
        print("%s: cannot prepare the job: %s" % (_PROG, exc), file=sys.stderr)
        if keys:
            shutil.rmtree(keys, ignore_errors=True)
        return EXIT_USAGE
    try:
        return run_plan(plan, timeout=args.timeout or None, job_file=args.job_file,
                        state_server_restarts=args.state_server_restarts)
    finally:
        if keys:
            shutil.rmtree(keys, ignore_errors=True)


def make_job_keys(args):
    """Create this job's CURVE keys in a new private directory; returns its path.

    Local jobs keep it in the temporary directory; ssh jobs in the working
    directory, which every host must share (see the module docstring).
    """
    from .control.auth import create_job_keys
    parent = os.getcwd() if args.launcher == "ssh" else None
    return create_job_keys(tempfile.mkdtemp(prefix=".mxhet-keys-", dir=parent))


# ------------------------------------------------------------------------ runner

def describe_exit(returncode):
    """``exited with code 3`` / ``was killed by signal SIGKILL (9)``."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return "was killed by signal %s (%d)" % (name, -returncode)
    return "exited with code %d" % returncode


class _Console:
    """Line-atomic writes of the children's and the launcher's messages."""

    def __init__(self):
        self._lock = threading.Lock()

    def write(self, stream_name, text):
        with self._lock:
            stream = getattr(sys, stream_name)
            stream.write(text)
            stream.flush()

    def say(self, text):
        self.write("stderr", "".join("%s: %s\n" % (_PROG, line) for line in text.splitlines()))


class _Child:
    """A started process, its output readers and its last stderr lines."""

    def __init__(self, spec, popen, console):
        self.spec = spec
        self.popen = popen
        self.ended_by_launcher = False
        self.stderr_tail = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._console = console
        self.readers = [
            threading.Thread(target=self._forward, args=(popen.stdout, "stdout", None),
                             name="out-%s" % spec.name, daemon=True),
            threading.Thread(target=self._forward, args=(popen.stderr, "stderr", self.stderr_tail),
                             name="err-%s" % spec.name, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    @property
    def pid(self):
        return self.popen.pid

    def _forward(self, pipe, stream_name, tail):
        prefix = "[%s] " % self.spec.name
        try:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if tail is not None:
                    tail.append(line)
                self._console.write(stream_name, prefix + line + "\n")
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def drain(self, timeout):
        """Wait up to ``timeout`` seconds for the output pipes to reach EOF."""
        deadline = time.monotonic() + timeout
        for reader in self.readers:
            reader.join(max(0.0, deadline - time.monotonic()))

    def signal_group(self, signum):
        """Send ``signum`` to this child's process group (its own session)."""
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _start(spec, console):
    env = dict(os.environ)
    if not spec.remote:
        env.update(spec.env)
    popen = subprocess.Popen(list(spec.argv), env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return _Child(spec, popen, console)


def end_children(children, kill_grace=DEFAULT_KILL_GRACE_S):
    """End every child's process group: SIGTERM, then SIGKILL after ``kill_grace`` s.

    Groups whose leader has already exited are signalled too, so that a
    grandchild left behind (e.g. under a shell) is ended as well.
    """
    for child in children:
        if child.popen.poll() is None:
            child.ended_by_launcher = True
        child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + kill_grace
    while time.monotonic() < deadline and any(c.popen.poll() is None for c in children):
        time.sleep(0.05)
    for child in children:
        child.signal_group(signal.SIGKILL)
    for child in children:
        try:
            child.popen.wait(timeout=kill_grace)
        except subprocess.TimeoutExpired:
            pass


def _write_json_atomic(path, data):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def job_record(plan, children, status, exit_code, started):
    """The JSON-ready job description written to ``--job-file``."""
    processes = []
    for child in children:
        spec, code = child.spec, child.popen.returncode
        processes.append({
            "role": spec.role, "slot": spec.slot, "host": spec.host, "pid": child.pid,
            "context": spec.context, "slowdown": spec.slowdown,
            "exit_code": code, "ended_by_launcher": child.ended_by_launcher,
        })
    return {
        "format": JOB_FILE_FORMAT, "mode": plan.mode, "kvstore": plan.kvstore, "launcher": plan.launcher,
        "root_uri": plan.root_uri, "root_port": plan.root_port, "state_server": plan.state_server,
        "started_unix": started, "status": status, "exit_code": exit_code, "processes": processes,
    }


class _Job:
    """State of one :func:`run_plan` call."""

    def __init__(self, plan, timeout, job_file, server_grace, worker_grace, kill_grace, poll_interval,
                 state_server_restarts=0):
        self.plan = plan
        self.state_server_restarts = state_server_restarts
        self.worker_grace = worker_grace
        self.timeout = timeout
        self.job_file = job_file
        self.server_grace = server_grace
        self.kill_grace = kill_grace
        self.poll_interval = poll_interval
        self.console = _Console()
        self.children = []
        self.signal_received = None
        self.started = time.time()

    def write_job_file(self, status, exit_code):
        if not self.job_file:
            return
        try:
            _write_json_atomic(self.job_file, job_record(self.plan, self.children, status, exit_code,
                                                         self.started))
        except OSError as exc:
            self.console.say("cannot write the job file %r: %s" % (self.job_file, exc))

    def report_failure(self, child, why):
        child.drain(OUTPUT_DRAIN_S)
        spec = child.spec
        self.console.say("%s (pid %d on %s) %s; ending the job" % (spec.name, child.pid, spec.host, why))
        if child.stderr_tail:
            self.console.say("last %d stderr lines of %s:" % (len(child.stderr_tail), spec.name))
            self.console.write("stderr", "".join("  | %s\n" % line for line in child.stderr_tail))
        else:
            self.console.say("%s wrote nothing to stderr" % spec.name)

    def _interrupted(self, deadline):
        """The exit code when the job must stop now for a signal or the timeout, else None."""
        if self.signal_received is not None:
            name = signal.Signals(self.signal_received).name
            self.console.say("got %s; ending the job" % name)
            return EXIT_SIGINT if self.signal_received == signal.SIGINT else EXIT_SIGTERM
        if deadline is not None and time.monotonic() >= deadline:
            self.console.say("timeout: the job ran longer than %g s; ending it" % self.timeout)
            return EXIT_TIMEOUT
        return None

    def watch(self):
        """Poll the children until the job is over; returns the exit code."""
        deadline = None if not self.timeout else time.monotonic() + self.timeout
        workers = [c for c in self.children if c.spec.role == WORKER]
        others = [c for c in self.children if c.spec.role != WORKER]
        ps_nodes = [c for c in others if c.spec.role in (SCHEDULER, SERVER)]
        grace_deadline = None
        restarts_left = self.state_server_restarts
        early = None  # (service that exited 0 before the workers, deadline for the workers)
        while True:
            code = self._interrupted(deadline)
            if code is not None:
                return code
            for child in self.children:
                child.popen.poll()
            workers_done = all(c.popen.returncode == 0 for c in workers)
            if not workers_done:
                restarts_left = self._restart_state_server(others, restarts_left)
            failed = [(c, describe_exit(c.popen.returncode)) for c in self.children
                      if c.popen.returncode not in (None, 0)
                      # once the workers are done, the State Server's fate no longer matters
                      and not (workers_done and c.spec.role == STATE_SERVER)]
            if not workers_done:
                # A service may legitimately stop a moment before the last worker
                # process is gone (PS-LITE's final barrier, the State Server's
                # goodbyes); the workers get a short grace to follow it.
                # The State Server exits 0 once every worker said goodbye, which
                # a worker does before its last work (rank 0 then evaluates).
                stopped = [c for c in others if c.popen.returncode == 0 and c.spec.role != STATE_SERVER]
                if stopped and early is None:
                    early = (stopped[0], time.monotonic() + self.worker_grace)
                if early is not None and time.monotonic() >= early[1]:
                    running = ", ".join(c.spec.name for c in workers if c.popen.returncode is None)
                    failed.append((early[0], "exited with code 0 while workers were still running (%s)"
                                   % running))
            if failed:
                for child, why in failed:
                    self.report_failure(child, why)
                return EXIT_FAILED
            if grace_deadline is None and workers_done:
                self.console.say("all %d workers finished" % len(workers))
                grace_deadline = time.monotonic() + self.server_grace
            if grace_deadline is not None:
                running = [c for c in ps_nodes if c.popen.returncode is None]
                if not running:
                    return EXIT_OK
                if time.monotonic() >= grace_deadline:
                    self.console.say("%s still running %g s after the workers finished; ending them"
                                     % (", ".join(c.spec.name for c in running), self.server_grace))
                    return EXIT_OK
            time.sleep(self.poll_interval)

    def _restart_state_server(self, others, restarts_left):
        """Start a State Server that died unexpectedly again, on the same address.

        Workers retry their requests with back-off and register again. Not
        restarted: a clean exit (0), a usage error (2) or a hung worker (4).
        """
        for index, child in enumerate(self.children):
            code = child.popen.returncode
            if child.spec.role != STATE_SERVER or code in (None, 0, EXIT_USAGE, EXIT_STATE_SERVER_SILENT_WORKER):
                continue
            if restarts_left <= 0:
                return restarts_left
            child.drain(OUTPUT_DRAIN_S)
            self.console.say("state-server (pid %d) %s; restarting it on the same address (%d restart(s) left)"
                             % (child.pid, describe_exit(code), restarts_left - 1))
            fresh = _start(child.spec, self.console)
            self.children[index] = fresh
            others[others.index(child)] = fresh
            self.write_job_file("running", None)
            return restarts_left - 1
        return restarts_left

    def on_signal(self, signum, _frame):
        self.signal_received = signum


def run_plan(plan, timeout=None, job_file=None, *, server_grace=DEFAULT_SERVER_GRACE_S,
             worker_grace=DEFAULT_WORKER_GRACE_S, kill_grace=DEFAULT_KILL_GRACE_S,
             poll_interval=DEFAULT_POLL_INTERVAL_S, state_server_restarts=DEFAULT_STATE_SERVER_RESTARTS):
    """Start ``plan``'s processes, forward their output, wait for the job to end.

    Args:
        plan: from :func:`build_plan`.
        timeout: seconds after which the whole job is ended (exit 124); None or
            0 for no limit.
        job_file: path of the JSON job description, written after the start and
            rewritten at the end with every exit code; None for none.
        server_grace: seconds the scheduler and servers get to exit on their own
            after every worker exited 0.
        worker_grace: seconds the workers get to exit 0 after the scheduler, a
            server or the State Server exited 0 before them; past it the job
            has failed.
        kill_grace: seconds between SIGTERM and SIGKILL when ending a process.
        poll_interval: seconds between two checks of the children.
        state_server_restarts: how often a State Server that died (crashed or
            was killed) is started again on the same address while workers
            run; workers retry and register again (0 = the job fails instead).

    Returns:
        The exit code: 0, 1, 124, 130 or 143 (see the module docstring).
    """
    job = _Job(plan, timeout, job_file, server_grace, worker_grace, kill_grace, poll_interval,
               state_server_restarts)
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in handled:
            previous[signum] = signal.signal(signum, job.on_signal)
    code, status = EXIT_FAILED, "failed"
    try:
        for spec in plan.processes:
            try:
                job.children.append(_start(spec, job.console))
            except OSError as exc:
                job.console.say("cannot start %s (%s): %s" % (spec.name, shlex.join(spec.argv), exc))
                return code
        job.write_job_file("running", None)
        code = job.watch()
        status = {EXIT_OK: "succeeded", EXIT_TIMEOUT: "timeout", EXIT_SIGINT: "interrupted",
                  EXIT_SIGTERM: "interrupted"}.get(code, "failed")
        return code
    finally:
        end_children(job.children, kill_grace)
        for child in job.children:
            child.drain(OUTPUT_DRAIN_S)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        job.write_job_file(status, code)
        job.console.say("job %s (exit code %d)" % (status, code))


if __name__ == "__main__":
    sys.exit(main())
