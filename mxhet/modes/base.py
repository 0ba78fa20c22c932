"""The base class of synchronization modes (:class:`SyncMode`): the lifecycle
of a mode on a worker (set-up, ``step()``, finish, leaving), composed of one
part per job:

* :mod:`.timing` -- :class:`~.timing.StepTimer`: compute and wait accounting,
  the emulated slowdown's padding;
* :mod:`.abort` -- abandoning an iteration before its update;
* :mod:`.guard` -- :class:`~.guard.NonfiniteGuard`: the NaN/Inf policy on pushes;
* :mod:`.resume` -- the counters a checkpoint saves;
* :mod:`.stopping` -- :class:`~.stopping.StopProtocol`: the stop request, the
  stop ballot, the final barrier and pull;
* :mod:`.replicas` -- a model on several contexts;
* :mod:`.model`, :mod:`.liveness`, :mod:`.stats` -- the model's signature and
  digest, what the launcher sees of the process, the worker's counters.

A mode owns what happens in ``Trainer.step()``: the local update (if any), the
heterogeneity emulation, and the communication through the parameter server
(data plane) and the State Server (control plane). The Trainer delegates to it.
"""
import copy
import time

import mxnet as mx

from ..gluon_private import has_fresh_grad, clear_optimizer_state, trainer_optimizer, trainer_params
from ..dataplane import KVChannel
from ..dataplane.deltas import DeltaExchange
from ..errors import ConfigError, MxhetError
from ..policy.nonfinite import NONFINITE_POLICIES
from ..policy.specs import DEFAULT_STATE_TIMEOUT
from ..policy.speed import MovingAverage
from .resume import counters_state, restore_counters
from .abort import abandon_iteration, drop_gradients
from .guard import NonfiniteGuard, nonfinite_indices
from .liveness import PROGRESS_BATCH, PROGRESS_TRAINER, exit_on_uncaught_error, note_progress
from .model import check_contexts, model_digest, portable_names
from .model import model_signature as signature_of
from .replicas import ContextReplicas
from .stats import WorkerStats
from .stopping import StopProtocol
from .timing import StepTimer
from .timing import pacing_for as profile_pacing

