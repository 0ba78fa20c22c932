"""A simulator run that survives being killed: checkpoints by replay.

The worker programs are generators, which cannot be saved. A checkpoint
therefore saves the numbers -- every replica's parameters, its global copy,
its local optimizer, its data stream; the servers' model and updater -- plus
a log of every computed value a decision read (each training loss a program
read, each snapshot's score against the target) and the count of SimPy events
processed. A resumed run builds the same job, replays it from t = 0 with the
computation left out (no forward or backward pass, no model arithmetic: the
logged values instead) up to that event, checks that the replay arrived where
the run was (virtual time, iterations, the devices' random draws, the State
Server's decisions ...), loads the saved numbers and trains on for real. Its
final model is bit-identical to an uninterrupted run's.

A save happens only between two events where no push or pull is under way
(:attr:`Simulation.in_flight` is 0), so no model values live in a process's
local variables. Saves are atomic (written beside, then renamed): a run killed
while saving keeps its previous checkpoint.
"""
import contextlib
import hashlib
import json
import logging
import math
import os
import pickle
import signal
import subprocess
import time

import numpy as np

from ..errors import ConfigError

LOG = logging.getLogger("mxhet.sim")

VERSION = 1
FILE = "checkpoint.pkl"
MODES = ("esync", "sync", "local", "async", "dcasgd", "adsp", "localsgd", "ssp")
"""The modes a checkpoint covers (their programs' in-flight values are all pushes and pulls of the engine)."""
RUN_FLAGS = {"--checkpoint-dir": 1, "--checkpoint-every-min": 1, "--checkpoint-every": 1, "--resume": 0,
             "--checkpoint-stop-at": 1, "--no-progress": 0, "--metrics-out": 1, "--tensorboard": 1}
"""Flags (and how many values each takes) that say where and how a run is kept, not what it computes."""


CHECKPOINT_FLAGS = {"--checkpoint-dir": 1, "--checkpoint-every-min": 1, "--resume": 0, "--checkpoint-stop-at": 1}
"""Flags that say how a run is kept across sessions: not part of its recorded command."""


def add_flags(group, every_min_default, every_min_help, resume_help, dir_help=None):
    """Add a simulator run's checkpoint flags to argparse ``group``: ``--checkpoint-every-min``
    (wall minutes between saves, float, default ``every_min_default``), ``--checkpoint-dir``
    (only with ``dir_help``; default "") and ``--resume``, as ``python -m mxhet.sim`` and the
    bench's paper experiments (which pass them on to each run) declare them. Here, not in
    :mod:`.cli`, so that the bench's parser does not import MXNet."""
    group.add_argument("--checkpoint-every-min", type=float, default=every_min_default, metavar="MINUTES",
                       help=every_min_help)
    if dir_help is not None:
        group.add_argument("--checkpoint-dir", default="", help=dir_help)
    group.add_argument("--resume", action="store_true", help=resume_help)


def without_checkpoint_flags(argv):
    """``argv`` without :data:`CHECKPOINT_FLAGS`: a resumed run records the command of an uninterrupted one."""
    return _drop(argv, CHECKPOINT_FLAGS)


def _drop(argv, flags):
    """``argv`` without ``flags`` (name -> how many values follow it; ``--flag=value`` too)."""
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = 0 if "=" in arg else flags[name]
            continue
        out.append(arg)
    return out


class Stopped(Exception):
    """The run saved a checkpoint and stopped (a signal, or the test hook ``--checkpoint-stop-at``)."""

    def __init__(self, virtual_s, path, signum=None):
        super().__init__("stopped at %.3f virtual s; checkpoint in %s" % (virtual_s, path))
        self.virtual_s, self.path, self.signum = virtual_s, path, signum


def run_argv(argv):
    """``argv`` without the flags of :data:`RUN_FLAGS`: what two runs that compute the same thing share."""
    return _drop(argv, RUN_FLAGS)


def code_commit():
    """The git commit of the checkout mxhet runs from (None outside one)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def check_args(args, mode):
    """The checkpoint flags of a parsed ``python -m mxhet.sim`` command line.

    Raises:
        ConfigError: naming the bad value, or the option a checkpoint does not cover.
    """
    every = args.checkpoint_every_min
    if not (every >= 0 and math.isfinite(every)):
        raise ConfigError("--checkpoint-every-min must be >= 0 minutes (0: off), got %r" % (every,))
    stop_at = getattr(args, "checkpoint_stop_at", None)
    if not (every or stop_at is not None):
        if args.resume:
            raise ConfigError("--resume continues from a checkpoint: give --checkpoint-every-min")
        return
    if mode not in MODES:
        raise ConfigError("--checkpoint-every-min: mode %s cannot be checkpointed (modes %s)"
                          % (mode, ", ".join(MODES)))
    for flag, value in (("--events", args.events), ("--score-members", args.score_members)):
        if value:
            raise ConfigError("--checkpoint-every-min cannot keep a run with %s %s" % (flag, value))


class Replay:
    """The logged results a replay reads instead of computing them."""

    def __init__(self, checks):
        self._checks = iter(checks)

    def check(self):
        """The next snapshot's logged ``(accuracy, reached)``."""
        item = next(self._checks, None)
        if item is None:
            raise ConfigError("the replay scored more snapshots than its checkpoint logged: the checkpoint's run "
                              "does not replay here")
        return tuple(item)


