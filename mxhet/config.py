"""The one place where mxhet reads environment variables.

The launcher (``mxhet.launcher``) tells every worker its slot through these
variables; the rest of the code receives a :class:`WorkerConfig`.

=====================  ==========================================================
``MXHET_SYNC``         synchronization mode (``esync``, ``sync``, ``async``, ``local``)
``MXHET_SLOT``         the launcher's slot of this worker (0-based); on one
                       host also its PS-LITE rank (the launcher's ``PORT``
                       increases with the slot), not across ssh hosts
``MXHET_NUM_SLOTS``    number of worker slots in the job
``MXHET_CONTEXT``      ``cpu`` or ``gpu(i)``
``MXHET_SLOWDOWN``     heterogeneity emulation factor f >= 1: after each local
                       iteration the worker sleeps (f - 1) x its compute time
``MXHET_BASE_ITER_S``  base iteration time T in seconds (0 = off): a worker of
                       slowdown f pads every iteration to f x T seconds
                       instead of sleeping (f - 1) x its compute time, so that
                       emulated speeds do not depend on CPU contention (set by
                       ``mxhet-bench`` from its calibration)
``MXHET_SLOWDOWN_SCHEDULE`` a speed change over time, e.g. ``0-60=1,60-=8``:
                       factor 1 for the first 60 s of training, 8 afterwards
                       (seconds since training started; outside every
                       segment ``MXHET_SLOWDOWN`` applies)
``MXHET_SLOWDOWN_DIST`` ``fixed`` (default) or ``exp``: under a base
                       iteration time, each iteration lasts f x T x X with X
                       drawn from Exp(1), seeded per worker (the G-CADA
                       paper's model of computing times)
``MXHET_NET_DELAY_MS`` emulated one-way delay of this worker's control-plane
                       link, milliseconds (added in each direction)
``MXHET_CONTROL_KEYS`` directory of the job's CURVE keys for the State Server
                       link (see :mod:`mxhet.control.auth`); empty = no CURVE
``MXHET_STATE_SERVER`` ZeroMQ address of the State Server, e.g. ``tcp://127.0.0.1:5555``
``MXHET_DATA_DIR``     Fashion-MNIST directory (default ``/usr/share/datasets/fashion-mnist``)
``MXHET_MXNET_CACHE``  where mxhet's processes keep MXNet's compiled operator functions
                       (:mod:`mxhet.mxnet_import`; default ``$XDG_CACHE_HOME/mxhet/mxnet``, else
                       ``~/.cache/mxhet/mxnet``); ``off`` = keep none (as ``MXHET_DATA_CACHE``)
``MXHET_LIVE_DIR``     where the worker rewrites its live feed file for the
                       launcher's ``--dashboard`` (:mod:`mxhet.observe.live`); empty = none
``MXHET_PROGRESS_FILE`` where the worker notes for the launcher's hang watch that its
                       Trainer exists (``trainer``) and that it finished a step
                       (``batch``); empty = none (see :mod:`mxhet.launcher.watch`)
``MXHET_EXITS_FILE``   ``--elastic``: where the launcher lists the workers whose process
                       ended while the job went on (JSON: slot, cause, Unix time), for the
                       chief's summary; empty = none
``MXHET_SPARE_RANKS``  ``--max-restarts K`` above 1: the PS-LITE ranks held by the job's spare
                       worker processes (comma-separated); a worker's rank as mxhet and its
                       script see it skips them (:mod:`mxhet.spares`)
``MXHET_TAKEOVERS_FILE`` ``--max-restarts`` above 1, local workers: where the launcher lists which
                       spare took over which slot when (the summary's ``elastic`` record names them)
``MXHET_SPARE_FILE``   set in a spare worker process only: the file through which the launcher
                       hands it a dead worker's slot (or the job's end)
``MXHET_TEST_KILL_AFTER_PUSH`` tests only: ``RANK[,RANK...]:ROUND[:PATH]`` -- the worker of each
                       PS-LITE rank named saves the deltas it pushed in that round to PATH
                       (.npz) and sends itself SIGKILL between its push and its pull (a death
                       in the exchange itself, :mod:`mxhet.modes.killhook`); with PATH, one
                       rank and only while PATH does not exist; empty = never (``gcada``
                       reads its own form, :mod:`mxhet.modes.gcada`)
``MXHET_TEST_KILL_COMPUTING`` tests only: ``RANK[,RANK...]:ROUND[:PATH]`` -- the worker of each
                       PS-LITE rank named sends itself SIGKILL while it computes, its exchanges up to round
                       ROUND - 1 over and none of round ROUND begun (``sync``/``localsgd``:
                       before it enters round ROUND; ``nodelay``: as round ROUND - 1's merged
                       model arrives; ``preduce``: before its READY once it was in ROUND
                       groups); with PATH, one rank and only while PATH does not exist (it
                       creates it first: a process started again in its place is not killed too)
``DMLC_NUM_SERVER``    number of parameter servers (PS-LITE's own variable)
``DMLC_ROLE``          PS-LITE role of this process
=====================  ==========================================================
"""
import dataclasses
import os
import re

