"""The launch plan: what to start, as data (:class:`Plan` of :class:`ProcessSpec`).

:func:`build_plan` starts nothing, so unit tests can check every command line
and environment variable.
"""
import dataclasses
import functools
import ipaddress
import os
import secrets
import shlex
import sysconfig
from typing import Optional

from ..config import omp_wait_policy
from ..errors import ConfigError
from .codes import (EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, EXIT_STATE_SERVER_SILENT_WORKER,  # noqa: F401
                    EXIT_TIMEOUT, EXIT_USAGE, SCHEDULER, SERVER, SPARE, STATE_SERVER, WORKER)
from .ports import find_free_port
from .watch import DEFAULT_HANG_GRACE_S, DEFAULT_ORPHAN_GRACE_S, DEFAULT_START_GRACE_S

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
    and the State Server. ``cwd`` and ``command``: the directory and argv run on
    the host (remote processes only), from which :func:`with_env` builds the ssh
    command again.
    """
    role: str
    slot: Optional[int]
    host: str
    argv: tuple
    env: dict
    context: Optional[str] = None
    slowdown: Optional[float] = None
    remote: bool = False
    ssh: tuple = ()               # the ssh client argv up to the host (remote processes only)
    cwd: str = ""                 # remote processes only: the directory ...
    command: tuple = ()           # ... and the argv run on the host (argv is the ssh command)

    @property
    def name(self):
        """``worker 1``, ``server 0``, ``scheduler``, ``state-server``."""
        return self.role if self.slot is None else "%s %d" % (self.role, self.slot)


ELASTIC_HEARTBEAT_TIMEOUT_S = 5.0
PS_HEARTBEAT_INTERVAL_S = 1
"""``--max-restarts``: seconds between PS-LITE heartbeats of every node."""
PS_HEARTBEAT_TIMEOUT_S = 3
"""``--max-restarts``: seconds of silence after which PS-LITE's scheduler counts a node dead
(a replacement that connects earlier is given no id)."""
RESTART_MARGIN_S = 2.0
"""Seconds added to the longer of the two heartbeat timeouts before a dead worker is started again."""


def minimum_restart_delay(heartbeat_timeout=None):
    """Seconds after a worker's death before it may be started again under ``--elastic``: the longer of
    PS-LITE's and the State Server's heartbeat timeouts (``heartbeat_timeout``, None: the ``--elastic``
    default) plus :data:`RESTART_MARGIN_S`; a replacement that connects earlier is given no id."""
    return max(PS_HEARTBEAT_TIMEOUT_S, heartbeat_timeout or ELASTIC_HEARTBEAT_TIMEOUT_S) + RESTART_MARGIN_S


PS_MAX_RECOVERIES = 1
"""``--max-restarts``: worker restarts PS-LITE's recovery serves in one job. MXNet 1.9.1's scheduler keeps
every recovered node in one list it never clears and checks that the list holds one node
(``van.cc``: ``CHECK_EQ(recovery_nodes->control.node.size(), 1)``): a second recovery aborts the
scheduler, and with it the job (seen with two workers killed at once and ``--max-restarts 2``). Above it the
launcher reserves spare workers instead (:func:`spare_count`)."""


#: ``--launcher ssh``: the directory on a remote spare's host that holds the file it reads the launcher's
#: order from (``MXHET_SPARE_FILE``; :func:`remote_spare_file`). The launcher's own temporary directory is
#: not on that host; ``/tmp`` is on every POSIX host and local to it (no network file system's caching
#: between the launcher's write and the spare's poll).
REMOTE_SPARE_DIR = "/tmp"


def remote_spare_file(token, index):
    """Where remote spare ``index`` of the job ``token`` (random, one per plan: other jobs and users on the
    host cannot guess or collide with it) reads its order on its host."""
    return "%s/mxhet-spare-%s-%d" % (REMOTE_SPARE_DIR, token, index)


def spare_count(max_restarts):
    """Spare worker processes started with the job for ``--max-restarts K``: none for K <= 1 (PS-LITE's
    recovery serves the one restart), else K, one per restart (every restart then takes a spare: one
    mechanism for the whole job, and no restart depends on PS-LITE's recovery list)."""
    return max_restarts if max_restarts > PS_MAX_RECOVERIES else 0


def ps_worker_ranks(nodes):
    """PS-LITE's worker ranks of ``nodes``, a list of ``(DMLC_NODE_HOST, PORT)``, in that order: MXNet
    1.9.1's scheduler sorts the nodes by host in decreasing string order, then by increasing port
    (``van.cc``, ``ProcessAddNodeCommandAtScheduler``), and numbers them in that order."""
    order = sorted(range(len(nodes)), key=lambda i: (_Descending(nodes[i][0]), nodes[i][1]))
    ranks = [0] * len(nodes)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


@functools.total_ordering
class _Descending:
    def __init__(self, text):
        self.text = text

    def __eq__(self, other):
        return self.text == other.text

    def __lt__(self, other):
        return self.text > other.text


"""``--elastic`` without ``--heartbeat-timeout``: seconds of silence after
which the State Server drops a worker as dead (workers send a heartbeat every
second, also while they compute or wait)."""


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
    #: commands run one after the other before any process starts (e.g.
    #: ``--sync-dst-dir``'s rsync to every host); a failure ends the launch
    prepare: tuple = ()
    #: how :func:`~mxhet.launcher.run` supervises the job (from the command line)
    timeout: Optional[float] = None
    job_file: Optional[str] = None
    state_server_restarts: int = DEFAULT_STATE_SERVER_RESTARTS
    #: ``--elastic``: a worker that dies leaves the job, the others train on
    elastic: bool = False
    #: ``--max-restarts``: workers started again after they died (in all), and the seconds
    #: after a death before one is (PS-LITE and the State Server must count it dead first)
    worker_restarts: int = 0
    worker_restart_delay: float = 0.0
    hang_grace: float = DEFAULT_HANG_GRACE_S
    orphan_grace: float = DEFAULT_ORPHAN_GRACE_S
    start_grace: float = DEFAULT_START_GRACE_S
    #: directories the job owns (its CURVE keys, ...), removed when it ends
    scratch: tuple = ()
    #: ``--dashboard``: the live view's (host, port), and the directory every
    #: worker writes its live state to (``MXHET_LIVE_DIR``); None and "" without
    live_view: Optional[tuple] = None
    live_dir: str = ""
    #: ``--max-restarts`` above 1: each slot's rank in the job (what its worker's ``kv.rank`` reports, the
    #: State Server's rank), handed to the spare that takes the slot over; () without spares
    slot_ranks: tuple = ()

    def by_role(self, role):
        """The process specs of one role, in start order."""
        return [p for p in self.processes if p.role == role]


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


#: The first line a remote process writes to stderr: its pid, which is also
#: its process group (sshd starts the command in a session of its own), so
#: that the launcher can end it and its children over ssh.
REMOTE_PID_MARK = "__mxhet_remote_pid__="


def ssh_prefix(ssh_command, options=()):
    """The ssh client argv up to the host: ``ssh_command`` split, then
    ``-o BatchMode=yes`` (never prompt) and ``options``."""
    return (*shlex.split(ssh_command), "-o", "BatchMode=yes", *options)


def ssh_argv(ssh_command, host, cwd, env, argv, options=()):
    """The local command that runs ``argv`` on ``host`` in ``cwd`` with ``env``.

    ``[*ssh_command, "-o", "BatchMode=yes", *options, host,
    "cd CWD && echo __mxhet_remote_pid__=$$ >&2 && exec env K=V ... ARGV"]``,
    every part shell-quoted for the remote shell.
    """
    return (*ssh_prefix(ssh_command, options), host, remote_command(cwd, env, argv))


def remote_command(cwd, env, argv):
    """The shell command an ssh client runs on the host: ``argv`` in ``cwd`` with ``env``, after
    reporting its pid (:data:`REMOTE_PID_MARK`)."""
    assignments = " ".join(shlex.quote("%s=%s" % (key, env[key])) for key in sorted(env))
    return "cd %s && echo %s$$ >&2 && exec env %s %s" % (shlex.quote(cwd), REMOTE_PID_MARK, assignments,
                                                         shlex.join(argv))


def with_env(spec, **env):
    """``spec`` with ``env`` set in its environment on top of its own. A remote process's environment
    is part of its ssh command (:func:`ssh_argv`), which is built again with it; a local one's is
    set on the process by the supervisor."""
    merged = dict(spec.env, **env)
    if not spec.remote:
        return dataclasses.replace(spec, env=merged)
    return dataclasses.replace(spec, env=merged,
                               argv=(*spec.ssh, spec.host, remote_command(spec.cwd, merged, spec.command)))


#: Variables MXNet's ssh launcher (dmlc-tracker) passes to remote processes
#: when they are set here; ``--env NAME`` adds others. (It also passes AWS
#: credentials; mxhet does not put secrets on a command line unless asked.)
SSH_DEFAULT_ENV = ("OMP_NUM_THREADS", "LD_LIBRARY_PATH", "DMLC_INTERFACE")


def ssh_options(args):
    """``-o`` options for the ssh client from ``--ssh-port``, ``--ssh-identity``, ``--ssh-option``."""
    options = []
    if getattr(args, "ssh_port", None):
        options += ["-o", "Port=%d" % args.ssh_port]
    if getattr(args, "ssh_identity", None):
        options += ["-o", "IdentityFile=%s" % args.ssh_identity, "-o", "IdentitiesOnly=yes"]
    for option in getattr(args, "ssh_option", None) or ():
        options += ["-o", option]
    return tuple(options)


def sync_commands(args, hosts, cwd):
    """``--sync-dst-dir``: rsync the working directory to DIR on every host (as
    MXNet's ssh launcher), over the job's ssh client and options."""
    if not getattr(args, "sync_dst_dir", None) or args.launcher != "ssh":
        return ()
    rsh = shlex.join(ssh_prefix(args.ssh_command, ssh_options(args)))
    source = cwd.rstrip("/") + "/"
    return tuple(("rsync", "-az", "--rsh", rsh, source, "%s:%s" % (host, args.sync_dst_dir))
                 for host in dict.fromkeys(hosts))


def slot_ports(n, port):
    """Ports for worker slots ``0 .. n-1``, increasing with the slot.

    PS-LITE's scheduler sorts the nodes by advertised host (``DMLC_NODE_HOST``,
    in decreasing string order), then by increasing port (``PORT``), and numbers
    the workers in that order (``Van::ProcessAddNodeCommandAtScheduler``). With
    ports increasing with the slot, the workers of one host get their ranks in
    slot order: on one host, ``store.rank == MXHET_SLOT``. ``port(None)`` draws
    one free port the plan has not used yet.
    """
    return sorted(port(None) for _ in range(n))


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
    options = ssh_options(args) if remote else ()
    prepare = sync_commands(args, hosts, cwd) if remote else ()
    if prepare:
        cwd = args.sync_dst_dir  # the processes run in the synchronized copy
    first = hosts[0]
    n = args.num_workers
    dist = args.kvstore_type is not None
    num_servers = args.num_servers if dist else 0

    # every process that loads MXNet waits passively in OpenMP unless told otherwise (mxhet.config.OMP_WAIT_POLICY)
    base = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": _child_pythonpath(environ),
            "OMP_WAIT_POLICY": omp_wait_policy(environ)}
    # MXNet's --env NAME: pass this launcher's value to every process (they
    # inherit it anyway when local); over ssh also SSH_DEFAULT_ENV, when set.
    passed = {}
    if remote:
        passed.update((name, environ[name]) for name in SSH_DEFAULT_ENV if name in environ)
    passed.update((name, environ[name]) for name in getattr(args, "env_pass", ()) or () if name in environ)
    env_server = dict(getattr(args, "env_server_pairs", {}) or {})
    env_worker = dict(getattr(args, "env_worker_pairs", {}) or {})
    server_threads = getattr(args, "server_omp_threads", None)
    ps_threads = {"OMP_NUM_THREADS": str(server_threads)} if server_threads else {}
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
    spares = spare_count(getattr(args, "max_restarts", 0) or 0) if dist and getattr(args, "elastic", False) else 0
    if dist:
        root_port = port(args.root_port)
        dmlc = {
            "DMLC_PS_ROOT_URI": first,
            "DMLC_PS_ROOT_PORT": str(root_port),
            "DMLC_NUM_WORKER": str(n + spares),   # PS-LITE counts the spares as workers
            "DMLC_NUM_SERVER": str(num_servers),
        }
        if getattr(args, "max_restarts", 0):
            # PS-LITE's recovery: every node beats, the scheduler counts a silent one dead and
            # gives its id (its rank) to the next node of its role that connects.
            dmlc["PS_HEARTBEAT_INTERVAL"] = str(PS_HEARTBEAT_INTERVAL_S)

    def spec(role, slot, host, argv, env, **extra):
        argv = tuple(argv)
        ssh = ()
        if remote:
            extra.update(cwd=cwd, command=argv)
            argv = ssh_argv(args.ssh_command, host, cwd, env, argv, options)
            ssh = ssh_prefix(args.ssh_command, options)
        return ProcessSpec(role=role, slot=slot, host=host, argv=argv, env=env, remote=remote, ssh=ssh, **extra)

    server_argv = (args.python, "-m", "kvstore_ext.server")
    processes = []
    if dist:
        # OMP threads of the scheduler and servers: inherited, as under MXNet's
        # launcher, unless --server-omp-threads; --env-server applies to servers.
        processes.append(spec(SCHEDULER, None, first, server_argv,
                              {**base, **passed, **ps_threads, **dmlc, "DMLC_ROLE": SCHEDULER,
                               "DMLC_NODE_HOST": first,
                               **({"PS_HEARTBEAT_TIMEOUT": str(PS_HEARTBEAT_TIMEOUT_S)}
                                  if getattr(args, "max_restarts", 0) else {})}))
        for index in range(num_servers):
            host = hosts[index % len(hosts)]
            processes.append(spec(SERVER, index, host, server_argv,
                                  {**base, **passed, **ps_threads, **env_server, **dmlc, "DMLC_ROLE": SERVER,
                                   "DMLC_NODE_HOST": host}))

    state_server = ""
    if args.needs_state_server:
        state_port = port(args.state_server_port)
        state_server = "tcp://%s:%d" % (first, state_port)
        argv = [args.python, "-m", "mxhet.state_server",
                "--bind", _bind_address(first, state_port, args.launcher), "--num-workers", str(n)]
        if args.epsilon is not None:
            argv += ["--epsilon", repr(args.epsilon)]
        rules = getattr(args, "state_rules", None)   # None: every rule (a plan made without a mode spec)
        if rules is not None and getattr(args, "elastic", False) and "membership" not in rules:
            rules = tuple(rules) + ("membership",)   # --elastic async: its final barrier counts the live workers
        if rules is not None:
            argv += ["--rules", ",".join(rules) or "none"]
        if getattr(args, "control_keys", ""):
            argv += ["--keys", args.control_keys]
        if getattr(args, "elastic", False):
            argv += ["--elastic", "--min-workers", str(args.min_workers)]
            if args.heartbeat_timeout is None:   # a dead worker is noticed by its silence
                argv += ["--heartbeat-timeout", str(ELASTIC_HEARTBEAT_TIMEOUT_S)]
            if getattr(args, "max_restarts", 0):
                # a worker started again may come after every other worker left: it must find the State
                # Server, which tells it the job is over (the launcher ends the State Server at the job's end)
                argv += ["--until-stopped"]
        for option in ("staleness", "adsp_period", "adsp_epoch", "adsp_window", "heartbeat_timeout",
                       "state_stats", "round_deadline", "round_length", "wait_needed"):
            value = getattr(args, option, None)
            if value is not None:
                flag = "--stats-out" if option == "state_stats" else "--" + option.replace("_", "-")
                argv += [flag, str(value)]
        if getattr(args, "late_memory", False):
            argv += ["--late-memory"]
        processes.append(spec(STATE_SERVER, None, first, argv, {**base, **passed, "OMP_NUM_THREADS": "1"}))

    worker_hosts = [hosts[slot % len(hosts)] for slot in range(n)]
    used_hosts = list(dict.fromkeys(worker_hosts))
    spare_hosts = [used_hosts[j % len(used_hosts)] for j in range(spares)]   # round-robin over the workers' hosts
    # a spare's port is above every worker's: on each host the workers keep their ranks in slot order
    worker_ports = slot_ports(n + spares, port) if dist else []
    spare_ports, worker_ports = worker_ports[n:], worker_ports[:n]
    slot_ranks = ()
    spare_env = {}
    if spares:
        ranks = ps_worker_ranks(list(zip(worker_hosts + spare_hosts, worker_ports + spare_ports)))
        spare_ranks = ranks[n:]
        slot_ranks = tuple(r - sum(1 for s in spare_ranks if s < r) for r in ranks[:n])
        spare_env["MXHET_SPARE_RANKS"] = ",".join(str(r) for r in sorted(spare_ranks))
    for slot, host in enumerate(worker_hosts):
        threads = args.omp_threads or max(1, cpu_count // worker_hosts.count(host))
        env = {**base, **passed, "OMP_NUM_THREADS": str(threads), **env_worker,
               "MXHET_SYNC": args.sync, "MXHET_SLOT": str(slot), "MXHET_NUM_SLOTS": str(n),
               "MXHET_CONTEXT": args.contexts[slot], "MXHET_SLOWDOWN": repr(args.slowdowns[slot]),
               "MXHET_STATE_SERVER": state_server, "MXHET_NET_DELAY_MS": repr(args.net_delays[slot]),
               "MXHET_BASE_ITER_S": repr(args.base_iter),
               "MXHET_SLOWDOWN_DIST": getattr(args, "slowdown_dist", "fixed"),
               "MXHET_CONTROL_KEYS": getattr(args, "control_keys", "") if state_server else ""}
        if getattr(args, "elastic", False):
            env["MXHET_ELASTIC"] = "1"
        if slot in args.schedules:
            env["MXHET_SLOWDOWN_SCHEDULE"] = args.schedules[slot]
        if getattr(args, "live_dir", ""):  # --dashboard: the workers' live feed
            env["MXHET_LIVE_DIR"] = args.live_dir
        if dist:
            # PORT: PS-LITE's rank follows the slot on each host (slot_ports)
            env.update(dmlc, DMLC_ROLE=WORKER, DMLC_NODE_HOST=host, PORT=str(worker_ports[slot]), **spare_env)
        processes.append(spec(WORKER, slot, host, args.command, env,
                              context=args.contexts[slot], slowdown=args.slowdowns[slot]))
    workers = list(processes[-n:]) if n else []
    spare_token = secrets.token_hex(8) if spares and remote else ""
    for j, host in enumerate(spare_hosts):
        # a spare idles until the launcher gives it a dead worker's slot (mxhet/spares.py); its env is a
        # worker's of its host until then, its PS-LITE identity its own
        like = next(w for w in workers if w.host == host)
        env = dict(like.env, DMLC_NODE_HOST=host, PORT=str(spare_ports[j]))
        if remote:   # a local spare's order file is in the launcher's progress directory (the supervisor's)
            env["MXHET_SPARE_FILE"] = remote_spare_file(spare_token, j)
        processes.append(spec(SPARE, j, host, args.command, env))

    return Plan(mode=args.sync, kvstore=args.kvstore_type, launcher=args.launcher,
                root_uri=first if dist else None, root_port=root_port,
                state_server=state_server, processes=tuple(processes), prepare=prepare,
                timeout=getattr(args, "timeout", None) or None, job_file=getattr(args, "job_file", None),
                state_server_restarts=getattr(args, "state_server_restarts", DEFAULT_STATE_SERVER_RESTARTS),
                elastic=bool(getattr(args, "elastic", False)),
                worker_restarts=getattr(args, "max_restarts", 0) or 0,
                worker_restart_delay=max(minimum_restart_delay(args.heartbeat_timeout),
                                         getattr(args, "restart_delay", None) or 0.0)
                if getattr(args, "max_restarts", 0) else 0.0,
                hang_grace=getattr(args, "hang_grace", DEFAULT_HANG_GRACE_S),
                orphan_grace=getattr(args, "orphan_grace", DEFAULT_ORPHAN_GRACE_S),
                start_grace=getattr(args, "start_grace", DEFAULT_START_GRACE_S),
                scratch=tuple(d for d in (getattr(args, "control_keys", ""), getattr(args, "live_dir", "")) if d),
                live_view=getattr(args, "dashboard_address", None) if getattr(args, "live_dir", "") else None,
                live_dir=getattr(args, "live_dir", ""), slot_ranks=slot_ranks)