def record(sim):
    """What a replay must reproduce exactly (plain data): time, events, iterations, decisions, draws."""
    def rng(state):
        return [state[0], hashlib.sha256(np.ascontiguousarray(state[1]).tobytes()).hexdigest(),
                int(state[2]), int(state[3]), float(state[4])]
    state = {
        "events": sim.events, "virtual_s": repr(sim.env.now), "in_flight": sim.in_flight,
        "iterations": sim.tally[0], "decisions": sim.decisions, "snapshots": len(sim.snapshots),
        "target_reached_at": sim.target_reached_at, "capped_at": sim.capped_at,
        "devices": [{"stats": dev.stats.as_dict(), "rng": rng(dev.rng.get_state()),
                     "batches": dev.batches.state_dict(), "seq": dev.seq, "stopped": dev.stopped,
                     "losses": len(dev.loss_log)} for dev in sim.devices]}
    deadline = _deadline_record(sim)
    if deadline is not None:   # (only then: a checkpoint of another run's record has no such key)
        state["deadline"] = deadline
    return json.loads(json.dumps(state, default=repr))


def _deadline_record(sim):
    """Under ``--round-deadline``, the State Server's round book-keeping a replay must rebuild: the
    late deltas due in a round not closed yet (rank -> round), the deferred READYs, the last round
    closed, every push so far (its log hashed) and, under ``--wait-needed``, the ranks' smoothed
    losses; None without a deadline."""
    rule = sim.service.rule("esync")
    if rule is None or rule.book is None:
        return None
    book = rule.book
    log = hashlib.sha256(json.dumps(sim.deadline_log).encode()).hexdigest()
    record = {"due": {str(r): book.due(r) for r in book.pending_ranks()},
              "deferred": rule.deferred_late(), "closed": book.last_closed(),
              "pushes": len(sim.deadline_log), "log": log}
    if book.memory:   # --late-memory (only then: an older checkpoint's record has no such keys)
        record["remembered"] = {str(r): v for r, v in book.remembered().items()}
        record["memory_log"] = hashlib.sha256(json.dumps(sim.memory_log).encode()).hexdigest()
    if rule.losses is not None:   # --wait-needed: each rank's smoothed loss, rebuilt from the logged losses
        record["losses"] = {str(r): repr(v) for r, v in sorted(rule.losses.average.items())}
    return record


def _difference(a, b, where=""):
    """The first path at which plain data ``a`` and ``b`` differ, with both values (None if equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = _difference(a.get(key), b.get(key), "%s.%s" % (where, key) if where else str(key))
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _difference(x, y, "%s[%d]" % (where, i))
            if found:
                return found
        return None
    return None if a == b else "%s: %r in the checkpoint, %r in the replay" % (where or "state", a, b)


def _nd():
    import mxnet as mx   # (not at import: the bench reads this module's flags without MXNet)
    return mx.nd


def _numpy(arrays):
    return None if arrays is None else [a.asnumpy() for a in arrays]


def _memory_out(memory):
    """rank -> (round, arrays) as numpy, for a checkpoint."""
    return {r: (v, _numpy(arrays)) for r, (v, arrays) in memory.items()}


def _memory_in(saved, ctx):
    """A checkpoint's rank -> (round, numpy arrays) as NDArrays on ``ctx``."""
    nd = _nd()
    return {r: (v, [nd.array(a, ctx=ctx, dtype=a.dtype) for a in arrays]) for r, (v, arrays) in saved.items()}


def _load_into(arrays, values, what):
    if len(arrays) != len(values):
        raise ConfigError("checkpoint holds %d arrays of %s, the run has %d" % (len(values), what, len(arrays)))
    for a, v in zip(arrays, values):
        if tuple(a.shape) != tuple(v.shape):
            raise ConfigError("checkpoint's %s has an array of shape %s where the run's is %s"
                              % (what, v.shape, a.shape))
        _nd().array(v, ctx=a.context, dtype=a.dtype).copyto(a)   # (a[:] = v fails on MKL-DNN layouts)