# Re-exported: the Trainer, the simulator and the tests import these from here.
__all__ = ["NONFINITE_POLICIES", "PROGRESS_BATCH", "PROGRESS_TRAINER", "SyncMode", "WorkerStats", "model_digest",
           "nonfinite_indices", "note_progress", "portable_names"]


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
        self.stats = WorkerStats(slot=config.slot, context=config.context, slowdown=config.slowdown)
        self.guard = NonfiniteGuard(on_nonfinite, config.slot, self.stats)
        if self.spec is None:
            raise ConfigError("mode class %s names no ModeSpec" % type(self).__name__)
        self.opts = self.spec.resolve(options)
        self.trainer = trainer
        self.config = config
        self.clock = clock   # () -> seconds: the mode's clock, shared with its timer, channel and State Server client
        self.timer = StepTimer(self.stats, self.pacing_for(config), clock)
        self.sleep = sleep
        self.stopping = StopProtocol()
        self.replicas = ContextReplicas(lambda: trainer_params(self.trainer))
        self.channel = None
        self.client = None  # StateClient, for modes with a State Server
        self.keys = []
        self.wbufs = []  # the global model as last pulled, in default layout
        self.round_hook = None  # hook(round, w_before, deltas, w_after) for modes that exchange deltas
        self.deltas = None      # the DeltaExchange, once connected (modes that exchange deltas)
        self._loss = MovingAverage()
        self.stopped = False
        self.aggregated = True   # False while the replica holds unaggregated local work
        self._ready = False
        self._progressed = False   # a step has returned (told the launcher's hang watch once)
        self._finished = False     # finish() has pulled the final model

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
            exit_on_uncaught_error()
            self.stats.rank = self.channel.rank
            self.on_connect()  # e.g. join the State Server, which checks the model, before any push
            # rank 0 back in a running job (--max-restarts): the servers hold the model, its kv.init would push
            chief_back = self.channel.rank == 0 and getattr(self.client, "rejoined", False)
            self.wbufs = self.channel.share_model(self.keys, self.weights(), self.server_updater(batch_size),
                                                  self.config.num_servers, init=not chief_back)
        self.on_setup(batch_size)
        self.broadcast_weights()   # after on_setup: a mode may pull a newer model there (gcada)
        self._ready = True
        self.stats.start_clock_s = self.timer.start()

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
        exit_on_uncaught_error()
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
        # the modes whose workers may die wait on the State Server's barrier instead of PS-LITE's
        arrays = self.stopping.final_model(self.channel if self.kv is not None else None, self.barrier, keys,
                                           self.wbufs, self.weights)
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

    def finish_and_close(self):
        """:meth:`leave_at_exit` of a worker that still serves the others until the end, or that leaves
        on the State Server's finish barrier (``--elastic``): :meth:`finish` unless done, then close.
        Returns True."""
        if self._ready and self.kv is not None and not self._finished:
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
        self.replicas.next_iteration()
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
        pad = self.timer.padding()
        if pad > 0:
            self.emulate_slowdown(pad)
        if self.should_abort():
            # The iteration is abandoned before any part of it is applied.
            abandon_iteration(self.timer, self.stats, self.drop_gradients, self.on_abort)
            return
        self.local_update(batch_size, ignore_stale_grad)
        self.wait_compute()
        capability, now = self.timer.computed(batch_size)
        self.communicate(batch_size, capability, now)
        self.timer.waited(now)

    def allreduce_grads(self):
        """``Trainer.allreduce_grads()``: make the gradients the ones the next
        ``step()`` applies. By default each worker's own gradient is (a local
        optimizer, or a push applied alone): nothing to exchange."""
        if self.stopped:
            raise MxhetError("allreduce_grads() after training stopped (check trainer.should_stop)")
        self.reduce_local_grads()

    def reduce_local_grads(self):
        """With several contexts per worker: sum every parameter's gradient
        over them into every copy (:meth:`ContextReplicas.reduce_grads`), once
        per iteration."""
        self.replicas.reduce_grads()

    def broadcast_weights(self):
        """Copy every parameter's first copy (the one the mode synchronizes)
        to its other contexts (:meth:`ContextReplicas.broadcast`)."""
        self.replicas.broadcast()

    def wait_compute(self):
        """Wait for the iteration's own work (forward, backward, local update)
        inside ``step()``; by default for everything MXNet has queued."""
        mx.nd.waitall()

    @staticmethod
    def pacing_for(config):
        """The profile's iteration time for this worker (:func:`mxhet.modes.timing.pacing_for`)."""
        return profile_pacing(config)

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
        drop_gradients(trainer_params(self.trainer))

    # -- the hooks a mode overrides: when to sleep, abort, update, communicate --------
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

    # -- the parts' entry points: timing, checkpoint (resume.py), stop protocol (stopping.py) --
    def pause(self, seconds):
        """Exclude ``seconds`` spent outside training (e.g. a snapshot) from compute time."""
        self.timer.pause(seconds)

    def checkpoint_state(self):
        """What this mode needs to resume (plain JSON data)."""
        return counters_state(self.stats)

    def restore_state(self, state):
        """Resume from :meth:`checkpoint_state`'s record (before ``setup``)."""
        restore_counters(self.stats, state)

    def request_stop(self):
        """Ask to stop; the mode stops when every worker can stop consistently (the stop
        condition and the wish are :attr:`stopping`'s, :class:`StopProtocol`)."""
        self.stopping.request()

    # -- helpers -----------------------------------------------------------
    def weights(self):
        return [p.list_data()[0] for p in trainer_params(self.trainer)]

    def model_signature(self):
        """A digest of the parameters' names, shapes and dtypes, in key order
        (:func:`mxhet.modes.model.model_signature`)."""
        return signature_of(trainer_params(self.trainer), self.weights())

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
        return self.guard.check(arrays, what, round_index, trainer_params(self.trainer))

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
