"""``mxhet-bench control-plane``: queries per second and latency of the real State Server.

Each configuration starts ``python -m mxhet.state_server --heartbeat-timeout 0``
as a child process on 127.0.0.1 (an ephemeral port, read from its log line),
registers ``registered`` ranks, and drives it with ``clients`` closed-loop
clients: real DEALER sockets, one query outstanding each, every query a
fresh QUERY-STATE (new sequence number, so never a replay) of a rank the
socket registered. With ``active_ranks`` > ``clients`` each socket cycles over
several ranks, so thousands of ranks issue queries. The clients live in
``generators`` processes, each a ``zmq.Poller`` loop over its sockets.

Measured over ``duration`` seconds after ``warmup`` seconds: completed
queries per second, latency percentiles (send to reply, in the client),
the server's CPU seconds per query (utime + stime of the whole process,
ZeroMQ's I/O thread included, from /proc) and each generator's CPU share of
one core, which tells whether the generator or the server was the limit.
With ``profile`` the server also runs once more under cProfile and the top
entries go into the report.

``baseline`` names a directory holding another ``mxhet`` package (e.g. the
code before a change, from ``git archive``); each configuration then runs
against both, labelled ``before`` and ``after``.
"""
import array
import dataclasses
import json
import math
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SERVER_MODULE = "mxhet.state_server"
_LISTENING = re.compile(r"State Server listening on (tcp://[0-9.]+:\d+)")
_REGISTER = '{"v":1,"type":"register","rank":%d,"seq":1,"incarnation":%d,"slot":%d,"signature":"","round":0}'
_QUERY = ('{"v":1,"type":"query","rank":%d,"seq":%d,"incarnation":%d,"round":0,"k":%d,"c":%r,'
          '"since_finish":0.0}')
_INCARNATION = 7
_PROFILED_SERVER = """
import cProfile, runpy, sys, time
out = sys.argv.pop(1)
profiler = cProfile.Profile(time.thread_time)   # CPU time of the main thread: waiting in poll() is not counted
try:
    profiler.runcall(runpy.run_module, %r, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    profiler.dump_stats(out)
""" % SERVER_MODULE
_WINDOW = 256  # registrations in flight per socket (below ZeroMQ's default high-water mark of 1000)


@dataclasses.dataclass(frozen=True)
class Config:
    """One measured configuration.

    Args:
        registered: ranks registered with the State Server (its --num-workers).
        clients: closed-loop client sockets, one query outstanding each.
        active_ranks: ranks that issue queries (>= clients; 0 = one per client).
        duration: measured seconds.
        warmup: seconds of load before the measurement starts.
        generators: client processes the sockets are spread over.
        auth: CURVE-authenticated control plane (as mxhet-launch runs it by default).
        label: "after" for the working tree's server, "before" for the baseline.
        client: "zmtp": the clients speak ZMTP on plain TCP sockets (:mod:`bench.zmtp_clients`, cheap for
            the generator); "zmq": libzmq DEALER sockets (needed for CURVE authentication).
        server_cpus: CPUs the server process (all its threads) is pinned to (empty: not pinned).
        generator_cpus: CPUs the generator processes are pinned to (empty: not pinned).
    """
    registered: int
    clients: int = 64
    active_ranks: int = 0
    duration: float = 5.0
    warmup: float = 1.0
    generators: int = 1
    auth: bool = False
    label: str = "after"
    client: str = "zmtp"
    server_cpus: tuple = ()
    generator_cpus: tuple = ()

    def __post_init__(self):
        if self.clients < 1 or self.generators < 1:
            raise ValueError("clients and generators must be >= 1, got %d and %d" % (self.clients, self.generators))
        if self.registered < self.active:
            raise ValueError("registered ranks (%d) must be >= the ranks that query (%d)"
                             % (self.registered, self.active))
        if self.active_ranks and self.active_ranks < self.clients:
            raise ValueError("active_ranks (%d) must be 0 or >= clients (%d)" % (self.active_ranks, self.clients))
        if not (self.duration > 0 and self.warmup >= 0):
            raise ValueError("duration must be > 0 and warmup >= 0 seconds")
        if self.client not in ("zmtp", "zmq"):
            raise ValueError("client must be 'zmtp' or 'zmq', got %r" % (self.client,))
        if self.auth and self.client != "zmq":
            raise ValueError("CURVE authentication needs the libzmq clients (client='zmq')")
        available = os.sched_getaffinity(0)
        for name in ("server_cpus", "generator_cpus"):
            cpus = getattr(self, name)
            if not isinstance(cpus, tuple) or not set(cpus) <= available:
                raise ValueError("%s must be a tuple of this machine's CPUs %s, got %r"
                                 % (name, sorted(available), cpus))

    @property
    def active(self):
        return self.active_ranks or self.clients

    def ranks_of(self, client):
        """The ranks client socket ``client`` registered and queries for."""
        return list(range(client, self.active, self.clients))