from .errors import ConfigError

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
_CONTEXT_RE = re.compile(r"^(cpu|gpu\((\d+)\))$")


def parse_context(text):
    """Parse ``cpu`` or ``gpu(i)`` into ``(kind, index)``.

    Raises:
        ConfigError: for anything else.
    """
    m = _CONTEXT_RE.match(str(text).strip())
    if not m:
        raise ConfigError("context must be 'cpu' or 'gpu(i)', got %r" % (text,))
    return ("cpu", 0) if m.group(1) == "cpu" else ("gpu", int(m.group(2)))


def mx_context(text):
    """The MXNet context of ``cpu`` or ``gpu(i)``, checked: a GPU must exist and run a kernel.

    The check matters beyond a missing GPU: MXNet 1.9.1's CUDA packages carry
    machine code for compute capability 5.0 to 8.6 and no PTX, so on a newer
    GPU (Hopper, 9.0) every kernel fails; this says so at start-up instead of
    at the first forward pass.

    Raises:
        ConfigError: for a bad ``text``, a GPU MXNet does not see, or one it cannot run on.
    """
    import mxnet as mx
    kind, index = parse_context(text)
    if kind == "cpu":
        return mx.cpu()
    have = mx.context.num_gpus()
    if index >= have:
        raise ConfigError("gpu(%d) asked for, but MXNet sees %d GPU(s) here" % (index, have))
    ctx = mx.gpu(index)
    try:
        (mx.nd.ones((2,), ctx=ctx) * 2).asnumpy()
    except mx.base.MXNetError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError("MXNet cannot run a kernel on gpu(%d): %s (MXNet 1.9.1's CUDA packages have kernels for "
                          "compute capability 5.0-8.6 only; a newer GPU needs MXNet built from source for it)"
                          % (index, first)) from None
    return ctx


def mx_contexts(text):
    """The MXNet contexts of one worker from a comma-separated list of ``cpu``
    and ``gpu(i)`` (``python -m mxhet.train --worker-contexts``): the k-th
    ``cpu`` of the list is ``cpu(k)``, so ``cpu,cpu`` is two CPU contexts, as
    ``[mx.cpu(0), mx.cpu(1)]`` in a Gluon script.

    Raises:
        ConfigError: for an empty list, a bad item (see :func:`mx_context`) or
            the same GPU twice.
    """
    import mxnet as mx
    items = [item.strip() for item in str(text).split(",")]
    if not items or not all(items):
        raise ConfigError("a worker's contexts must be a comma-separated list of cpu and gpu(i), got %r" % (text,))
    contexts, cpus = [], 0
    for item in items:
        ctx = mx_context(item)
        if ctx.device_type == "cpu":
            ctx, cpus = mx.cpu(cpus), cpus + 1
        elif ctx in contexts:
            raise ConfigError("%s appears twice in the worker's contexts %r" % (item, text))
        contexts.append(ctx)
    return contexts