class Checkpointer:
    """Saves a :class:`~mxhet.sim.engine.Simulation` every ``every_s`` wall seconds, on SIGTERM or SIGINT,
    and at the end of training, into ``directory``/checkpoint.pkl; resumes from it (:meth:`load`).

    Args:
        directory: where the checkpoint lives (created).
        every_s: wall seconds between saves (0: only on a signal, the hook, and at the end).
        header: what the run is (``argv`` as :func:`run_argv`, ``mode``, ``seed``, ``commit``); a
            checkpoint of another run is refused.
        started: when this session's run began (``clock``; default now), for the run's wall time.
        stop_at: test hook: save and stop (:class:`Stopped`) at the first point at or after these
            virtual seconds where a save may happen.
    """

    def __init__(self, directory, every_s, header, stop_at=None, started=None, clock=time.monotonic):
        self.directory = directory
        self.path = os.path.join(directory, FILE)
        self.every_s = float(every_s)
        self.header = dict(header)
        self.stop_at = stop_at
        self.clock = clock
        self.signalled = None
        self.state = None          # the checkpoint resumed from
        self.started = clock() if started is None else started   # this session's start, on ``clock``
        self.saves = 0
        self.saved_events = None

    # -- the previous sessions' share of the run ------------------------------------------------
    @property
    def resumed_at_s(self):
        """Virtual seconds at which each earlier session's run was resumed, then this one's."""
        if self.state is None:
            return []
        return list(self.state.get("resumed_at_s", [])) + [self.state["virtual_s"]]

    @property
    def segments(self):
        """Each session's part of the run, oldest first: ``from_s``, the virtual second it started from, and
        ``commit``, the code its process ran (the header's: where the process started). A checkpoint written
        before these were kept knows only its last writer's commit; the earlier sessions' are None."""
        current = {"from_s": 0.0, "commit": self.header.get("commit")}
        if self.state is None:
            return [current]
        earlier = self.state.get("segments")
        if earlier is None:
            earlier = [{"from_s": s, "commit": None} for s in [0.0] + list(self.state.get("resumed_at_s", []))]
            earlier[-1]["commit"] = self.state["header"].get("commit")
        return [dict(s) for s in earlier] + [dict(current, from_s=self.state["virtual_s"])]

    def wall_s(self):
        """Wall seconds of the run, this session's and the earlier sessions' (up to their checkpoint)."""
        return (self.state["wall_s"] if self.state else 0.0) + self.clock() - self.started

    def cpu_s(self):
        return (self.state["cpu_s"] if self.state else 0.0) + time.process_time()

    # -- load ------------------------------------------------------------------------------------
    def remove(self):
        """Forget the checkpoint (the run starts afresh, or it finished)."""
        for path in (self.path, self.path + ".tmp"):
            if os.path.exists(path):
                os.remove(path)

    def load(self):
        """Read the checkpoint to resume from; returns its virtual seconds, or None if there is none.

        Raises:
            ConfigError: it cannot be read, or it belongs to another run (arguments, mode, seed).
        """
        if not os.path.exists(self.path):
            return None
        try:
            with open(self.path, "rb") as f:
                state = pickle.load(f)
            version = state["version"]
            header = state["header"]
        except Exception as exc:   # a truncated or foreign file: any unpickling error
            raise ConfigError("checkpoint %s cannot be read (%s: %s); remove it to run from the start"
                              % (self.path, type(exc).__name__, exc)) from None
        if version != VERSION:
            raise ConfigError("checkpoint %s has version %r, this simulator reads %d; remove it to run from the start"
                              % (self.path, version, VERSION))
        for key in ("mode", "seed", "argv"):
            if header.get(key) != self.header.get(key):
                raise ConfigError("checkpoint %s belongs to another run: its %s is %r, this run's %r; remove it "
                                  "to run from the start" % (self.path, key, header.get(key), self.header.get(key)))
        if header.get("commit") != self.header.get("commit"):
            LOG.warning("checkpoint %s was written by commit %s, this is %s: resuming only if the replay "
                        "reproduces the run exactly", self.path, header.get("commit"), self.header.get("commit"))
        self.state = state
        return state["virtual_s"]

    # -- the event loop ----------------------------------------------------------------------------
    def drive(self, sim, done):
        """Run ``sim``'s event loop until ``done``, replaying to the checkpoint first and saving on the way.

        Raises:
            Stopped: after a save on a signal or at ``stop_at``.
            ConfigError: the replay does not reproduce the checkpoint's run.
        """
        env = sim.env
        if self.state is not None:
            self._replay(sim, done)
        next_save = self.clock() + self.every_s if self.every_s > 0 else math.inf
        with self._signals():
            while not done.processed:
                env.step()
                sim.events += 1
                if sim.in_flight:
                    continue
                if self.signalled is not None or (self.stop_at is not None and env.now >= self.stop_at):
                    self.save(sim)
                    raise Stopped(env.now, self.path, self.signalled)
                if self.clock() >= next_save:
                    self.save(sim)
                    next_save = self.clock() + self.every_s
        # The end of training: a run killed while its snapshots are scored resumes from here, when
        # running it again would cost more than the save interval.
        if sim.events != self.saved_events and (self.saves or self.wall_s() >= self.every_s > 0):
            self.save(sim)

    @contextlib.contextmanager
    def _signals(self):
        def handler(signum, frame):
            self.signalled = signum
        previous = {}
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, handler)
        except ValueError:   # not the main thread: no signals, periodic saves only
            pass
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    def _replay(self, sim, done):
        state = self.state
        LOG.info("replaying the run to its checkpoint at %.3f virtual s (event %d) without computing",
                 state["virtual_s"], state["events"])
        sim.replay = Replay(state["checks"])
        sim.servers.replaying = True
        for dev, losses in zip(sim.devices, state["losses"]):
            dev.replay = iter(losses)
        try:
            while sim.events < state["events"]:
                if done.processed:
                    break
                sim.env.step()
                sim.events += 1
        finally:
            sim.replay = None
            sim.servers.replaying = False
            for dev in sim.devices:
                dev.replay = None
        found = _difference(state["record"], record(sim))
        if found:
            raise ConfigError("checkpoint %s does not replay here (the code or the data changed since it was "
                              "written?): %s; remove it to run from the start" % (self.path, found))
        for dev, saved in zip(sim.devices, state["devices"]):
            _load_into(dev.weights(), saved["params"], "slot %d's parameters" % dev.slot)
            if saved["global"] is not None:
                _load_into(dev.global_copy, saved["global"], "slot %d's global copy" % dev.slot)
            self._load_trainer(dev.trainer, saved["trainer"])
            dev.batches.load_state_dict(saved["batches"])
        _load_into(sim.servers.weights, state["servers"]["weights"], "the servers' model")
        sim.servers.set_states(state["servers"]["updater"])
        if "memory" in state:   # --late-memory: the servers' memory keys and the keepers' copies
            ctx = sim.devices[0].weights()[0].context
            sim.late_memory = _memory_in(state["memory"]["servers"], ctx)
            for dev, cache in zip(sim.devices, state["memory"]["caches"]):
                dev.memory_cache = _memory_in(cache, ctx)
        self.saved_events = sim.events
        LOG.info("resumed at %.3f virtual s", sim.env.now)

    # -- save --------------------------------------------------------------------------------------
    def _trainer_states(self, trainer):
        tmp = os.path.join(self.directory, "trainer.%d.tmp" % os.getpid())
        try:
            trainer.save_states(tmp)
            with open(tmp, "rb") as f:
                return f.read()
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _load_trainer(self, trainer, states):
        tmp = os.path.join(self.directory, "trainer.%d.tmp" % os.getpid())
        try:
            with open(tmp, "wb") as f:
                f.write(states)
            trainer.load_states(tmp)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def save(self, sim):
        """Write the checkpoint of ``sim`` as it is now (between two events, nothing in flight)."""
        if sim.in_flight:
            raise ValueError("a checkpoint is taken only with no push or pull under way (%d)" % sim.in_flight)
        os.makedirs(self.directory, exist_ok=True)
        t0 = self.clock()
        state = {
            "version": VERSION, "header": self.header, "events": sim.events, "virtual_s": sim.env.now,
            "record": record(sim), "checks": [list(c) for c in sim.checks],
            "losses": [list(dev.loss_log) for dev in sim.devices],
            "wall_s": self.wall_s(), "cpu_s": self.cpu_s(),
            "resumed_at_s": self.resumed_at_s, "segments": self.segments,
            "devices": [{"params": _numpy(dev.weights()), "global": _numpy(dev.global_copy),
                         "trainer": self._trainer_states(dev.trainer), "batches": dev.batches.state_dict()}
                        for dev in sim.devices],
            "servers": {"weights": _numpy(sim.servers.weights), "updater": sim.servers.get_states()},
        }
        if sim.memory_log:   # --late-memory
            state["memory"] = {"servers": _memory_out(sim.late_memory),
                               "caches": [_memory_out(dev.memory_cache) for dev in sim.devices]}
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=4)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.saves += 1
        self.saved_events = sim.events
        LOG.info("checkpoint at %.3f virtual s (event %d) saved in %.1f s: %s",
                 sim.env.now, sim.events, self.clock() - t0, self.path)
