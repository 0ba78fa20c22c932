"""Run one training job through the launcher and collect its summary."""
import concurrent.futures
import dataclasses
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time

from tqdm import tqdm

from mxhet.errors import ConfigError


@dataclasses.dataclass
class JobSpec:
    """One job: a mode on an emulated cluster.

    ``slowdowns`` has one factor per worker (its length is the worker count);
    ``contexts`` one context per worker or a single one for all.
    """
    mode: str
    slowdowns: tuple
    model: str = "smallcnn"
    time_budget: float = 60.0
    batch_size: int = 64
    lr: float = 0.05
    dist: str = "iid"
    target_accuracy: float = 0.8
    seed: int = 0
    servers: int = 1
    contexts: tuple = ("cpu",)
    input_size: int = 0
    eval_interval: float = 2.0
    extra_train_args: tuple = ()
    launcher_args: tuple = ()
    startup_allowance: float = 240.0  # seconds for start-up and evaluation beyond the budget
    engine: str = "cluster"           # "cluster": real processes; "sim": mxhet.sim in virtual time
    sim_args: tuple = ()              # options for the simulator only

    @property
    def label(self):
        return "%s-%s-%s" % (self.model, self.mode, self.dist)

    def train_argv(self, out_dir):
        """``python -m mxhet.train``'s flags (the simulator takes the same)."""
        argv = ["--model", self.model, "--batch-size", str(self.batch_size), "--lr", "%g" % self.lr,
                "--dist", self.dist, "--time-budget", "%g" % self.time_budget,
                "--target-accuracy", "%g" % self.target_accuracy, "--seed", str(self.seed),
                "--eval-interval", "%g" % self.eval_interval, "--metrics-out", out_dir]
        if self.input_size:
            argv += ["--input-size", str(self.input_size)]
        return argv + list(self.extra_train_args)

    def launch_argv(self, out_dir):
        """The command of the run: ``mxhet-launch ... -- python -m mxhet.train ...``
        on the cluster engine, ``python -m mxhet.sim ...`` on the simulator."""
        n = 1 if self.mode == "local" else len(self.slowdowns)
        slowdowns = ",".join("%g" % f for f in self.slowdowns[:n])
        if self.engine == "sim":
            gpus = [c for c in self.contexts if c.startswith("gpu")]
            return ([sys.executable, "-m", "mxhet.sim", "-n", str(n), "--sync", self.mode, "--slowdown", slowdowns,
                     "--contexts", gpus[0] if gpus else "cpu"] + _sim_options(self.launcher_args)
                    + list(self.sim_args) + self.train_argv(out_dir))
        return [sys.executable, "-m", "mxhet.launcher"] + self.launcher_argv(out_dir)

    def launcher_argv(self, out_dir):
        """``mxhet-launch``'s arguments for the cluster engine (for :func:`mxhet.launcher.plan`)."""
        n = 1 if self.mode == "local" else len(self.slowdowns)
        slowdowns = ",".join("%g" % f for f in self.slowdowns[:n])
        argv = ["-n", str(n), "--sync", self.mode, "--slowdown", slowdowns,
                "--contexts", ",".join(self.contexts[:n] if len(self.contexts) > 1 else self.contexts),
                "--timeout", "%d" % (self.time_budget + self.startup_allowance),
                "--job-file", os.path.join(out_dir, "job.json")]
        if self.mode != "local":
            argv += ["-s", str(self.servers)]
        argv += list(self.launcher_args)
        return argv + ["--", sys.executable, "-m", "mxhet.train"] + self.train_argv(out_dir)


SIM_LAUNCHER_OPTIONS = ("--base-iter", "--net-delay-ms", "--slowdown-schedule", "--epsilon", "--staleness",
                        "--adsp-period", "--adsp-epoch", "--adsp-window")
"""Launcher options that mean the same to the simulator (each takes one value)."""


def _sim_options(launcher_args):
    """The launcher options the simulator takes; the others (processes, threads) have no meaning there."""
    out, args = [], list(launcher_args)
    for option, value in zip(args[::2], args[1::2]):
        if option in SIM_LAUNCHER_OPTIONS:
            out += [option, value]
    return out


class JobFailed(RuntimeError):
    """A job exited non-zero or wrote no summary."""


def not_run(spec, run_dir, desc, position, leave):
    """``--report-only``'s runner: a run not finished in ``--out`` is reported, not started."""
    raise JobFailed("not finished yet (--report-only runs nothing)")


class Interrupted(BaseException):
    """The bench was stopped while this job ran (its process was ended)."""


STOP = threading.Event()
"""Set when the bench stops (a signal reached its main thread): simulator jobs
running on other threads end their processes and raise :class:`Interrupted`,
and jobs not started yet never start."""

_SIGNALLED = []   # the interruption a signal handler raised (interrupt), until run_each has acted on it