def percentile(sorted_values, q):
    """The ``q``-quantile (0..1) of ascending values, nearest rank; nan when empty."""
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_summary(latencies_s):
    """Latency statistics in milliseconds from samples in seconds."""
    values = sorted(latencies_s)
    ms = lambda x: round(1000.0 * x, 4) if math.isfinite(x) else None  # noqa: E731
    return {"p50": ms(percentile(values, 0.50)), "p90": ms(percentile(values, 0.90)),
            "p99": ms(percentile(values, 0.99)), "p999": ms(percentile(values, 0.999)),
            "max": ms(values[-1]) if values else None,
            "mean": ms(sum(values) / len(values)) if values else None}


def summarize(config, generator_results, server_cpu_s, cpu_window_s):
    """One run's record from the generators' results and the server's CPU seconds.

    Args:
        config: the :class:`Config`.
        generator_results: per generator ``{"queries", "errors", "cpu_s",
            "latencies"}`` (latencies: bytes of an ``array('d')`` of seconds),
            counted over ``config.duration`` seconds.
        server_cpu_s: the server's CPU seconds over ``cpu_window_s`` seconds.
    """
    window_s = config.duration
    latencies = []
    queries = errors = 0
    shares = []
    for result in generator_results:
        latencies.extend(array.array("d", result["latencies"]))
        queries += result["queries"]
        errors += result["errors"]
        shares.append(round(result["cpu_s"] / window_s, 3))
    qps = queries / window_s
    per_query = server_cpu_s / (qps * cpu_window_s) if queries else None
    return {"label": config.label, "registered": config.registered, "clients": config.clients,
            "active_ranks": config.active, "auth": config.auth, "generators": config.generators,
            "duration_s": round(window_s, 3), "queries": queries, "errors": errors, "qps": round(qps, 1),
            "latency_ms": latency_summary(latencies),
            "server_cpu_s": round(server_cpu_s, 4),
            "server_cpu_util": round(server_cpu_s / cpu_window_s, 3),
            "server_cpu_per_query_us": round(1e6 * per_query, 2) if per_query is not None else None,
            "generator_cpu_share": shares,
            "client": config.client,
            "server_cpus": list(config.server_cpus), "generator_cpus": list(config.generator_cpus)}


# --- the server --------------------------------------------------------------


def _cpu_of_stat(path):
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid):
    """utime + stime of process ``pid`` (all its threads), seconds."""
    return _cpu_of_stat("/proc/%d/stat" % pid)


