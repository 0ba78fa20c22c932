"""The launch plan: what to start, as data (:class:`Plan` of :class:`ProcessSpec`).

:func:`build_plan` starts nothing, so unit tests can check every command line
and environment variable.
"""
import dataclasses
import ipaddress
import os
import shlex
import socket
import sysconfig
from typing import Optional

from ..errors import ConfigError

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
    from ..policy import get_spec
    return get_spec(name)


def _source_root():
    """The directory holding the ``mxhet`` and ``kvstore_ext`` packages."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
               "MXHET_SLOWDOWN_DIST": getattr(args, "slowdown_dist", "fixed"),
               "MXHET_CONTROL_KEYS": getattr(args, "control_keys", "") if state_server else ""}
        if slot in args.schedules:
            env["MXHET_SLOWDOWN_SCHEDULE"] = args.schedules[slot]
        if getattr(args, "live_dir", ""):  # --dashboard: the workers' live feed
            env["MXHET_LIVE_DIR"] = args.live_dir
        if dist:
            env.update(dmlc, DMLC_ROLE=WORKER, DMLC_NODE_HOST=host)
        processes.append(spec(WORKER, slot, host, args.command, env,
                              context=args.contexts[slot], slowdown=args.slowdowns[slot]))

    return Plan(mode=args.sync, kvstore=args.kvstore_type, launcher=args.launcher,
                root_uri=first if dist else None, root_port=root_port,
                state_server=state_server, processes=tuple(processes))