def interrupt(exc):
    """Raise ``exc`` from a signal handler, and keep it for :func:`run_each`.

    Python runs a handler in the main thread wherever it happens to be, also
    inside an object's ``__del__`` (MXNet's handles free themselves there),
    where an exception is printed and dropped: the bench went on as if no
    signal had come. :func:`run_each` raises a kept interruption at its next
    poll, so the bench stops within a second either way.
    """
    _SIGNALLED.append(exc)
    raise exc


def canonical(argv):
    """A run's command without the interpreter, ``-m module`` and ``--metrics-out DIR``: equal for two runs
    that compute the same thing wherever they write."""
    args = list(argv)
    if "-m" in args:
        args = args[args.index("-m") + 2:]
    if "--metrics-out" in args:
        i = args.index("--metrics-out")
        del args[i:i + 2]
    return tuple(args)


def usable_cores():
    """The number of cores this process may run on (its CPU affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def compute_threads(env=None):
    """The OpenMP threads MXNet computes with in a process started with ``env`` (default ``os.environ``).

    ``MXNET_OMP_MAX_THREADS``, else ``OMP_NUM_THREADS``, else MXNet's default: half of the processors on
    x86 (at least one), all of them elsewhere. Recorded with every result, because the thread count
    changes both the speed and the order of floating-point sums.
    """
    import platform
    env = os.environ if env is None else env
    for name in ("MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS"):
        value = env.get(name, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    cores = usable_cores()
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    return max(1, cores // 2) if x86 else cores


def share_cores(jobs, contexts, env=None):
    """Set ``env`` (default ``os.environ``, which the jobs inherit) for simulator jobs run ``jobs`` at once.

    Each job computes on one thread (``OMP_NUM_THREADS=1``), so ``jobs`` runs share the cores instead of
    fighting over them. Where every device is a CPU, MXNet's ``NaiveEngine`` runs each operator in the
    simulator's own thread instead of a worker thread beside it, which competes with the other jobs
    (two ResNet-18 runs at once took 7% longer with it; the whole paper-sim bench 1%, with
    bit-identical models). ``OMP_NUM_THREADS`` is always set (a global setting of the caller's would make the
    jobs oversubscribe the cores); an engine the caller chose is kept.

    One job at a time computes on every core this process may use, unless the caller set
    ``OMP_NUM_THREADS``: left unset, MXNet computes on half of the processors on x86 (it assumes two
    hyper-threads a core), one thread on a 2-core machine, where two ran a ResNet-18 simulator run 1.5-1.8x as
    fast (docs/bench.md). So two benches started side by side at ``--jobs 1`` each take every core: start
    each with ``OMP_NUM_THREADS=1 MXNET_ENGINE_TYPE=NaiveEngine``.
    """
    env = os.environ if env is None else env
    if jobs <= 1:
        env.setdefault("OMP_NUM_THREADS", str(usable_cores()))
        return env
    env["OMP_NUM_THREADS"] = "1"
    if all(str(c).startswith("cpu") for c in contexts):
        env.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")
    return env


_POOLS = itertools.count()


def run_each(items, fn, jobs):
    """``[fn(item) for item in items]``, ``jobs`` at once on threads.

    When the calling thread is interrupted (SIGTERM's SystemExit, Ctrl-C), the
    items running on other threads are told to end (:data:`STOP`: a simulator
    job ends its process) and those not started never start; then the
    interruption goes on up. :data:`STOP` is cleared first, whatever ``jobs``: it
    belongs to one run, and a process that runs the bench again (a test
    session, a notebook) must not find an earlier interruption's.
    """
    STOP.clear()
    if jobs == 1:
        return [fn(item) for item in items]
    prefix = "run-each-%d" % next(_POOLS)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix=prefix)
    try:
        futures = [pool.submit(fn, item) for item in items]
        # poll rather than block: a signal that lands between the interpreter's last check and the main
        # thread's blocking wait on a lock is only handled once that lock is released (here: when some job
        # ends, perhaps after hours); a wait with a timeout handles it within a second
        pending = set(futures)
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=1.0,
                                                    return_when=concurrent.futures.FIRST_EXCEPTION)
            for future in done:
                future.result()   # the first failure goes up now, as pool.map would raise it
            if _SIGNALLED:   # an interruption a finalizer swallowed (interrupt)
                raise _SIGNALLED[0]
        return [future.result() for future in futures]
    except BaseException:
        _SIGNALLED.clear()
        STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        # an interruption inside submit, between a thread's start and the pool recording it, leaves that
        # thread out of the pool's set: join it by name
        for thread in threading.enumerate():
            if thread.name.startswith(prefix + "_"):
                thread.join()
        raise
    finally:
        pool.shutdown()


def run_job(spec, out_dir, progress=None, hooks=()):
    """Run ``spec`` with its output in ``out_dir/job.log``; return its summary dict.

    Args:
        progress: optional callable(seconds), called about twice a second: wall
            seconds since the start on the cluster engine, the simulator's
            virtual seconds of training on the simulator.
        hooks: cluster engine only: more launcher hooks (see
            :class:`mxhet.launcher.supervisor.Supervisor`), e.g. the fault bench's kill.

    Raises:
        JobFailed: with the tail of the job's log.
    """
    if STOP.is_set():
        raise Interrupted("the bench is stopping: %s not started" % spec.label)
    os.makedirs(out_dir, exist_ok=True)
    summary_path = os.path.join(out_dir, "summary.json")
    if os.path.exists(summary_path):
        os.remove(summary_path)
    log_path = os.path.join(out_dir, "job.log")
    argv = spec.launch_argv(out_dir)
    start = time.monotonic()
    if spec.engine != "sim":
        return _run_cluster_job(spec, out_dir, argv, log_path, summary_path, progress, start, hooks)
    with open(log_path, "w") as log:
        log.write("$ %s\n" % " ".join(argv))
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                if STOP.is_set():
                    raise Interrupted("the bench is stopping: %s ended" % spec.label)
                if progress is not None:
                    progress(_virtual_seconds(log_path))
        except BaseException:
            proc.terminate()  # the launcher ends its own children
            proc.wait()
            raise
    if proc.returncode != 0 or not os.path.exists(summary_path):
        with open(log_path) as f:
            tail = "".join(f.readlines()[-25:])
        raise JobFailed("%s exited with code %s; last lines of %s:\n%s"
                        % (spec.label, proc.returncode, log_path, tail))
    with open(summary_path) as f:
        summary = json.load(f)
    summary["command"] = argv
    summary["wall_s"] = time.monotonic() - start
    return summary


_SIM_BAR = re.compile(rb"([0-9]+(?:\.[0-9]+)?)/[0-9]+(?:\.[0-9]+)? \[")


def _virtual_seconds(log_path):
    """The virtual seconds a simulator run's own progress bar last showed in its log (0 before any)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 512))
            found = _SIM_BAR.findall(f.read())
    except OSError:
        return 0.0
    return float(found[-1]) if found else 0.0


class _Progress:
    """Launcher hook: calls ``progress(elapsed_seconds)`` about twice a second."""

    def __init__(self, progress, start):
        self.progress, self.start, self.last = progress, start, 0.0

    def polled(self, _supervisor):
        now = time.monotonic()
        if self.progress is not None and now - self.last >= 0.5:
            self.last = now
            self.progress(now - self.start)


def _run_cluster_job(spec, out_dir, argv, log_path, summary_path, progress, start, hooks=()):
    """The cluster engine through the launcher's API (in this process): plan,
    run with the output in ``job.log``, and the per-process exit codes from
    the returned JobResult."""
    from mxhet import launcher
    with open(log_path, "w") as log:
        log.write("$ %s\n" % " ".join(argv))
        log.flush()
        try:
            result = launcher.run(launcher.plan(spec.launcher_argv(out_dir)), out=log,
                                  hooks=[_Progress(progress, start), *hooks])
        except ConfigError as exc:
            raise JobFailed("%s: bad launcher arguments: %s" % (spec.label, exc)) from None
    if result.status == "interrupted":  # the launcher took the bench's SIGINT/SIGTERM and ended the job
        if result.exit_code == launcher.EXIT_SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(result.exit_code)
    if not result.ok or not os.path.exists(summary_path):
        with open(log_path) as f:
            tail = "".join(f.readlines()[-25:])
        blamed = "; ".join("%s on %s %s" % (p.name, p.host, p.failure) for p in result.failures)
        raise JobFailed("%s exited with code %s%s; last lines of %s:\n%s"
                        % (spec.label, result.exit_code, " (%s)" % blamed if blamed else "", log_path, tail))
    with open(summary_path) as f:
        summary = json.load(f)
    summary["command"] = argv
    summary["wall_s"] = time.monotonic() - start
    return summary


def run_with_bar(spec, out_dir, desc, position=None, leave=True, hooks=()):
    """Run one job under a tqdm bar that follows its training time (``hooks``: see :func:`run_job`)."""
    first_snapshot = os.path.join(out_dir, "snapshots", "000000.params")
    with tqdm(total=int(spec.time_budget), desc=desc, unit="s", position=position, leave=leave,
              bar_format="{desc} {bar} {n_fmt}/{total_fmt} s of training [{elapsed}]") as bar:
        state = {}

        def progress(elapsed):
            if spec.engine == "sim":   # virtual seconds of training already
                bar.update(max(0, min(int(spec.time_budget), int(elapsed)) - bar.n))
                return
            if "start" not in state and os.path.exists(first_snapshot):
                state["start"] = elapsed  # training starts with the first snapshot
            if "start" in state:
                done = min(int(spec.time_budget), int(elapsed - state["start"]))
                bar.update(max(0, done - bar.n))
        summary = run_job(spec, out_dir, progress, hooks)
        bar.update(bar.total - bar.n)
    return summary


def machine_info(contexts=()):
    """CPU model, cores, MXNet's compute threads, GPUs, Python and MXNet versions, and the contexts used."""
    import platform

    import mxnet as mx
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": compute_threads(), "python": platform.python_version(),
            "mxnet": mx.__version__, "gpus": mx.context.num_gpus(), "contexts": sorted(set(contexts)),
            "platform": platform.platform()}
