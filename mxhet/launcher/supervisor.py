"""The supervisor: start a plan's processes, forward their output, watch them
and end them together.

It is the executor of :class:`~mxhet.launcher.watch.JobWatch`: at each poll
it observes the children (exit codes, last output, an uncaught exception at
the end of their stderr, their CPU time) and carries out the decision. Remote
processes (``--launcher ssh``) report their pid first (see
:data:`~mxhet.launcher.jobplan.REMOTE_PID_MARK`); when the job ends the
launcher ends their process groups over ssh as well as the local ssh clients.
"""
import collections
import dataclasses
import errno
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from .jobplan import (DEFAULT_KILL_GRACE_S, DEFAULT_POLL_INTERVAL_S, DEFAULT_SERVER_GRACE_S,
                   DEFAULT_STATE_SERVER_RESTARTS, DEFAULT_WORKER_GRACE_S, EXIT_FAILED, EXIT_OK, EXIT_SIGINT,
                   EXIT_SIGTERM, EXIT_TIMEOUT, JOB_FILE_FORMAT, LOCAL_HOST, OUTPUT_DRAIN_S, REMOTE_PID_MARK,
                   STDERR_TAIL_LINES, WORKER, with_env)
from .codes import PROGRESS_LATE, PROGRESS_STARTED, SCHEDULER, SERVER, SPARE
from .watch import (DEFAULT_HANG_GRACE_S, DEFAULT_LATE_GRACE_S, DEFAULT_ORPHAN_GRACE_S, DEFAULT_START_GRACE_S,
                    JobWatch, Observation, describe_exit, exit_cause)

_PROG = "mxhet-launch"
#: Seconds between two reads of a child's CPU time (/proc here; over ssh for
#: a remote child, and then only while a failure rule needs it).
CPU_PROBE_INTERVAL_S = 1.0
REMOTE_CPU_PROBE_INTERVAL_S = 5.0
#: Seconds one remote CPU probe may take.
REMOTE_PROBE_TIMEOUT_S = 5.0
#: Seconds an ssh call that ends remote processes may take.
REMOTE_KILL_TIMEOUT_S = 15.0
#: Seconds the ssh call that writes a remote spare's order on its host may take (``--max-restarts`` above 1,
#: ``--launcher ssh``); past it the order counts as not delivered.
REMOTE_ORDER_TIMEOUT_S = 15.0
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b")


class _Console:
    """Line-atomic writes of the children's and the launcher's messages, to
    this process's stdout/stderr or, with ``out``, all to one text stream."""

    def __init__(self, out=None):
        self._lock = threading.Lock()
        self._out = out

    def write(self, stream_name, text):
        with self._lock:
            stream = self._out if self._out is not None else getattr(sys, stream_name)
            stream.write(text)
            stream.flush()

    def say(self, text):
        self.write("stderr", "".join("%s: %s\n" % (_PROG, line) for line in text.splitlines()))