def parse_slowdown(text):
    """Parse a slowdown factor (float >= 1).

    Raises:
        ConfigError: if it is not a number >= 1.
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError("slowdown must be a number >= 1, got %r" % (text,)) from None
    if not value >= 1.0 or value != value or value == float("inf"):
        raise ConfigError("slowdown must be a finite number >= 1, got %r" % (text,))
    return value


def parse_slowdown_schedule(text):
    """Parse ``START-END=FACTOR,START-=FACTOR,...`` (seconds) into segments.

    Returns:
        A tuple of ``(start, end, factor)``, ``end`` None for an open segment,
        sorted by start.

    Raises:
        ConfigError: for a malformed, overlapping or non-increasing schedule.
    """
    segments = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+(?:\.\d*)?)-(\d+(?:\.\d*)?)?=(.+)", part)
        if not m:
            raise ConfigError("slowdown schedule segment must look like 'START-END=FACTOR' or "
                              "'START-=FACTOR' (seconds), got %r in %r" % (part, text))
        start = float(m.group(1))
        end = float(m.group(2)) if m.group(2) else None
        if end is not None and not end > start:
            raise ConfigError("slowdown schedule segment %r ends before it starts" % part)
        segments.append((start, end, parse_slowdown(m.group(3))))
    segments.sort()
    for (s0, e0, _), (s1, _, _) in zip(segments, segments[1:]):
        if e0 is None or e0 > s1:
            raise ConfigError("slowdown schedule %r has overlapping segments" % (text,))
    return tuple(segments)


def _non_negative(text, what, unit):
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError("%s must be a number of %s >= 0, got %r" % (what, unit, text)) from None
    if not 0 <= value < float("inf"):
        raise ConfigError("%s must be a finite number of %s >= 0, got %r" % (what, unit, text))
    return value


def parse_delay_ms(text):
    """Parse a one-way network delay in milliseconds (finite, >= 0)."""
    return _non_negative(text, "network delay", "milliseconds")


SLOWDOWN_DISTS = ("fixed", "exp")


def parse_slowdown_dist(text):
    """Parse the distribution of iteration times: ``fixed`` or ``exp``.

    Raises:
        ConfigError: for anything else.
    """
    if text not in SLOWDOWN_DISTS:
        raise ConfigError("slowdown distribution must be one of %s, got %r" % (", ".join(SLOWDOWN_DISTS), text))
    return text


def parse_base_iter(text):
    """Parse a base iteration time in seconds (finite, >= 0; 0 = off).

    Raises:
        ConfigError: for anything else.
    """
    return _non_negative(text, "base iteration time", "seconds")


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What the launcher told this worker."""
    sync: str = "local"
    slot: int = 0
    num_slots: int = 1
    context: str = "cpu"
    slowdown: float = 1.0
    slowdown_schedule: tuple = ()
    base_iter_s: float = 0.0
    slowdown_dist: str = "fixed"
    net_delay_ms: float = 0.0
    state_server: str = ""
    control_keys: str = ""
    num_servers: int = 0
    data_dir: str = DEFAULT_DATA_DIR
    live_dir: str = ""
    progress_file: str = ""
    exits_file: str = ""    # --elastic: the launcher's record of worker processes that ended (MXHET_EXITS_FILE)
    takeovers_file: str = ""   # --max-restarts above 1: the launcher's record of the spares' takeovers
    test_kill_after_push: str = ""   # tests only: RANK:ROUND[:PATH] (MXHET_TEST_KILL_AFTER_PUSH)
    test_kill_computing: str = ""    # tests only: RANK[,RANK]:ROUND[:PATH] (MXHET_TEST_KILL_COMPUTING)
    elastic: bool = False   # mxhet-launch --elastic: a worker that dies leaves the job, the others train on
    spare_workers: int = 0  # --max-restarts above 1: the spare worker processes of the job (MXHET_SPARE_RANKS)

    def slowdown_at(self, seconds):
        """The slowdown factor ``seconds`` after training started."""
        for start, end, factor in self.slowdown_schedule:
            if start <= seconds and (end is None or seconds < end):
                return factor
        return self.slowdown

    @property
    def launched(self):
        """True when the process runs under the launcher as a PS-LITE worker."""
        return self.num_servers > 0


def _int(env, name, default, minimum):
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError("%s must be an integer, got %r" % (name, raw)) from None
    if value < minimum:
        raise ConfigError("%s must be >= %d, got %d" % (name, minimum, value))
    return value


def worker_config(env=None):
    """Read the worker's configuration from the environment.

    Raises:
        ConfigError: when a variable is malformed.
    """
    env = os.environ if env is None else env
    context = env.get("MXHET_CONTEXT", "cpu") or "cpu"
    parse_context(context)
    num_slots = _int(env, "MXHET_NUM_SLOTS", 1, 1)
    slot = _int(env, "MXHET_SLOT", 0, 0)
    if slot >= num_slots:
        raise ConfigError("MXHET_SLOT=%d is out of range for MXHET_NUM_SLOTS=%d" % (slot, num_slots))
    num_servers = _int(env, "DMLC_NUM_SERVER", 0, 0) if env.get("DMLC_ROLE") == "worker" else 0
    return WorkerConfig(
        sync=env.get("MXHET_SYNC", "") or "local",
        slot=slot,
        num_slots=num_slots,
        context=context,
        slowdown=parse_slowdown(env.get("MXHET_SLOWDOWN", "1") or "1"),
        slowdown_schedule=parse_slowdown_schedule(env["MXHET_SLOWDOWN_SCHEDULE"])
        if env.get("MXHET_SLOWDOWN_SCHEDULE") else (),
        base_iter_s=parse_base_iter(env.get("MXHET_BASE_ITER_S", "0") or "0"),
        slowdown_dist=parse_slowdown_dist(env.get("MXHET_SLOWDOWN_DIST", "fixed") or "fixed"),
        net_delay_ms=parse_delay_ms(env.get("MXHET_NET_DELAY_MS", "0") or "0"),
        state_server=env.get("MXHET_STATE_SERVER", ""),
        control_keys=env.get("MXHET_CONTROL_KEYS", ""),
        num_servers=num_servers,
        data_dir=env.get("MXHET_DATA_DIR", "") or DEFAULT_DATA_DIR,
        live_dir=env.get("MXHET_LIVE_DIR", ""),
        progress_file=env.get("MXHET_PROGRESS_FILE", ""),
        exits_file=env.get("MXHET_EXITS_FILE", ""),
        takeovers_file=env.get("MXHET_TAKEOVERS_FILE", ""),
        test_kill_after_push=env.get("MXHET_TEST_KILL_AFTER_PUSH", ""),
        test_kill_computing=env.get("MXHET_TEST_KILL_COMPUTING", ""),
        elastic=env.get("MXHET_ELASTIC", "") == "1",
        spare_workers=len([r for r in env.get("MXHET_SPARE_RANKS", "").split(",") if r]),
    )