def machine_busy_seconds():
    """CPU seconds all cores spent busy since boot (from /proc/stat: everything but idle and iowait)."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid):
    """CPU seconds per thread of process ``pid``, keyed ``main`` or by thread name
    (ZeroMQ names its I/O thread ``ZMQbg/IO/0``); threads of one name are added up."""
    cpu = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = "main" if int(tid) == pid else f.read().strip()
            cpu[name] = cpu.get(name, 0.0) + _cpu_of_stat("/proc/%d/task/%s/stat" % (pid, tid))
        except (OSError, ValueError):
            continue                       # a thread that ended meanwhile
    return cpu


class Server:
    """``python -m mxhet.state_server`` as a child process on an ephemeral port.

    Args:
        num_workers: its --num-workers.
        keys: CURVE key directory, or "" for none.
        pythonpath: put first on the child's PYTHONPATH (another mxhet package).
        profile_out: run it under cProfile, writing the stats here on exit. The
            profiler's clock is the main thread's CPU time, so waiting for
            requests and being descheduled do not count; ZeroMQ's I/O thread
            is not in the profile (see the per-thread CPU of the runs).
        start_timeout: seconds to wait for its "listening" log line.
        cpus: pin the process (every thread) to these CPUs; empty: not pinned.
    """

    def __init__(self, num_workers, keys="", pythonpath="", profile_out="", start_timeout=30.0, cpus=()):
        cmd = [sys.executable]
        if profile_out:
            cmd += ["-c", _PROFILED_SERVER, os.path.abspath(profile_out)]
        else:
            cmd += ["-m", SERVER_MODULE]
        cmd += ["--bind", "tcp://127.0.0.1:*", "--num-workers", str(num_workers),
                "--heartbeat-timeout", "0"]
        if keys:
            cmd += ["--keys", keys]
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, root, env.get("PYTHONPATH", "")) if p)
        self.command = cmd
        self._log = tempfile.TemporaryFile(mode="w+")
        # outside the checkout: python -m puts the working directory first on sys.path
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir(), preexec_fn=pin)
        deadline = time.monotonic() + start_timeout
        self.address = None
        while self.address is None:
            found = _LISTENING.search(self.log())
            if found:
                self.address = found.group(1)
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError("the State Server did not start: %s" % log[-2000:])
            else:
                time.sleep(0.05)

    def log(self):
        if self._log.closed:
            return ""
        self._log.seek(0)
        return self._log.read()

    def cpu_seconds(self):
        return process_cpu_seconds(self.proc.pid)

    def thread_cpu_seconds(self):
        return thread_cpu_seconds(self.proc.pid)

    def stop(self, timeout=30.0):
        """SIGTERM, then SIGKILL after ``timeout`` s; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


# --- the clients ---------------------------------------------------------------


def _capability(rank):
    return 0.05 + 0.001 * (rank % 97)


def _dealer(ctx, address, keys):
    import zmq
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if keys:
        from mxhet.control.auth import secure_client
        secure_client(sock, keys)
    sock.connect(address)
    return sock


def register_ranks(sock, ranks, report_capability=False, timeout=120.0):
    """Register ``ranks`` through ``sock`` (pipelined, at most _WINDOW in flight).

    With ``report_capability`` each rank then sends one k = 0 query, so the
    State Server knows its capability (as after a worker's first iteration).

    Raises:
        RuntimeError: a refusal, or ``timeout`` seconds without a reply.
    """
    messages = [(_REGISTER % (r, _INCARNATION, r)).encode() for r in ranks]
    if report_capability:
        messages += [(_QUERY % (r, 2, _INCARNATION, 0, _capability(r))).encode() for r in ranks]
    sent = received = 0
    while received < len(messages):
        while sent < len(messages) and sent - received < _WINDOW:
            sock.send(messages[sent])
            sent += 1
        if not sock.poll(int(1000 * timeout)):
            raise RuntimeError("the State Server did not answer %d registrations" % (len(messages) - received))
        reply = sock.recv()
        if b'"ok":true' not in reply:
            raise RuntimeError("registration refused: %r" % reply[:300])
        received += 1


