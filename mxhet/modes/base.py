"""The base class of synchronization modes, and the per-worker statistics.

A mode owns what happens in ``Trainer.step()``: the local update (if any), the
heterogeneity emulation, and the communication through the parameter server
(data plane) and the State Server (control plane). The Trainer delegates to it.

Time accounting per worker, in seconds:

* ``compute_s``: from the end of the previous step to the end of this step's
  local work -- data loading, forward, backward, local update, and the
  emulated slowdown sleep (or the padding to ``f x T`` under a base iteration
  time, ``MXHET_BASE_ITER_S``). This is the device "computing".
* ``wait_s``: time inside ``step()`` spent communicating or waiting for other
  workers (pushes, pulls, State Server requests).
"""
import copy
import dataclasses
import hashlib
import logging
import os
import re
import sys
import time

import mxnet as mx
import numpy as np

from ..gluon_private import has_fresh_grad, clear_optimizer_state, mark_grad_used, trainer_optimizer, trainer_params
from ..dataplane import KVChannel, copy_all, nbytes
from ..dataplane.deltas import DeltaExchange
from ..errors import ConfigError, MxhetError
from ..policy.nonfinite import NONFINITE_POLICIES, NonfiniteRule
from ..policy.pacing import Pacing
from ..policy.specs import DEFAULT_STATE_TIMEOUT
from ..policy.speed import MovingAverage
from ..policy.stop import StopRule

LOG = logging.getLogger("mxhet.modes")


@dataclasses.dataclass
class WorkerStats:
    """Counters of one worker; every time in seconds, every size in bytes."""
    rank: int = 0
    slot: int = 0
    context: str = "cpu"
    slowdown: float = 1.0
    rounds: int = 0
    rejoined_at_round: object = None   # int when started again after a death / left and came back: its first round
    local_iters: list = dataclasses.field(default_factory=list)
    iterations: int = 0
    samples: int = 0
    compute_s: float = 0.0
    wait_s: float = 0.0
    query_s: float = 0.0       # part of wait_s spent in State Server requests
    sync_s: float = 0.0        # part of wait_s spent in pushes and pulls
    bytes_pushed: int = 0
    bytes_pulled: int = 0
    state_queries: int = 0
    state_replies: int = 0
    skipped_pushes: int = 0    # pushes replaced by zeros because of NaN/Inf (on_nonfinite=skip)
    aborted: int = 0           # local iterations abandoned on a delayed READY (ESync §4.2)
    # ESync: the test batch's time (Algorithm 1 line 3), in compute_s but not an
    # iteration: its gradient is dropped and its samples are not counted
    test_batch_s: float = 0.0
    downloads: int = 0         # G-CADA: models pulled to compute a gradient on (eq. 5's |M_D|)
    uploads: int = 0           # G-CADA: gradients uploaded as a group's first finisher (eq. 5's |M_U|)
    waited_iterations: int = 0  # local iterations after which the worker waited for a State Server reply
    late_replies: int = 0      # State Server replies for an earlier round, ignored
    overruns: int = 0          # iterations slower than f x T under MXHET_BASE_ITER_S (contention)
    rtt_s: float = 0.0         # smoothed round-trip time of State Server queries
    # ESync: the longest and shortest time one iteration spent on its State
    # Server query (sending it and, with blocking ACKs, waiting for the answer)
    query_wait_max_s: float = 0.0
    query_wait_min_s: float = None
    max_queries_in_flight: int = 0  # ESync: most queries unanswered at once (1 = every answer was waited for)
    # the job's final global model, pulled by every worker after the last step
    # (see SyncMode.finish): equal digests mean every worker ends with the same model
    final_model_sha256: str = ""
    final_model_keys: int = 0
    # per round (ESync): blocked time (State Server waits + push/pull), queries
    # sent, replies received, aborted iterations, the rank the State Server
    # took for the slowest device, and when the round ended
    round_blocked_s: list = dataclasses.field(default_factory=list)
    round_queries: list = dataclasses.field(default_factory=list)
    round_replies: list = dataclasses.field(default_factory=list)
    round_aborted: list = dataclasses.field(default_factory=list)
    round_slowest: list = dataclasses.field(default_factory=list)
    round_end_s: list = dataclasses.field(default_factory=list)  # seconds since training started
    # ESync: when each round's push/pull began, was issued and finished (seconds since training
    # started); with start_clock_s (the clock at that start: time.monotonic, one clock for every
    # process of a machine) the rounds of all workers line up, so the wait for the last push shows
    round_exchange_start_s: list = dataclasses.field(default_factory=list)
    round_exchange_issued_s: list = dataclasses.field(default_factory=list)
    round_exchange_end_s: list = dataclasses.field(default_factory=list)
    start_clock_s: float = 0.0

    def as_dict(self):
        out = dataclasses.asdict(self)
        total = self.compute_s + self.wait_s
        out["compute_ratio"] = self.compute_s / total if total > 0 else None
        return out