def launched_worker_mode(env=None):
    """The sync mode of a worker ``mxhet-launch`` started (``DMLC_ROLE=worker``
    and ``MXHET_SYNC`` set), else None."""
    env = os.environ if env is None else env
    if env.get("DMLC_ROLE") != "worker":
        return None
    return env.get("MXHET_SYNC", "") or None


@dataclasses.dataclass(frozen=True)
class SpareSetup:
    """A launched worker's view of the job's spare worker processes (``--max-restarts`` above 1).

    ``spare_ranks``: the PS-LITE ranks the spares hold; ``num_workers``: the job's workers without
    them (``MXHET_NUM_SLOTS``); ``spare_file``: set in a spare itself, where its orders arrive."""
    spare_ranks: tuple
    num_workers: int
    spare_file: str = ""


def spare_setup(env=None):
    """The launched worker's :class:`SpareSetup`, or None when the job has no spares.

    Raises:
        ConfigError: ``MXHET_SPARE_RANKS`` is malformed.
    """
    env = os.environ if env is None else env
    raw = env.get("MXHET_SPARE_RANKS", "")
    if env.get("DMLC_ROLE") != "worker" or not raw:
        return None
    try:
        ranks = tuple(sorted(int(r) for r in raw.split(",")))
    except ValueError:
        raise ConfigError("MXHET_SPARE_RANKS must be comma-separated ranks, got %r" % raw) from None
    if any(r < 0 for r in ranks):
        raise ConfigError("MXHET_SPARE_RANKS must hold ranks >= 0, got %r" % raw)
    return SpareSetup(spare_ranks=ranks, num_workers=_int(env, "MXHET_NUM_SLOTS", 1, 1),
                      spare_file=env.get("MXHET_SPARE_FILE", ""))


OMP_WAIT_POLICY = "PASSIVE"
"""OpenMP's wait policy for the MXNet processes mxhet starts (``OMP_WAIT_POLICY`` where the environment sets
none). MXNet's libgomp otherwise spins between parallel regions: on a core shared with another busy process
a spinning thread holds the core its partner needs. A one-worker small-CNN job on two threads made 6x as many
iterations waiting passively beside one CPU-bound process, and 16% fewer on idle cores; ResNet-18 in the
simulator ran as fast either way (bench/results/omp-wait). mxhet is for shared machines: it takes the first."""


def omp_wait_policy(env=None):
    """``OMP_WAIT_POLICY`` for a process mxhet starts: the environment's, else :data:`OMP_WAIT_POLICY`."""
    env = os.environ if env is None else env
    return env.get("OMP_WAIT_POLICY", "") or OMP_WAIT_POLICY


def data_dir(env=None):
    """The Fashion-MNIST directory: ``MXHET_DATA_DIR`` or the Debian default."""
    env = os.environ if env is None else env
    return env.get("MXHET_DATA_DIR", "") or DEFAULT_DATA_DIR


def mxnet_cache_dir(env=None):
    """Where :mod:`mxhet.mxnet_import` keeps MXNet's compiled operator functions: ``MXHET_MXNET_CACHE``
    (``off``: nowhere, returned as ""), else ``$XDG_CACHE_HOME/mxhet/mxnet``, else ``~/.cache/mxhet/mxnet``."""
    env = os.environ if env is None else env
    chosen = env.get("MXHET_MXNET_CACHE", "")
    if chosen == "off":
        return ""
    if chosen:
        return chosen
    base = env.get("XDG_CACHE_HOME", "") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):   # no home directory ("~" left as it is): not a folder of the working directory
        return ""
    return os.path.join(base, "mxhet", "mxnet")