def generate(config, address, keys, client_ids, ready, start, results):
    """A generator process: closed-loop clients ``client_ids`` (runs in a child)."""
    import zmq
    if config.generator_cpus:
        os.sched_setaffinity(0, config.generator_cpus)
    ctx = zmq.Context()
    socks, ranks, seqs, turn, sent_at = [], [], [], [], []
    try:
        for client in client_ids:
            sock = _dealer(ctx, address, keys)
            own = config.ranks_of(client)
            register_ranks(sock, own)
            socks.append(sock)
            ranks.append(own)
            seqs.append([1] * len(own))
            turn.append(0)
            sent_at.append(0.0)
        poller = zmq.Poller()
        index = {}
        for i, sock in enumerate(socks):
            poller.register(sock, zmq.POLLIN)
            index[sock] = i
        caps = {r: _capability(r) for own in ranks for r in own}
        ready.put(os.getpid())
        t0 = start.get()                    # time.time() of the window start, from the parent
        window_start = t0 - time.time() + time.perf_counter()
        end = window_start + config.duration
        latencies = array.array("d")
        queries = errors = 0
        perf, fmt = time.perf_counter, _QUERY

        def send(i):
            own, t = ranks[i], turn[i]
            rank = own[t]
            seq = seqs[i][t] = seqs[i][t] + 1
            turn[i] = (t + 1) % len(own)
            sent_at[i] = perf()
            socks[i].send((fmt % (rank, seq, _INCARNATION, seq, caps[rank])).encode())

        for i in range(len(socks)):
            send(i)
        cpu0 = None
        while True:
            now = perf()
            if cpu0 is None and now >= window_start:
                cpu0 = time.process_time()
            if now >= end:
                break
            for sock, _ in poller.poll(100):
                reply = sock.recv()
                done = perf()
                i = index[sock]
                if sent_at[i] >= window_start and done < end:
                    latencies.append(done - sent_at[i])
                    queries += 1
                    if b'"ok":true' not in reply:
                        errors += 1
                send(i)
        cpu = time.process_time() - (cpu0 if cpu0 is not None else time.process_time())
        results.put({"pid": os.getpid(), "queries": queries, "errors": errors, "cpu_s": cpu,
                     "latencies": latencies.tobytes()})
    except Exception as exc:  # noqa: BLE001  (reported to the parent, which fails the run)
        ready.put("error: %r" % (exc,))
        results.put({"error": repr(exc)})
    finally:
        for sock in socks:
            sock.close(0)
        ctx.term()


def run_config(config, pythonpath="", keys="", profile_out="", progress=None):
    """Measure one configuration; returns its record (see :func:`summarize`).

    Raises:
        RuntimeError: the server did not start or a generator failed.
    """
    import multiprocessing as mp
    import queue as queue_module

    import zmq
    server = Server(config.registered, keys=keys if config.auth else "", pythonpath=pythonpath,
                    profile_out=profile_out, cpus=config.server_cpus)
    ctx = mp.get_context("spawn")
    procs = []
    try:
        filler = list(range(config.active, config.registered))
        if filler:
            zctx = zmq.Context()
            sock = _dealer(zctx, server.address, keys if config.auth else "")
            try:
                register_ranks(sock, filler, report_capability=True)
            finally:
                sock.close(0)
                zctx.term()
        ready, results = ctx.Queue(), ctx.Queue()
        starts = []
        for g in range(config.generators):
            ids = list(range(g, config.clients, config.generators))
            if not ids:
                continue
            start = ctx.Queue()
            if config.client == "zmtp":
                from . import zmtp_clients
                proc = ctx.Process(target=zmtp_clients.generate,
                                   args=(config, server.address, ids, ready, start, results, _REGISTER, _QUERY,
                                         _INCARNATION, _capability), daemon=True)
            else:
                proc = ctx.Process(target=generate, args=(config, server.address, keys if config.auth else "",
                                                           ids, ready, start, results), daemon=True)
            proc.start()
            procs.append(proc)
            starts.append(start)
        for _ in procs:
            got = ready.get(timeout=120)
            if isinstance(got, str):
                raise RuntimeError("a load generator failed: %s" % got)
        window_start = time.time() + config.warmup + 0.2
        for start in starts:
            start.put(window_start)
        time.sleep(max(0.0, window_start - time.time()))
        busy0, cpu0, threads0 = machine_busy_seconds(), server.cpu_seconds(), server.thread_cpu_seconds()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < config.duration:
            time.sleep(min(0.25, config.duration - (time.perf_counter() - t0)))
            if progress is not None:
                progress(min(1.0, (time.perf_counter() - t0) / config.duration))
        cpu = server.cpu_seconds() - cpu0
        busy = machine_busy_seconds() - busy0
        threads = {name: t - threads0.get(name, 0.0) for name, t in server.thread_cpu_seconds().items()}
        window = time.perf_counter() - t0
        collected = []
        for _ in procs:
            try:
                got = results.get(timeout=60)
            except queue_module.Empty:
                raise RuntimeError("a load generator did not report") from None
            if "error" in got:
                raise RuntimeError("a load generator failed: %s" % got["error"])
            collected.append(got)
        for proc in procs:
            proc.join(10)
        record = summarize(config, collected, cpu, window)
        queries = record["qps"] * window
        record["server_thread_cpu_per_query_us"] = {name: round(1e6 * t / queries, 2) if queries else None
                                                    for name, t in sorted(threads.items()) if t > 0}
        generators_cpu = sum(r["cpu_s"] for r in collected)
        record["other_cpu_cores"] = round(max(0.0, busy - cpu - generators_cpu) / window, 3)
        record["server_command"] = " ".join(server.command)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        log = server.log()
        code = server.stop()
    if code != 0:
        raise RuntimeError("the State Server exited with %s: %s" % (code, log[-2000:]))
    return record