__all__ = ["NONFINITE_POLICIES", "SyncMode", "WorkerStats", "model_digest", "nonfinite_indices", "portable_names"]


def portable_names(names):
    """Parameter names without their top-level block's instance counter
    (``smallcnn3_conv0_weight`` -> ``smallcnn_conv0_weight``): removed only
    when every name starts with the same counted prefix."""
    names = list(names)
    prefixes = {name.split("_", 1)[0] for name in names if "_" in name}
    if len(prefixes) != 1 or not all("_" in name for name in names):
        return names
    prefix = prefixes.pop()
    match = re.fullmatch(r"(.*[^\d])\d+", prefix)
    if not match:
        return names
    return [match.group(1) + name[len(prefix):] for name in names]


def nonfinite_indices(arrays):
    """Indices of the arrays holding a NaN or an Inf, checked element-wise.

    Each array is reduced to one flag on its own device (``all_finite``); only
    the flags travel to the host, in one copy. A sum would not do: a finite
    array whose float32 sum overflows would count as non-finite.
    """
    if not arrays:
        return []
    flags = mx.nd.concat(*[mx.nd.all_finite(a).reshape((1,)).as_in_context(mx.cpu()) for a in arrays], dim=0)
    return [i for i, ok in enumerate(flags.asnumpy()) if not ok]


def model_digest(arrays):
    """The sha256 (hex) of ``arrays``' values, in order: equal digests mean equal models."""
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a.asnumpy()).tobytes())
    return digest.hexdigest()


def check_contexts(params):
    """Raises ConfigError unless every parameter lives on the same contexts
    (one or several per worker; gluon's ``split_and_load`` pattern)."""
    first = None
    for p in params:
        ctxs = list(p.list_ctx())
        if first is None:
            first = (p.name, ctxs)
        elif ctxs != first[1]:
            raise ConfigError("parameter %s lives on %s but %s on %s; an mxhet worker's parameters must all "
                              "live on the same contexts" % (p.name, ctxs, first[0], first[1]))


PROGRESS_TRAINER = "trainer"
PROGRESS_BATCH = "batch"
"""What a worker's progress file (``MXHET_PROGRESS_FILE``) says: its Trainer
exists; it finished a step. The launcher's hang watch fails a job whose worker
made a Trainer and sits idle without ever finishing a step."""


def note_progress(path, what):
    """Write ``what`` to the progress file ``path`` (temp file + rename: the
    launcher never reads half a file); nothing without a path. An error is
    ignored: the note only helps the launcher diagnose a hang."""
    if not path:
        return
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write(what)
        os.replace(tmp, path)
    except OSError:
        pass


def _exit_on_uncaught_error():
    """Make an uncaught exception end this worker process at once.

    MXNet's dist kvstore waits in a barrier when it is destroyed at exit; a
    worker that dies of an exception would wait there forever (the others never
    come), and so would the whole job. After the traceback is printed, the
    process leaves with ``os._exit(1)`` so that the launcher sees it fail.
    """
    previous = sys.excepthook
    if getattr(previous, "_mxhet", False):
        return

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    hook._mxhet = True
    sys.excepthook = hook