class _Child:
    """A started process, its output readers, its last stderr lines, when it
    last wrote, whether its stderr ends in an uncaught exception, and (remote)
    its pid on its host."""

    def __init__(self, spec, popen, console):
        self.spec = spec
        self.popen = popen
        self.ended_by_launcher = False
        self.stderr_tail = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.last_output = time.monotonic()
        self.exception = False
        self.remote_pid = None
        self._in_traceback = False
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

    def _classify(self, line, stream_name):
        # A Python traceback: "Traceback (most recent call last):", indented
        # frames, then the exception's own line ("RuntimeError: ...").
        if stream_name == "stderr" and line.startswith("Traceback (most recent call last):"):
            self._in_traceback, self.exception = True, False
        elif self._in_traceback and stream_name == "stderr" and line and not line.startswith(" "):
            self._in_traceback = False
            self.exception = bool(_EXCEPTION_LINE.match(line))
        elif line.strip() and not self._in_traceback:
            self.exception = False  # it went on writing after the exception

    def _forward(self, pipe, stream_name, tail):
        prefix = "[%s] " % self.spec.name
        try:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if self.spec.remote and self.remote_pid is None and line.startswith(REMOTE_PID_MARK):
                    try:
                        self.remote_pid = int(line[len(REMOTE_PID_MARK):])
                    except ValueError:
                        pass
                    else:
                        continue
                self.last_output = time.monotonic()
                self._classify(line, stream_name)
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

    def cpu_seconds(self):
        """CPU seconds used by this child's process group so far: from /proc
        here, or on its host over ssh for a remote one; None when unknown.
        Exited members no longer count, which only makes a group look idler
        than it was."""
        if not self.spec.remote:
            return process_group_cpu(self.pid)
        if not (self.remote_pid and self.spec.ssh):
            return None
        try:
            done = subprocess.run([*self.spec.ssh, self.spec.host, remote_cpu_command(self.remote_pid)],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=REMOTE_PROBE_TIMEOUT_S)
            return parse_remote_cpu(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            return None


def remote_cpu_command(pgid):
    """A POSIX shell command printing the clock tick rate, then the user + system
    ticks of the processes in group ``pgid`` (from /proc; see :func:`process_group_cpu`)."""
    return ("getconf CLK_TCK; cat /proc/[0-9]*/stat 2>/dev/null | "
            "awk -v g=%d '{sub(/^.*\\) /, \"\"); if ($3 == g) s += $12 + $13} END {print s + 0}'" % pgid)


def parse_remote_cpu(text):
    """Seconds from :func:`remote_cpu_command`'s output, or None."""
    try:
        ticks, total = text.split()
        return float(total) / float(ticks)
    except ValueError:
        return None


def process_group_cpu(pgid):
    """CPU seconds (user + system) of the live processes in group ``pgid``, from /proc; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after "(comm)": state ppid pgrp session ... utime(12) stime(13)
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


#: Run before a child's command (which replaces it, same pid): ask the kernel
#: to send SIGTERM when the launcher's thread that started it dies (Linux
#: PR_SET_PDEATHSIG), so that a launcher killed with SIGKILL -- or a bench
#: running jobs through the API -- leaves no job behind; exit if the launcher
#: is already gone. Elsewhere the command starts as it is.
_DIE_WITH_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def _command(argv):
    """``argv`` behind the :data:`_DIE_WITH_LAUNCHER` shim on Linux.

    Raises:
        FileNotFoundError: if ``argv[0]`` cannot be found (as Popen would).
    """
    if not sys.platform.startswith("linux"):
        return list(argv)
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", argv[0])
    return [sys.executable, "-S", "-c", _DIE_WITH_LAUNCHER, str(os.getpid()), *argv]


def _fresh_port(spec):
    """A worker started again (``--max-restarts``) listens on a new PS-LITE port (``PORT``), not its slot's.
    PS-LITE gives it the id of *a* dead worker -- with two dead, maybe the other slot's -- and every other
    node connects that id to its address only if no node was connected at that address before
    (ps-lite ``Van::ProcessAddNodeCommand``'s ``connected_nodes_``, keyed by host:port): at its slot's old
    port, the other dead worker's, the server's answers to the new id would go to the dead process's address
    and the replacement would wait for ever in its first request (``kv.set_optimizer``). Set it with
    :func:`~.jobplan.with_env`, which builds a remote worker's ssh command again with it. On a remote host
    the port is, as the plan's are, a likely-free guess checked on this machine (PS-LITE binds another at
    random if it is taken there)."""
    if "PORT" not in spec.env:
        return {}
    from .ports import find_free_port
    return {"PORT": str(find_free_port(LOCAL_HOST if spec.remote else spec.host or LOCAL_HOST))}


def _start(spec, console, extra_env=None):
    env = dict(os.environ)
    if not spec.remote:
        env.update(spec.env)
        env.update(extra_env or {})
    popen = subprocess.Popen(_command(spec.argv), env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return _Child(spec, popen, console)


def _end_remote(children, signum, timeout=REMOTE_KILL_TIMEOUT_S):
    """Signal the process groups of remote children on their hosts, one ssh
    call per host (in parallel), bounded by ``timeout`` seconds."""
    by_host = collections.defaultdict(list)
    for child in children:
        if child.spec.remote and child.remote_pid and child.spec.ssh:
            by_host[(child.spec.ssh, child.spec.host)].append(child.remote_pid)
    calls = []
    for (ssh, host), pids in by_host.items():
        command = "; ".join("kill -%d -- -%d 2>/dev/null" % (signum, pid) for pid in pids) + "; true"
        try:
            calls.append(subprocess.Popen([*ssh, host, command], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    for call in calls:
        try:
            call.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(call.pid, signal.SIGKILL)
            call.wait()


def end_children(children, kill_grace=DEFAULT_KILL_GRACE_S):
    """End every child's process group: SIGTERM, then SIGKILL after ``kill_grace`` s.

    Groups whose leader has already exited are signalled too, so that a
    grandchild left behind (e.g. under a shell) is ended as well. Remote
    children are ended on their hosts over ssh first (ending the local ssh
    client does not end the remote command: ssh forwards no signal without a
    terminal).
    """
    # Remote commands still running (their ssh client is): a remote command
    # that ended has closed its channel, and its client has exited with it.
    remote = [c for c in children if c.spec.remote and c.remote_pid and c.popen.poll() is None]
    if remote:
        _end_remote(remote, signal.SIGTERM)
    for child in children:
        if child.popen.poll() is None:
            child.ended_by_launcher = True
        child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + kill_grace
    while time.monotonic() < deadline and any(c.popen.poll() is None for c in children):
        time.sleep(0.05)
    if remote:
        _end_remote(remote, signal.SIGKILL)
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


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """One process of a finished job."""
    role: str
    slot: Optional[int]
    host: str
    pid: int                      # of the local process (the ssh client for a remote one)
    exit_code: Optional[int]      # negative: killed by that signal
    ended_by_launcher: bool
    context: Optional[str] = None
    slowdown: Optional[float] = None
    remote_pid: Optional[int] = None
    failure: str = ""             # why the launcher blamed it, "" if it did not

    @property
    def name(self):
        return self.role if self.slot is None else "%s %d" % (self.role, self.slot)


@dataclasses.dataclass(frozen=True)
class JobResult:
    """What :func:`run` returns: the job's exit code and status, and every process."""
    exit_code: int
    status: str                   # succeeded, failed, timeout, interrupted
    processes: tuple              # of ProcessResult, in start order
    started_unix: float
    elapsed_s: float

    @property
    def ok(self):
        return self.exit_code == EXIT_OK

    def by_role(self, role):
        return [p for p in self.processes if p.role == role]

    @property
    def failures(self):
        """The processes the launcher blamed for a failure."""
        return [p for p in self.processes if p.failure]


def job_record(plan, children, status, exit_code, started, failures=None, worker_restarts=(), worker_exits=()):
    """The JSON-ready job description written to ``--job-file``; ``worker_restarts``: one dict
    per worker started again (``--max-restarts``: slot, cause, seconds since the start when its
    death was seen and when it was started again); ``worker_exits``: one dict per worker whose
    process ended while the job went on (``--elastic``: slot, cause, ``died_s`` since the start,
    ``unix``)."""
    failures = failures or {}
    processes = []
    for child in children:
        spec, code = child.spec, child.popen.returncode
        entry = {"role": spec.role, "slot": spec.slot, "host": spec.host, "pid": child.pid,
                 "context": spec.context, "slowdown": spec.slowdown,
                 "exit_code": code, "ended_by_launcher": child.ended_by_launcher}
        if "PORT" in spec.env:   # a worker's PS-LITE port: its rank follows it on its host
            entry["port"] = int(spec.env["PORT"])
        if spec.remote:
            entry["remote_pid"] = child.remote_pid
        if id(child) in failures:
            entry["failure"] = failures[id(child)]
        processes.append(entry)
    return {
        "format": JOB_FILE_FORMAT, "mode": plan.mode, "kvstore": plan.kvstore, "launcher": plan.launcher,
        "root_uri": plan.root_uri, "root_port": plan.root_port, "state_server": plan.state_server,
        "started_unix": started, "status": status, "exit_code": exit_code, "processes": processes,
        "worker_restarts": list(worker_restarts), "worker_exits": list(worker_exits),
    }


STATUS_OF = {EXIT_OK: "succeeded", EXIT_TIMEOUT: "timeout", EXIT_SIGINT: "interrupted", EXIT_SIGTERM: "interrupted"}


class Supervisor:
    """One run of a plan: starts, observes, decides (through :class:`JobWatch`), ends.

    ``hooks``: objects with optional methods ``started(plan, supervisor)``
    (after every process started), ``polled(supervisor)`` (each poll) and
    ``finished(result)``; a hook's exception is reported and ignored.
    """

    def __init__(self, plan, *, timeout=None, job_file=None, server_grace=DEFAULT_SERVER_GRACE_S,
                 worker_grace=DEFAULT_WORKER_GRACE_S, kill_grace=DEFAULT_KILL_GRACE_S,
                 poll_interval=DEFAULT_POLL_INTERVAL_S, state_server_restarts=DEFAULT_STATE_SERVER_RESTARTS,
                 hang_grace=DEFAULT_HANG_GRACE_S, orphan_grace=DEFAULT_ORPHAN_GRACE_S,
                 start_grace=DEFAULT_START_GRACE_S, late_grace=DEFAULT_LATE_GRACE_S, out=None, hooks=()):
        self.plan = plan
        self.timeout = timeout
        self.job_file = job_file
        self.kill_grace = kill_grace
        self.poll_interval = poll_interval
        self.watch = JobWatch(server_grace=server_grace, worker_grace=worker_grace, hang_grace=hang_grace,
                              orphan_grace=orphan_grace, start_grace=start_grace, late_grace=late_grace,
                              state_server_restarts=state_server_restarts, elastic=plan.elastic,
                              worker_restarts=getattr(plan, "worker_restarts", 0),
                              worker_restart_delay=getattr(plan, "worker_restart_delay", 0.0))
        self.progress_dir = None      # where local workers write their progress notes (MXHET_PROGRESS_FILE)
        self.console = _Console(out)
        self.hooks = tuple(hooks)
        self.children = []
        self.failures = {}            # id(child) -> why
        self.signal_received = None
        self.started = time.time()
        self._t0 = time.monotonic()   # the job record's seconds count from here
        self.worker_restarts = []     # --max-restarts: one dict per worker started again (job_record)
        self.worker_exits = []        # --elastic: one dict per worker process that ended while the job went on
        self._exit_rounds = []        # --dashboard: per worker exit, the rounds its last live report counted
        self._cpu = {}                # id(child) -> (cpu_s, read at)
        self._restart_index = []      # per worker_restarts entry: the index of the process started (or activated)
        self._spares_released = False

    # -- helpers ---------------------------------------------------------------
    def _hook(self, method, *args):
        for hook in self.hooks:
            function = getattr(hook, method, None)
            if function is not None:
                try:
                    function(*args)
                except Exception as exc:  # a hook must not take the job down
                    self.console.say("hook %s.%s failed: %s" % (type(hook).__name__, method, exc))

    def write_job_file(self, status, exit_code):
        if not self.job_file:
            return
        try:
            _write_json_atomic(self.job_file, job_record(self.plan, self.children, status, exit_code,
                                                         self.started, self.failures,
                                                         self.worker_restarts, self.worker_exits))
        except OSError as exc:
            self.console.say("cannot write the job file %r: %s" % (self.job_file, exc))

    def report_failure(self, child, why):
        child.drain(OUTPUT_DRAIN_S)
        spec = child.spec
        self.failures[id(child)] = why
        self.console.say("%s (pid %d on %s) %s; ending the job" % (spec.name, child.pid, spec.host, why))
        if child.stderr_tail:
            self.console.say("last %d stderr lines of %s:" % (len(child.stderr_tail), spec.name))
            self.console.write("stderr", "".join("  | %s\n" % line for line in child.stderr_tail))
        else:
            self.console.say("%s wrote nothing to stderr" % spec.name)

    def _cpu_of(self, child, now):
        cached = self._cpu.get(id(child))
        interval = REMOTE_CPU_PROBE_INTERVAL_S if child.spec.remote else CPU_PROBE_INTERVAL_S
        if cached is None or now - cached[1] >= interval:
            cached = (child.cpu_seconds(), now)
            self._cpu[id(child)] = cached
        return cached[0]

    def _progress_env(self, spec):
        """``MXHET_PROGRESS_FILE`` for a local worker (a remote one's note could not be read here), and
        under ``--elastic`` ``MXHET_EXITS_FILE`` (the record of :meth:`_note_exits`)."""
        if spec.role == SPARE and not spec.remote and self.progress_dir:
            return {"MXHET_SPARE_FILE": self._spare_path(spec)}
        if spec.role != WORKER or spec.remote or not self.progress_dir:
            return {}
        env = {"MXHET_PROGRESS_FILE": os.path.join(self.progress_dir, "worker-%d" % spec.slot)}
        if self.plan.elastic:
            env["MXHET_EXITS_FILE"] = self._exits_path()
        if getattr(self.plan, "slot_ranks", ()):
            env["MXHET_TAKEOVERS_FILE"] = os.path.join(self.progress_dir, "takeovers.json")
        return env

    def _spare_path(self, spec):
        """Where spare ``spec.slot`` reads the launcher's order (:mod:`mxhet.spares`): in the progress
        directory for a local spare, on its host (the plan's ``MXHET_SPARE_FILE``) for a remote one."""
        if spec.remote:
            return spec.env["MXHET_SPARE_FILE"]
        return os.path.join(self.progress_dir, "spare-%d" % spec.slot)

    def _deliver_order(self, spec, order, timeout=REMOTE_ORDER_TIMEOUT_S):
        """Put ``order`` where spare ``spec`` reads it, atomically; None once it is there, else why not.
        A remote spare's is written on its host through the plan's ssh client, bounded by ``timeout`` s."""
        from ..spares import order_text, remote_write_command, write_order
        path = self._spare_path(spec)
        if not spec.remote:
            try:
                write_order(path, order)
            except OSError as exc:
                return "cannot write %s: %s" % (path, exc)
            return None
        argv = [*spec.ssh, spec.host, remote_write_command(path)]
        try:
            call = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        except OSError as exc:
            return "cannot run %s: %s" % (argv[0], exc)
        try:
            _, err = call.communicate(order_text(order), timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(call.pid, signal.SIGKILL)   # the ssh client and anything it started here
            call.communicate()
            return "writing %s on %s over ssh took over %g s" % (path, spec.host, timeout)
        if call.returncode != 0:
            return "writing %s on %s over ssh: %s%s" % (path, spec.host, describe_exit(call.returncode),
                                                        ": " + err.strip() if err.strip() else "")
        return None

    def _activate_spare(self, decision):
        """Hand the dead worker's slot to an idle spare (``--max-restarts`` above 1): the spare takes the
        slot's environment (its data shard, slowdown, progress note; its PS-LITE identity stays its own)
        and the slot's rank in the job, and from then on is the slot's worker at its own index. Returns
        None, or why the spare's order could not be delivered (the job then fails: the spare would idle)."""
        dead, spare = self.children[decision.index], self.children[decision.spare]
        dead.drain(OUTPUT_DRAIN_S)
        self.console.say("%s (pid %d) %s" % (dead.spec.name, dead.pid, decision.note))
        _, seen, at = self.watch.restarts[-1]
        self.worker_restarts.append({
            "slot": dead.spec.slot, "cause": describe_exit(dead.popen.returncode),
            "died_s": round(seen - self._t0, 3), "restarted_s": round(at - self._t0, 3),
            "spare": spare.spec.slot, "spare_pid": spare.pid})
        self._restart_index.append(decision.spare)
        slot_spec = dead.spec
        self._note_starting(slot_spec)
        env = {k: v for k, v in slot_spec.env.items() if not k.startswith("DMLC_") and k != "PORT"}
        env.update(self._progress_env(slot_spec))
        failed = self._deliver_order(spare.spec, {"slot": slot_spec.slot, "env": env,
                                                  "rank": self.plan.slot_ranks[slot_spec.slot]})
        if failed:
            return "could not be handed %s's slot: %s" % (slot_spec.name, failed)
        # from here on it is the slot's worker on its own host; started again itself (no spare left), it
        # must not wait for an order as a spare
        own = {k: v for k, v in spare.spec.env.items() if k != "MXHET_SPARE_FILE"}
        spare.spec = dataclasses.replace(slot_spec, host=spare.spec.host, ssh=spare.spec.ssh, env=dict(own, **env))
        if "MXHET_TAKEOVERS_FILE" in env:   # local workers only: a remote chief's summary names no spare
            takeovers = [{"slot": r["slot"], "spare": r["spare"],
                          "unix": round(self.started + r["restarted_s"], 3)}
                         for r in self.worker_restarts if "spare" in r]
            try:
                _write_json_atomic(env["MXHET_TAKEOVERS_FILE"], takeovers)
            except OSError as exc:
                self.console.say("cannot write the record of the spares' takeovers: %s" % exc)
        self._feed_events()
        self.write_job_file("running", None)
        return None

    def _release_spares(self):
        """Tell every idle spare the job's workers are done: it exits 0 (:mod:`mxhet.spares`). One not told
        is ended with the services once the drain's grace is over."""
        for child in self.children:
            if child.spec.role == SPARE and child.popen.returncode is None and (child.spec.remote
                                                                               or self.progress_dir):
                failed = self._deliver_order(child.spec, {"over": True})
                if failed:
                    self.console.say("cannot release %s: %s" % (child.spec.name, failed))

    def _exits_path(self):
        return os.path.join(self.progress_dir, "exits.json")

    def _note_exits(self):
        """Record the worker exits the watch let the job go on after (``--elastic``): in the job file and,
        for the chief's summary (``mxhet.control.membership.job_events``), in ``MXHET_EXITS_FILE``."""
        seen = self.watch.departures[len(self.worker_exits):]
        for index, at in seen:
            child = self.children[index]
            self.worker_exits.append({"slot": child.spec.slot, "cause": exit_cause(child.popen.returncode),
                                      "died_s": round(at - self._t0, 3),
                                      "unix": round(self.started + (at - self._t0), 3)})
            self._exit_rounds.append(self._last_reported_round(child.spec.slot))
        if seen and self.progress_dir:
            try:
                _write_json_atomic(self._exits_path(), self.worker_exits)
            except OSError as exc:
                self.console.say("cannot write the record of worker exits: %s" % exc)
        if seen:
            self._feed_events()

    def _note_restart_ends(self):
        """Record how each restarted worker ended (``--max-restarts``): ``ended`` (its exit) and
        ``too_late`` (it came after the job's end and left with exit 0, its progress note says so:
        :func:`mxhet.modes.rounds.leave_too_late`). Returns True when a record changed."""
        changed = False
        for k, record in enumerate(self.worker_restarts):
            if "ended" in record:
                continue
            if k < len(self._restart_index):
                child = self.children[self._restart_index[k]]
            else:   # a record made without the index: the slot's newest process
                child = next((c for c in reversed(self.children)
                              if c.spec.role == WORKER and c.spec.slot == record["slot"]), None)
            if child is None or child.popen.returncode is None:
                continue
            record["ended"] = exit_cause(child.popen.returncode)
            record["too_late"] = child.popen.returncode == 0 and self._progress_of(child) == PROGRESS_LATE
            if record["too_late"]:
                self.console.say("%s, started again, came after the job's end and left (exit 0)" % child.spec.name)
            changed = True
        return changed

    def _note_starting(self, spec):
        """Replace a dead worker's progress note by ``started`` before its replacement starts (rule 6 of
        :mod:`.watch` tells a replacement still starting up from one that trains by it)."""
        path = self._progress_env(spec).get("MXHET_PROGRESS_FILE")
        if not path:
            return
        try:
            with open(path + ".launcher.tmp", "w") as f:
                f.write(PROGRESS_STARTED)
            os.replace(path + ".launcher.tmp", path)
        except OSError as exc:
            self.console.say("cannot write the progress note of %s: %s" % (spec.name, exc))

    def _end_too_late(self, decision):
        """End a worker started again that comes after the job's end (rule 6 of :mod:`.watch`); its
        ``worker_restarts`` entry says ``ended: "ended by the launcher"``, ``too_late: true``."""
        child = self.children[decision.index]
        self.console.say("%s (pid %d) %s" % (child.spec.name, child.pid, decision.note))
        end_children([child], self.kill_grace)
        child.drain(OUTPUT_DRAIN_S)
        record = next((r for r in reversed(self.worker_restarts) if r["slot"] == child.spec.slot), None)
        if record is not None and "ended" not in record:
            record["ended"] = "ended by the launcher"
            record["too_late"] = True
        self.write_job_file("running", None)

    def _last_reported_round(self, slot):
        """The rounds the live feed of ``slot``'s worker last counted (``--dashboard``; None without one):
        read when its process ended, before a restarted worker overwrites the feed."""
        live_dir = getattr(self.plan, "live_dir", "")
        if not live_dir:
            return None
        from ..observe.live import read_feed
        feed = read_feed(live_dir, slot)
        return feed.get("rounds") if feed else None

    def _feed_events(self):
        """The live view's leaves and joins (``--dashboard``): the exits and the restarts, in time order."""
        live_dir = getattr(self.plan, "live_dir", "")
        if not live_dir:
            return
        from ..observe.live import write_events
        events = [{"t_s": e["died_s"], "event": "leave", "slot": e["slot"], "cause": e["cause"], "round": r}
                  for e, r in zip(self.worker_exits, self._exit_rounds)]
        events += [{"t_s": r["restarted_s"], "event": "join", "slot": r["slot"], "cause": "restarted",
                    "round": None} for r in self.worker_restarts]
        write_events(live_dir, sorted(events, key=lambda e: e["t_s"]))

    def _progress_of(self, child):
        """The worker's progress note (see :mod:`.watch`), None when it wrote none."""
        path = self._progress_env(child.spec).get("MXHET_PROGRESS_FILE")
        if not path:
            return None
        try:
            with open(path) as f:
                return f.read().strip() or None
        except OSError:
            return None

    def observe(self, now):
        """One :class:`Observation` per child (CPU and progress read only where a rule needs them)."""
        for child in self.children:
            child.popen.poll()
        running_workers = [c for c in self.children if c.spec.role == WORKER and c.popen.returncode is None]
        # rule 2: whether a worker still runs after the scheduler or a server has exited 0 depends on its CPU use
        service_gone = any(c.spec.role in (SCHEDULER, SERVER) and c.popen.returncode == 0 for c in self.children)
        observations = []
        for child in self.children:
            running_worker = child.spec.role == WORKER and child.popen.returncode is None
            progress = self._progress_of(child) if running_worker else None
            needs_cpu = running_worker and (child.exception or len(running_workers) == 1 or progress == "trainer"
                                            or service_gone)
            observations.append(Observation(
                name=child.spec.name, role=child.spec.role, returncode=child.popen.returncode,
                last_output=child.last_output, exception=child.exception,
                cpu_s=self._cpu_of(child, now) if needs_cpu else None, progress=progress, host=child.spec.host))
        return observations

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

    # -- the run -------------------------------------------------------------------
    def prepare(self):
        """Run the plan's preparation commands (e.g. rsync); False if one failed."""
        for argv in self.plan.prepare:
            self.console.say("preparing: %s" % shlex.join(argv))
            try:
                done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=self.timeout or None)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.console.say("cannot run %s: %s" % (argv[0], exc))
                return False
            if done.returncode != 0:
                self.console.say("%s %s:\n%s" % (argv[0], describe_exit(done.returncode),
                                                  (done.stderr or done.stdout).strip()))
                return False
        return True

    def watch_loop(self):
        """Poll the children until the job is over; returns the exit code."""
        deadline = None if not self.timeout else time.monotonic() + self.timeout
        while True:
            code = self._interrupted(deadline)
            if code is not None:
                return code
            now = time.monotonic()
            decision = self.watch.decide(self.observe(now), now)
            if len(self.watch.departures) > len(self.worker_exits):
                self._note_exits()
                self.write_job_file("running", None)
            if self._note_restart_ends():
                self.write_job_file("running", None)
            self._hook("polled", self)
            if self.watch.phase == "draining" and not self._spares_released:
                self._spares_released = True
                self._release_spares()
            if decision.action == "activate":
                failed = self._activate_spare(decision)
                if failed:
                    self.report_failure(self.children[decision.spare], failed)
                    return EXIT_FAILED
                continue
            if decision.action == "restart":
                old = self.children[decision.index]
                old.drain(OUTPUT_DRAIN_S)
                self.console.say("%s (pid %d) %s" % (old.spec.name, old.pid, decision.note))
                if old.spec.role == WORKER:   # --max-restarts: the record of each restart
                    _, seen, at = self.watch.restarts[-1]
                    self.worker_restarts.append({
                        "slot": old.spec.slot, "cause": describe_exit(old.popen.returncode),
                        "died_s": round(seen - self._t0, 3), "restarted_s": round(at - self._t0, 3)})
                    self._restart_index.append(decision.index)
                spec = old.spec
                if spec.role == WORKER:
                    self._note_starting(spec)
                    # (the job file's entry then names the port it listens on)
                    spec = with_env(spec, **_fresh_port(spec))
                self.children[decision.index] = _start(spec, self.console, self._progress_env(spec))
                if old.spec.role == WORKER:
                    self._feed_events()
                self.write_job_file("running", None)
                continue
            if decision.action == "end":
                self._end_too_late(decision)
                continue
            if decision.note:
                self.console.say(decision.note)
            if decision.action == "finish":
                for index, why in decision.failures:
                    self.report_failure(self.children[index], why)
                return decision.exit_code
            time.sleep(self.poll_interval)

    def on_signal(self, signum, _frame):
        self.signal_received = signum

    def run(self):
        """Start, watch and end the job; returns its :class:`JobResult`."""
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for signum in handled:
                previous[signum] = signal.signal(signum, self.on_signal)
        code, status = EXIT_FAILED, "failed"
        t0 = time.monotonic()
        try:
            if not self.prepare():
                return self._result(code, status, t0)
            if any(spec.role == WORKER and not spec.remote for spec in self.plan.processes):
                self.progress_dir = tempfile.mkdtemp(prefix="mxhet-progress-")
            for spec in self.plan.processes:
                try:
                    self.children.append(_start(spec, self.console, self._progress_env(spec)))
                except OSError as exc:
                    self.console.say("cannot start %s (%s): %s" % (spec.name, shlex.join(spec.argv), exc))
                    return self._result(code, status, t0)
            self.write_job_file("running", None)
            self._hook("started", self.plan, self)
            code = self.watch_loop()
            status = STATUS_OF.get(code, "failed")
        finally:
            end_children(self.children, self.kill_grace)
            for child in self.children:
                child.drain(OUTPUT_DRAIN_S)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.progress_dir:
                shutil.rmtree(self.progress_dir, ignore_errors=True)
            self.write_job_file(status, code)
            self.console.say("job %s (exit code %d)" % (status, code))
        result = self._result(code, status, t0)
        self._hook("finished", result)
        return result

    def _result(self, code, status, t0):
        return JobResult(
            exit_code=code, status=status, started_unix=self.started, elapsed_s=time.monotonic() - t0,
            processes=tuple(ProcessResult(
                role=c.spec.role, slot=c.spec.slot, host=c.spec.host, pid=c.pid, exit_code=c.popen.returncode,
                ended_by_launcher=c.ended_by_launcher, context=c.spec.context, slowdown=c.spec.slowdown,
                remote_pid=c.remote_pid, failure=self.failures.get(id(c), "")) for c in self.children))


def run_plan(plan, timeout=None, job_file=None, *, server_grace=DEFAULT_SERVER_GRACE_S,
             worker_grace=DEFAULT_WORKER_GRACE_S, kill_grace=DEFAULT_KILL_GRACE_S,
             poll_interval=DEFAULT_POLL_INTERVAL_S, state_server_restarts=DEFAULT_STATE_SERVER_RESTARTS,
             hang_grace=None, orphan_grace=None, start_grace=None, late_grace=DEFAULT_LATE_GRACE_S, out=None,
             hooks=()):
    """Start ``plan``'s processes, forward their output, wait for the job to end.

    Args:
        plan: from :func:`build_plan`.
        timeout: seconds after which the whole job is ended (exit 124); None or
            0 for no limit.
        job_file: path of the JSON job description, written after the start and
            rewritten at the end with every exit code; None for none.
        server_grace: seconds the scheduler and servers get to exit on their own
            after every worker exited 0.
        worker_grace: seconds the workers get to exit 0 after the scheduler or
            a server exited 0 before them; past it the job has failed.
        kill_grace: seconds between SIGTERM and SIGKILL when ending a process.
        poll_interval: seconds between two checks of the children.
        state_server_restarts: how often a State Server that died (crashed or
            was killed) is started again on the same address while workers
            run; workers retry and register again (0 = the job fails instead).
        hang_grace, orphan_grace, start_grace: seconds (see :mod:`.watch`); None: the plan's.
        late_grace: seconds a worker started again that has not finished a step gets, once every
            other worker has exited, to leave by itself before it is ended as too late (:mod:`.watch`, rule 6).
        out: a text stream for all output (default: this process's stdout and stderr).
        hooks: see :class:`Supervisor`.

    Returns:
        The exit code: 0, 1, 124, 130 or 143 (see the package docstring).
    """
    return Supervisor(
        plan, timeout=timeout, job_file=job_file, server_grace=server_grace, worker_grace=worker_grace,
        kill_grace=kill_grace, poll_interval=poll_interval, state_server_restarts=state_server_restarts,
        hang_grace=plan.hang_grace if hang_grace is None else hang_grace,
        orphan_grace=plan.orphan_grace if orphan_grace is None else orphan_grace,
        start_grace=plan.start_grace if start_grace is None else start_grace, late_grace=late_grace,
        out=out, hooks=hooks).run().exit_code