def profile_top(path, limit=15):
    """The top entries of a cProfile stats file, by own time, as dicts."""
    stats = pstats.Stats(path)
    total = stats.total_tt
    rows = []
    for (filename, line, name), (cc, nc, tt, ct, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:limit]:
        rows.append({"function": "%s:%d(%s)" % (_short(filename), line, name), "calls": nc,
                     "tottime_s": round(tt, 4), "cumtime_s": round(ct, 4),
                     "share": round(tt / total, 4) if total else None})
    return {"total_s": round(total, 3), "top": rows}


def _short(filename):
    for marker in ("site-packages/", "/mxhet/", "/lib/python3"):
        if marker in filename:
            return filename[filename.index(marker):].lstrip("/")
    return filename


# --- the experiment ------------------------------------------------------------


def plan(registered, clients=64, active_ranks=(0,), duration=5.0, warmup=1.0, generators=1, auth=("off",),
         labels=("after",), server_cpus=(), generator_cpus=(), client="zmtp"):
    """Every configuration of one experiment, in run order (authenticated runs use the libzmq clients)."""
    configs = []
    for label in labels:
        for mode in auth:
            for n in registered:
                for active in active_ranks:
                    if active and active > n:
                        continue
                    configs.append(Config(registered=n, clients=clients, active_ranks=active, duration=duration,
                                          warmup=warmup, generators=generators, auth=(mode == "on"), label=label,
                                          client="zmq" if mode == "on" else client,
                                          server_cpus=tuple(server_cpus), generator_cpus=tuple(generator_cpus)))
    return configs


_BREAKDOWN = """
import json, sys, time
from mxhet.control import messages as m
from mxhet.control.server import StateService
n, count = int(sys.argv[1]), int(sys.argv[2])
svc = StateService(n)
for r in range(n):
    svc.handle(m.Register(rank=r, seq=1, slot=r, incarnation=7), 0.0, sender=b"c%d" % r)
for r in range(n):
    svc.handle(m.Query(rank=r, seq=2, round=0, k=0, c=0.05 + 0.001 * (r % 97), since_finish=0.0, incarnation=7),
               0.0, sender=b"c%d" % r)
active = min(n, 64)
raw = [m.encode(m.Query(rank=i % active, seq=3 + i // active, round=0, k=1 + i // active,
                        c=0.05 + 0.001 * (i % 97), since_finish=0.0, incarnation=7)) for i in range(count)]
senders = [b"c%d" % (i % active) for i in range(count)]
clock = time.thread_time
t0 = clock()
requests = [m.decode(b, m.REQUEST_TYPES) for b in raw]
t1 = clock()
replies = [svc.handle(q, 1.0, sender=s) for q, s in zip(requests, senders)]
t2 = clock()
out = [m.encode(r) for r in replies]
t3 = clock()
assert all(r.ok for r in replies)
print(json.dumps({"decode_us": 1e6 * (t1 - t0) / count, "handle_us": 1e6 * (t2 - t1) / count,
                  "encode_us": 1e6 * (t3 - t2) / count}))
"""