class SyncMode:
    """Base of every synchronization mode: the executor on the real cluster.

    A mode carries out its policy's actions (:mod:`mxhet.policy`) with MXNet:
    the local optimizer step, the heterogeneity emulation, pushes and pulls
    through the data-plane channel (:class:`mxhet.dataplane.KVChannel`) and
    requests to the State Server. Subclasses name their :class:`ModeSpec`
    (``spec``), are registered with :func:`mxhet.modes.registry.register`,
    and implement :meth:`local_update` and :meth:`communicate`.

    Args:
        trainer: the :class:`mxhet.Trainer` that owns the mode.
        config: the worker's :class:`mxhet.config.WorkerConfig`.
        options: mode-specific options; unknown ones raise ConfigError.
    """
    spec = None                  # the mode's mxhet.policy.ModeSpec

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:  # the spec is the one source of a mode's metadata
            cls.name = spec.name
            cls.kvstore_type = spec.kvstore
            cls.exchanges_deltas = spec.exchanges_deltas
            cls.uses_loss = spec.uses_loss
            cls.needs_state_server = spec.needs_state_server
            cls.description = spec.description
            cls.options = spec.defaults()

    name = ""
    bucket_bytes = 0             # > 0: exchange flat buckets when the updater allows (every push/pull via the channel)
    kvstore_type = None
    exchanges_deltas = False
    uses_loss = False
    needs_state_server = False
    description = ""
    options = {}
    given_kvstore = None   # a dist kvstore the script created (Trainer's kvstore=), used instead of a new one

    def __init__(self, trainer, config, clock=time.monotonic, sleep=time.sleep, on_nonfinite="stop", **options):
        self.nonfinite = NonfiniteRule(on_nonfinite)
        if self.spec is None:
            raise ConfigError("mode class %s names no ModeSpec" % type(self).__name__)
        self.opts = self.spec.resolve(options)
        self.trainer = trainer
        self.config = config
        self.clock = clock
        self.sleep = sleep
        self.channel = None
        self.client = None  # StateClient, for modes with a State Server
        self.keys = []
        self.wbufs = []  # the global model as last pulled, in default layout
        self.round_hook = None  # hook(round, w_before, deltas, w_after) for modes that exchange deltas
        self.deltas = None      # the DeltaExchange, once connected (modes that exchange deltas)
        self.pacing = self.pacing_for(config)
        self._loss = MovingAverage()
        self.stats = WorkerStats(slot=config.slot, context=config.context, slowdown=config.slowdown)
        self.stop_rule = StopRule()
        self.stopped = False
        self.aggregated = True   # False while the replica holds unaggregated local work
        self._ready = False
        self._reduced = False      # this iteration's gradients are summed over the worker's contexts
        self._multi = None         # the parameters on several contexts, once known
        self._progressed = False   # a step has returned (told the launcher's hang watch once)
        self._finished = False     # finish() has pulled the final model
        self._t_last = self._t_start = None

    @property
    def kv(self):
        """The dist kvstore (None in standalone mode or before setup)."""
        return self.channel.kv if self.channel is not None else None

    @property
    def loss(self):
        """The training loss as the loop reported it (smoothed), or None."""
        return self._loss.value

    # -- lifecycle -----------------------------------------------------
    def setup(self, batch_size):
        """Connect to the parameter server and share the initial model.

        Called by the first ``step()``, or earlier by ``Trainer.setup()``.
        """
        if self._ready:
            return
        params = trainer_params(self.trainer)
        check_contexts(params)
        self.keys = list(range(len(params)))
        if self.kvstore_type:
            if not self.config.launched:
                raise ConfigError("sync mode %r needs the parameter server: start the job with "
                                  "mxhet-launch (tools/launch.py), or use sync='local'" % self.name)
            store = self.existing_kvstore()
            self.channel = KVChannel(self.kvstore_type, self.stats, clock=self.clock, bucket_bytes=self.bucket_bytes)
            self.channel.connect(store)
            _exit_on_uncaught_error()
            self.stats.rank = self.channel.rank
            self.on_connect()  # e.g. join the State Server, which checks the model, before any push
            self.wbufs = self.channel.share_model(self.keys, self.weights(), self.server_updater(batch_size),
                                                  self.config.num_servers)
        self.on_setup(batch_size)
        self.broadcast_weights()   # after on_setup: a mode may pull a newer model there (gcada)
        self._ready = True
        self._t_last = self._t_start = self.stats.start_clock_s = self.clock()

    def existing_kvstore(self):
        """The dist kvstore this worker process already created (given as the
        Trainer's ``kvstore=``, else the one alive in the process), or None.

        A script's ``store = kv.create('dist')`` (for ``store.rank``) has
        joined PS-LITE; a second dist kvstore in the process would register
        again and wait forever in a start-up barrier, so the mode uses the
        script's, and ``trainer.rank == store.rank``.

        Raises:
            ConfigError: two dist kvstores are alive, or the servers already
                merge pushes otherwise than this mode needs (checked before any
                communication; the process then exits instead of waiting in
                the kvstore's barrier at exit).
        """
        from ..dataplane import check_kvstore, live_dist_kvstores
        stores = [self.given_kvstore] if self.given_kvstore is not None else live_dist_kvstores()
        if not stores:
            return None
        _exit_on_uncaught_error()
        if len(stores) > 1:
            raise ConfigError("%d dist kvstores are alive in this worker; pass the one to use as the "
                              "Trainer's kvstore=" % len(stores))
        check_kvstore(stores[0], self.kvstore_type, self.name)
        return stores[0]

    def on_connect(self):
        """Right after the kvstore exists (the rank is known): join the State
        Server when the launcher started one -- for modes that do not need it
        for their algorithm, it still watches for silent workers (heartbeats)
        and checks that every worker trains the same model."""
        if self.config.state_server:
            self.client = self.join_state_server()

    def on_setup(self, batch_size):
        """Mode-specific set-up, after the initial model is shared."""

    def join_state_server(self):
        """Connect to the State Server and register (with the model's signature)."""
        from ..control.client import StateClient
        client = StateClient(self.config.state_server, self.channel.rank, self.config.slot,
                             timeout=self.opts.get("state_timeout", DEFAULT_STATE_TIMEOUT), delay=self.config.net_delay_ms / 1000.0,
                             clock=self.clock, keys=self.config.control_keys)
        client.register(signature=self.model_signature(), round_=getattr(self, "round", 0))
        return client

    def server_updater(self, batch_size):
        """The ``kvstore_ext`` updater to ship to the servers."""
        return self.updater_for(self.channel.num_workers, batch_size, trainer_optimizer(self.trainer), self.opts)

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        """The ``kvstore_ext`` updater this mode's servers run, for ``num_workers``
        workers, the local ``optimizer`` and the mode's options ``opts``: the
        cluster ships it with ``set_optimizer``, the simulator applies it itself."""
        raise ConfigError("mode %r defines no server updater" % cls.name)

    def close(self):
        """Release the kvstore and control-plane connections."""
        self.leave_state_server()
        if self.channel is not None:
            self.channel.close()

    def barrier(self):
        """Wait for every worker (no-op in standalone mode)."""
        if self.kv is not None:
            self.channel.barrier()

    def global_keys(self):
        """Indices of the parameters the servers hold the global value of
        (every parameter by default; the gradient modes keep BatchNorm
        statistics local)."""
        return list(self.keys) if self.keys else list(range(len(trainer_params(self.trainer))))

    def finish(self):
        """After the last step: wait until every worker has pushed its last
        contribution, then pull the job's final global model into this
        worker's replica and record its digest.

        In the asynchronous modes each worker's last pull happened at its own
        time; after this every worker holds the same model (and rank 0
        snapshots it), in every mode.
        """
        keys = self.global_keys()
        if self.kv is not None:
            self.barrier()   # the modes whose workers may die wait on the State Server instead of PS-LITE
            outs = [self.wbufs[i] for i in keys]
            self.channel.pull(keys, outs)
            weights = self.weights()
            copy_all(outs, [weights[i] for i in keys])
            arrays = outs
        else:
            weights = self.weights()
            arrays = [weights[i] for i in keys]
        self.broadcast_weights()
        self.stats.final_model_sha256 = model_digest(arrays)
        self.stats.final_model_keys = len(keys)
        self.aggregated = True
        self._finished = True

    def leave_at_exit(self):
        """Called at interpreter exit (``mxhet.Trainer`` registers it): leave
        the job if the script has not. Returns True if this worker is out of
        the job (the process may end); False in modes that cannot let a worker
        go early (they keep their fail-fast behaviour)."""
        return False

    def leave_alone(self):
        """:meth:`leave_at_exit` of the modes in which no worker waits for
        another's next contribution (the asynchronous ones, ``adsp``,
        ``dylu``, ``preduce``, ``gcada``, ``cada``): say goodbye to the State Server first -- from
        the interpreter's finalization on the control thread sends no
        heartbeats, and PS-LITE's exit barrier would hold this process silent
        until the slowest worker ends, which the State Server would take for a
        hang --, then :meth:`on_leave`, :meth:`finish` (wait for the others'
        last contributions, pull the final model) and close. Returns True."""
        if self._ready and self.kv is not None and not self._finished:
            self.leave_state_server()
            self.on_leave()
            self.finish()
        self.close()
        return True

    def on_leave(self):
        """What a worker leaving alone tells the others beside the State Server (:meth:`leave_alone`)."""

    def summary_fields(self):
        """Entries rank 0 adds to the run's ``summary.json`` after :meth:`finish` (docs/metrics.md);
        none by default."""
        return {}

    def leave_state_server(self):
        """Say goodbye to the State Server (if connected) and close the connection."""
        if self.client is not None:
            self.client.bye()
            self.client.close()
            self.client = None

    # -- the step --------------------------------------------------------
    def step(self, batch_size, ignore_stale_grad=False):
        """One iteration: the mode's protocol runs once per worker, on the
        first copy of every parameter; with several contexts the gradients
        are first summed across them and the resulting weights copied back
        to every context."""
        self.reduce_local_grads()
        self._step(batch_size, ignore_stale_grad)
        self._reduced = False
        self.broadcast_weights()
        if not self._progressed:
            self._progressed = True
            note_progress(self.config.progress_file, PROGRESS_BATCH)

    def _step(self, batch_size, ignore_stale_grad):
        if self.stopped:
            raise MxhetError("step() after training stopped (check trainer.should_stop)")
        if not self._ready:
            self.setup(batch_size)
        self.wait_compute()  # forward and backward are done
        now = self.clock()
        pad = self.pacing.padding(now - self._t_start, now - self._t_last)
        if pad > 0:
            self.emulate_slowdown(pad)
        elif self.pacing.base_s > 0:  # slower than f x T: the machine, not the profile, set the pace
            self.stats.overruns += 1
        if self.should_abort():
            # The iteration is abandoned before any part of it is applied.
            self.stats.aborted += 1
            self.stats.compute_s += self.clock() - self._t_last
            self.drop_gradients()
            t0 = self.clock()
            self.on_abort()
            end = self.clock()
            self.stats.wait_s += end - t0
            self._t_last = end
            return
        self.local_update(batch_size, ignore_stale_grad)
        self.wait_compute()
        now = self.clock()
        capability = now - self._t_last
        self.stats.compute_s += capability
        self.stats.iterations += 1
        self.stats.samples += batch_size
        self.communicate(batch_size, capability, now)
        end = self.clock()
        self.stats.wait_s += end - now
        self._t_last = end

    def allreduce_grads(self):
        """``Trainer.allreduce_grads()``: make the gradients the ones the next
        ``step()`` applies. By default each worker's own gradient is (a local
        optimizer, or a push applied alone): nothing to exchange."""
        if self.stopped:
            raise MxhetError("allreduce_grads() after training stopped (check trainer.should_stop)")
        self.reduce_local_grads()

    def reduce_local_grads(self):
        """With several contexts per worker: sum every parameter's gradient
        over them, as ``gluon.Trainer``'s local kvstore does, into every copy
        (the first is what the mode exchanges; each context's local optimizer
        then applies the same update to the same weights). Once per
        iteration: ``allreduce_grads()`` then ``update()`` sums once."""
        if self._reduced:
            return
        self._reduced = True
        for p in self._multi_context_params():
            if p.grad_req == "null":
                continue
            grads = p.list_grad()
            for g in grads[1:]:
                grads[0] += g.as_in_context(grads[0].context)
            for g in grads[1:]:
                grads[0].copyto(g)

    def broadcast_weights(self):
        """Copy every parameter's first copy (the one the mode synchronizes)
        to its other contexts; BatchNorm statistics included, so every
        context holds the worker's model."""
        for p in self._multi_context_params():
            data = p.list_data()
            for d in data[1:]:
                data[0].copyto(d)

    def _multi_context_params(self):
        """The parameters that live on several contexts (found once: a
        parameter's contexts are fixed at initialization), so a one-context
        worker's step pays nothing for the multi-context path."""
        if self._multi is None:
            self._multi = [p for p in trainer_params(self.trainer) if len(p.list_ctx()) > 1]
        return self._multi

    def wait_compute(self):
        """Wait for the iteration's own work (forward, backward, local update)
        inside ``step()``; by default for everything MXNet has queued."""
        mx.nd.waitall()

    @staticmethod
    def pacing_for(config):
        """The profile's iteration time for this worker: f(t) x T, times Exp(1)
        draws seeded per slot under ``slowdown_dist="exp"``."""
        return Pacing(config.slowdown_at, config.base_iter_s, config.slowdown_dist,
                      rng=np.random.RandomState([config.slot, 14]))

    def check_fresh_grads(self, keys):
        """Raise as ``gluon.Trainer.step`` does when a parameter of ``keys`` got no
        gradient from backward since the last step (``ignore_stale_grad`` skips this).

        Raises:
            UserWarning: naming the parameter.
        """
        params = trainer_params(self.trainer)
        for i in keys:
            if not has_fresh_grad(params[i].list_data()[0]):
                raise UserWarning("Gradient of Parameter `%s` has not been updated by backward since "
                                  "last `step`" % params[i].name)

    def drop_gradients(self):
        """Mark this step's gradients used without applying them (an abandoned
        iteration, or ESync's test batch)."""
        for p in trainer_params(self.trainer):
            if p.grad_req != "null":  # BatchNorm statistics have no gradient to drop
                for data in p.list_data():
                    mark_grad_used(data)

    def emulate_slowdown(self, seconds):
        """Heterogeneity emulation: the device takes ``seconds`` longer."""
        self.sleep(seconds)

    def should_abort(self):
        """True to abandon the current iteration before its update (ESync delayed ACKs)."""
        return False

    def on_abort(self):
        """What to do after abandoning an iteration."""

    def local_update(self, batch_size, ignore_stale_grad):
        """Work done before communication (e.g. a local optimizer step)."""

    def communicate(self, batch_size, capability, compute_end):
        """Synchronize after the local work of one iteration."""

    def pause(self, seconds):
        """Exclude ``seconds`` spent outside training (e.g. a snapshot) from compute time."""
        if self._t_last is not None:
            self._t_last += seconds

    def checkpoint_state(self):
        """What this mode needs to resume (plain JSON data)."""
        return {"rounds": self.stats.rounds, "iterations": self.stats.iterations, "samples": self.stats.samples}

    def restore_state(self, state):
        """Resume from :meth:`checkpoint_state`'s record (before ``setup``)."""
        self.stats.rounds = int(state["rounds"])
        self.stats.iterations = int(state["iterations"])
        self.stats.samples = int(state["samples"])

    def request_stop(self):
        """Ask to stop; the mode stops when every worker can stop consistently."""
        self.stop_rule.request()

    @property
    def stop_requested(self):
        return self.stop_rule.requested

    @property
    def stop_condition(self):
        """``callable(stats) -> bool``, checked where the mode can stop (or None)."""
        return self.stop_rule.condition

    @stop_condition.setter
    def stop_condition(self, condition):
        self.stop_rule.condition = condition

    def wants_stop(self):
        """True if this worker asked to stop, or its stop condition holds now (:class:`StopRule`)."""
        return self.stop_rule.wants(self.stats)

    # -- helpers -----------------------------------------------------------
    def weights(self):
        return [p.list_data()[0] for p in trainer_params(self.trainer)]

    def model_signature(self):
        """A digest of the parameters' names, shapes and dtypes, in key order.

        Names count, so two same-shaped parameters in swapped order are caught;
        the top-level block's instance counter (``smallcnn0_`` vs
        ``smallcnn1_``, which depends on how many models the process built
        before) does not.
        """
        names = portable_names(p.name for p in trainer_params(self.trainer))
        text = ";".join("%s:%s:%s" % (name, tuple(w.shape), np.dtype(w.dtype).name)
                        for name, w in zip(names, self.weights()))
        return hashlib.sha256(text.encode()).hexdigest()

    def global_arrays(self):
        """The current global model, name -> NDArray (for snapshots): the model
        as last pulled for modes that exchange deltas (the replica may hold
        local work), the parameters themselves otherwise."""
        arrays = self.wbufs if self.exchanges_deltas and self.wbufs else self.weights()
        return {p.name: a for p, a in zip(trainer_params(self.trainer), arrays)}

    def check_finite(self, arrays, what, round_index):
        """Apply the NaN/Inf policy to ``arrays`` before they are pushed.

        Returns:
            True if they were finite, False if they were zeroed (policy ``skip``).

        Raises:
            NonFiniteError: naming the worker, the round and the parameter (policy ``stop``).
        """
        params = trainer_params(self.trainer)
        names = [params[i].name if i < len(params) else "#%d" % i for i in nonfinite_indices(arrays)]
        if self.nonfinite.decide(what, self.config.slot, self.stats.rank, round_index, names) == "push":
            return True
        LOG.warning("%s: pushing zeros instead (on_nonfinite=skip)",
                    self.nonfinite.message(what, self.config.slot, self.stats.rank, round_index, names))
        self.stats.skipped_pushes += 1
        for a in arrays:
            a[:] = 0
        return False

    def exchange_deltas(self, round_index, extra_keys=(), extra_values=(), extra_outs=()):
        """Push Δ = replica − global model for every key (and control values) in
        one batch, pull the new global model, and reset the replica to it.

        ``self.wbufs`` holds the global model as last pulled
        (:class:`mxhet.dataplane.deltas.DeltaExchange`).
        """
        if self.deltas is None:
            self.deltas = DeltaExchange(self.channel, lambda arrays, r: self.check_finite(arrays, "model delta", r))
        self.deltas.exchange(round_index, self.keys, self.weights(), self.wbufs, extra_keys, extra_values, extra_outs,
                             hook=self.round_hook)

    def reset_optimizer_state(self):
        clear_optimizer_state(self.trainer)

    def observe_loss(self, value):
        """The training loop's latest loss (smoothed); modes that adapt to it read ``self.loss``."""
        self._loss.update(value)

    def push_pull(self, keys, values, outs):
        self.channel.push_pull(keys, values, outs)

    @staticmethod
    def optimizer_copy(optimizer, rescale_grad):
        """A copy of ``optimizer`` for the servers, scaling what they receive by ``rescale_grad``."""
        opt = copy.copy(optimizer)
        opt.rescale_grad = rescale_grad
        return opt
