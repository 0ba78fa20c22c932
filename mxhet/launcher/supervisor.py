"""The supervisor: start a plan's processes, forward their output, watch them
and end them together."""
import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .plan import (DEFAULT_KILL_GRACE_S, DEFAULT_POLL_INTERVAL_S, DEFAULT_SERVER_GRACE_S,
                   DEFAULT_STATE_SERVER_RESTARTS, DEFAULT_WORKER_GRACE_S, EXIT_FAILED, EXIT_OK, EXIT_SIGINT,
                   EXIT_SIGTERM, EXIT_STATE_SERVER_SILENT_WORKER, EXIT_TIMEOUT, EXIT_USAGE, JOB_FILE_FORMAT,
                   OUTPUT_DRAIN_S, SCHEDULER, SERVER, STATE_SERVER, STDERR_TAIL_LINES, WORKER)

_PROG = "mxhet-launch"


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