def breakdown(registered, pythonpath="", count=20000):
    """Main-thread CPU µs per query of decode, handle and encode, in-process (no sockets, no profiler),
    for the mxhet found with ``pythonpath`` first."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, root, env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", _BREAKDOWN, str(registered), str(count)], env=env,
                          capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return {k: round(v, 2) for k, v in json.loads(done.stdout).items()}


def server_package(pythonpath=""):
    """The directory of the ``mxhet`` package a server child started with ``pythonpath`` imports."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, root, env.get("PYTHONPATH", "")) if p)
    found = subprocess.run([sys.executable, "-c", "import os, mxhet; print(os.path.dirname(mxhet.__file__))"],
                           env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return found.stdout.strip()


def run_experiment(configs, out, baseline="", profile_registered=(), profile_duration=3.0, command=None,
                   show_progress=True, repeat=1):
    """Run ``configs`` (and the profiles), write control-plane.json and .md into ``out``.

    Returns:
        The result dictionary written as JSON.

    Raises:
        ValueError: ``baseline`` does not provide the ``mxhet`` the server imports.
    """
    from tqdm import tqdm

    packages = {"after": server_package()}
    if baseline:
        packages["before"] = server_package(os.path.abspath(baseline))
        if not packages["before"].startswith(os.path.abspath(baseline)):
            raise ValueError("with --baseline %s the server still imports %s" % (baseline, packages["before"]))
    os.makedirs(out, exist_ok=True)
    keys = tempfile.mkdtemp(prefix="mxhet-cp-keys-")
    runs, failures, profiles, breakdowns = [], [], [], []
    started = time.time()
    try:
        if any(c.auth for c in configs):
            from mxhet.control.auth import create_job_keys
            create_job_keys(keys)
        jobs = [(c, None) for _ in range(repeat) for c in configs]   # repeats interleaved: noise spreads
        for label in dict.fromkeys(c.label for c in configs):
            for n in profile_registered:
                jobs.append((Config(registered=n, clients=configs[0].clients, duration=profile_duration,
                                    warmup=configs[0].warmup, generators=configs[0].generators, label=label,
                                    client=configs[0].client,
                                    server_cpus=configs[0].server_cpus, generator_cpus=configs[0].generator_cpus),
                             os.path.join(out, "control-plane-%s-%d.prof" % (label, n))))
        bar = tqdm(total=len(jobs), unit="run", disable=not show_progress, file=sys.stderr)
        for config, prof in jobs:
            bar.set_description("%s n=%d active=%d%s%s" % (config.label, config.registered, config.active,
                                                           " auth" if config.auth else "",
                                                           " cProfile" if prof else ""))
            path = os.path.abspath(baseline) if config.label == "before" else ""
            try:
                record = run_config(config, pythonpath=path, keys=keys, profile_out=prof or "",
                                    progress=lambda f: bar.set_postfix_str("%3.0f%%" % (100 * f)))
            except (RuntimeError, OSError) as exc:
                failures.append({"config": dataclasses.asdict(config), "error": str(exc)})
                tqdm.write("FAILED %s: %s" % (config, exc), file=sys.stderr)
            else:
                if prof:
                    for _ in range(100):       # the stats file appears once the child has exited
                        if os.path.exists(prof):
                            break
                        time.sleep(0.05)
                    profiles.append({"label": config.label, "registered": config.registered,
                                     "clients": config.clients, "qps_under_profiler": record["qps"],
                                     **profile_top(prof)})
                    os.remove(prof)
                else:
                    record["repeat"] = sum(1 for r in runs if _key(r) == _key(record))
                    runs.append(record)
                    tqdm.write(format_row(record), file=sys.stderr)
            bar.update(1)
        bar.close()
        for label in dict.fromkeys(c.label for c in configs):
            for n in profile_registered:
                count = 20000 if label == "after" else max(200, min(20000, 2000000 // n))
                breakdowns.append(dict(label=label, registered=n, queries=count,
                                       **breakdown(n, os.path.abspath(baseline) if label == "before" else "",
                                                   count)))
    finally:
        shutil.rmtree(keys, ignore_errors=True)
    from .experiment import write_outputs
    from .provenance import provenance
    from .runner import machine_info
    result = {"experiment": "control-plane", "command": command or ["mxhet-bench", "control-plane"],
              "machine": machine_info(), "baseline": baseline,
              "provenance": provenance(
                  command or ["mxhet-bench", "control-plane"]), "server_packages": packages,
              "started_unix": started,
              "elapsed_s": round(time.time() - started, 1), "runs": runs, "profiles": profiles,
              "breakdown": breakdowns,
              "failures": failures}
    write_outputs(out, "control-plane", result, format_report(result))
    return result


# --- the report -----------------------------------------------------------------


HEADER = ("| code | auth | client | registered | querying ranks | clients | queries/s | min-max over repeats "
          "| p50 ms | p99 ms | p99.9 ms "
          "| server CPU µs/query (main + ZeroMQ I/O) | server CPU (cores) | generator CPU (cores) "
          "| other processes (cores) | errors |")


def format_row(r):
    lat = r["latency_ms"]
    fmt = lambda x: "-" if x is None else "%.2f" % x  # noqa: E731
    threads = r.get("server_thread_cpu_per_query_us") or {}
    split = " (%.1f + %.1f)" % (threads.get("main", 0.0), threads.get("ZMQbg/IO/0", 0.0)) if threads else ""
    spread = r.get("qps_range") or [r["qps"], r["qps"]]
    return "| %s | %s | %s | %d | %d | %d | %.0f | %.0f-%.0f (%d) | %s | %s | %s | %s | %.2f | %s | %s | %d |" % (
        r["label"], "on" if r["auth"] else "off", r.get("client", "zmq"), r["registered"], r["active_ranks"], r["clients"], r["qps"],
        spread[0], spread[1], r.get("repeats", 1),
        fmt(lat["p50"]), fmt(lat["p99"]), fmt(lat["p999"]),
        "-" if r["server_cpu_per_query_us"] is None else "%.1f%s" % (r["server_cpu_per_query_us"], split),
        r["server_cpu_util"], "+".join("%.2f" % s for s in r["generator_cpu_share"]),
        fmt(r.get("other_cpu_cores")), r["errors"])


GOAL_QPS = 50000.0
GOAL_P99_MS = 1.0
GOAL_SCALING = 0.8   # with the most ranks registered: at least 80% of the queries/s with the fewest


def _key(record):
    return (record["label"], record["auth"], record.get("client", "zmq"), record["registered"],
            record["active_ranks"], record["clients"])


def medians(runs):
    """Per configuration, the run with the median queries/s (the lower middle one for an even count),
    with ``qps_range`` [min, max] over its repeats added; in first-run order."""
    groups = {}
    for r in runs:
        groups.setdefault(_key(r), []).append(r)
    chosen = []
    for group in groups.values():
        ordered = sorted(group, key=lambda r: r["qps"])
        chosen.append(dict(ordered[(len(ordered) - 1) // 2], qps_range=[ordered[0]["qps"], ordered[-1]["qps"]],
                           repeats=len(group)))
    return chosen


def goal_lines(runs, cores, label="after"):
    """The issue's goals checked against ``label``'s unauthenticated runs (their medians), as Markdown lines."""
    mine = [r for r in medians(runs) if r["label"] == label and not r["auth"]]
    if not mine:
        return []
    small = min(mine, key=lambda r: (r["registered"], r["active_ranks"]))
    large = [r for r in mine if r["registered"] == max(x["registered"] for x in mine)]
    lines = ["## Goals (%s, authentication off)" % label, ""]
    capacity = 1e6 / small["server_cpu_per_query_us"] if small["server_cpu_per_query_us"] else 0.0
    lines.append("- >= %.0f queries/s with p99 < %.0f ms at %d clients, %d registered: measured %.0f queries/s, "
                 "p99 %.2f ms: **%s**. The server spent %.1f µs of CPU per query (%.0f queries/s per core-second); "
                 "the generator %.2f cores and other processes %.2f cores of the machine's %s." % (
                     GOAL_QPS, GOAL_P99_MS, small["clients"], small["registered"], small["qps"],
                     small["latency_ms"]["p99"], "met" if small["qps"] >= GOAL_QPS and
                     small["latency_ms"]["p99"] < GOAL_P99_MS else "not met",
                     small["server_cpu_per_query_us"], capacity, sum(small["generator_cpu_share"]),
                     small.get("other_cpu_cores") or 0.0, cores))
    for r in large:
        lines.append("- %d registered, %d ranks querying: %.0f queries/s = %.0f%% of the %d-registered run "
                     "(goal >= %.0f%%): **%s**; server CPU %.1f µs per query." % (
                         r["registered"], r["active_ranks"], r["qps"], 100 * r["qps"] / small["qps"],
                         small["registered"], 100 * GOAL_SCALING,
                         "met" if r["qps"] >= GOAL_SCALING * small["qps"] else "not met",
                         r["server_cpu_per_query_us"]))
    lines.append("- A closed loop of C clients at X queries/s has a mean latency of C / X (Little's law): %d clients "
                 "at %.0f queries/s means %.2f ms on average, so p99 < %.0f ms at %d clients needs well over "
                 "%.0f queries/s; at the measured %.0f queries/s the mean alone is %.2f ms." % (
                     small["clients"], GOAL_QPS, 1000 * small["clients"] / GOAL_QPS, GOAL_P99_MS, small["clients"],
                     1000 * small["clients"] / GOAL_P99_MS, small["qps"], 1000 * small["clients"] / small["qps"]))
    return lines + [""]


def format_report(result):
    m = result["machine"]
    lines = ["# Control plane: State Server queries per second and latency", "",
             "Command: `%s`" % " ".join(result["command"]), "",
             "Machine: %s, %s cores, Python %s. Each run starts `python -m %s --heartbeat-timeout 0` on "
             "127.0.0.1 and drives it with closed-loop DEALER clients (one QUERY-STATE outstanding each, "
             "never a replay); latency is measured in the client from send to reply. Server CPU is the "
             "whole process (ZeroMQ's I/O thread included; split main + I/O thread in parentheses); 1.00 = one "
             "core busy. 'Other processes' is what the rest of the machine used meanwhile (noise). Each row is "
             "the run with the median queries/s of its repeats." % (
                 m.get("cpu"), m.get("cores"), m.get("python"), SERVER_MODULE)]
    if result.get("baseline"):
        lines += ["", "`before`: the server code from `%s`; `after`: this tree." % result["baseline"]]
    lines += ["", HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    lines += [format_row(r) for r in medians(result["runs"])]
    lines += [""] + goal_lines(result["runs"], m.get("cores"))
    if result.get("breakdown"):
        lines += ["## Where the main thread's time goes, without sockets", "",
                  "The same code in-process: decode the request, answer it, encode the reply (main-thread "
                  "CPU µs per query; 64 ranks querying). The rest of the main thread's CPU per query in the "
                  "table above is pyzmq's recv/send and the loop; the ZeroMQ I/O thread's is TCP.", "",
                  "| code | registered | decode µs | handle µs | encode µs | total µs |",
                  "|---|---|---|---|---|---|"]
        lines += ["| %s | %d | %.2f | %.2f | %.2f | %.2f |" % (b["label"], b["registered"], b["decode_us"],
                                                             b["handle_us"], b["encode_us"],
                                                             b["decode_us"] + b["handle_us"] + b["encode_us"])
                  for b in result["breakdown"]]
    for p in result.get("profiles", []):
        lines += ["", "## cProfile of the server's main thread (%s, %d registered, %d clients): %.0f queries/s "
                      "under the profiler, %.1f CPU s profiled" % (p["label"], p["registered"], p["clients"],
                                                      p["qps_under_profiler"], p["total_s"]), "",
                  "| function | calls | own s | cumulative s | own share |", "|---|---|---|---|---|"]
        lines += ["| `%s` | %d | %.3f | %.3f | %.1f%% |" % (t["function"], t["calls"], t["tottime_s"],
                                                          t["cumtime_s"], 100 * (t["share"] or 0))
                  for t in p["top"]]
    if result.get("failures"):
        lines += ["", "## Failed runs", ""] + ["- %s: %s" % (f["config"], f["error"]) for f in result["failures"]]
    return "\n".join(lines) + "\n"
