"""Gradient-pushing baselines: synchronous SGD (``sync``) and asynchronous SGD
(``async``, ``dcasgd``, ``ssp``), each a worker program (:mod:`mxhet.protocol.programs`).

Every step each worker pushes its gradients and pulls the weights; the
servers apply the trainer's own optimizer (:class:`kvstore_ext.updaters.ServerOptimizer`).

* ``sync`` (``dist_sync``): the servers wait for every worker's gradient and
  apply their mean (effective batch ``batch_size * num_workers``), so every
  worker waits for the slowest each step -- the "short board".
* ``async`` (``dist_async``): each push is applied on arrival; nobody waits,
  but gradients are computed on stale weights -- the "delayed gradient".

BatchNorm running statistics stay local to each worker in these modes, as in
MXNet's own distributed training.
"""
import mxnet as mx
from mxnet import gluon

from kvstore_ext import keys as ps_keys
from ..gluon_private import mark_grad_used, trainer_optimizer, trainer_params
from ..dataplane import copy_all
from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..errors import ConfigError
from ..policy import specs
from ..protocol import programs
from .base import SyncMode
from .program import ProgramMode
from .registry import register
from .killhook import kill_due, kill_if_due
from .rounds import ElasticEnd, RoundMembers, keep_kvstore_alive, leave_too_late


class _GradientMode(SyncMode):

    def on_setup(self, batch_size):
        self._batch_size = batch_size
        self._grad_keys = [i for i, p in enumerate(trainer_params(self.trainer)) if p.grad_req != "null"]
        self._gbufs = [mx.nd.zeros(self.wbufs[i].shape, ctx=self.wbufs[i].context, dtype=self.wbufs[i].dtype)
                       for i in self._grad_keys]

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ServerOptimizer
        merged = num_workers if cls.kvstore_type == "dist_sync" else 1  # dist_sync sums the workers' pushes
        return ServerOptimizer(num_workers, cls.optimizer_copy(optimizer, 1.0 / (batch_size * merged)))

    def allreduce_grads(self):
        super().allreduce_grads()
        if not self._ready:
            # The servers divide by the first batch size; pushes of another
            # batch size are scaled to it (communicate), so 1 is as good as any.
            self.setup(1)

    def local_update(self, batch_size, ignore_stale_grad):
        if not batch_size > 0:
            raise ValueError("batch_size must be > 0, got %r" % (batch_size,))
        if not ignore_stale_grad:
            self.check_fresh_grads(self._grad_keys)

    def exchange_gradients(self, batch_size, round_index, extra_keys=(), extra_values=(), extra_outs=()):
        """Push this step's gradients (and control values) and pull the weights
        into the parameters, in one push/pull; the gradients count as used."""
        params = trainer_params(self.trainer)
        keys = list(self._grad_keys)
        copy_all([params[i].list_grad()[0] for i in keys], self._gbufs)
        if batch_size != self._batch_size:  # the servers divide by the first step's batch size
            for g in self._gbufs:
                g *= self._batch_size / batch_size
        scale = self.push_scale()
        if scale != 1.0:
            for g in self._gbufs:
                g *= scale
        self.check_finite(self._gbufs, "gradient", round_index)
        wbufs = [self.wbufs[i] for i in keys]
        self.push_pull(keys + list(extra_keys), self._gbufs + list(extra_values), wbufs + list(extra_outs))
        weights = [params[i].list_data()[0] for i in keys]
        copy_all(wbufs, weights)
        for w in weights:
            mark_grad_used(w)
        self.exchanged()

    def push_scale(self):
        """The factor this step's gradient is pushed with (1: as computed)."""
        return 1.0

    def exchanged(self):
        """Called once a step's gradient exchange is over."""

    def global_keys(self):
        return list(self._grad_keys)


@register
class Sync(ProgramMode, _GradientMode):
    """Synchronous SGD on the real cluster: the worker program
    (:func:`mxhet.protocol.programs.sync`) over the gradient exchange.

    A worker whose script leaves its training loop early (end of its data, a
    smaller step count, a caught exception) keeps serving its share of every
    round until the others stop: at interpreter exit, or in :meth:`finish`,
    it pushes zero gradients (and no stop ballot) each round. Why this and not
    rounds over State-Server-named members on ``dist_async`` (as ``esync`` and
    ``localsgd``): sync's servers apply the script's own optimizer (momentum,
    Adam, ...) to the workers' summed gradients, which ``dist_sync`` merges;
    keeping ``dist_sync`` keeps that, and needs no State Server. So that the
    zeros do not dilute the mean, each step first exchanges how many workers
    still train (one float at :data:`kvstore_ext.keys.LIVE_KEY`: 1 per
    training worker, 0 per departed one) and the m training workers push
    their gradients times N/m; the servers' 1/(batch·N) then makes the mean
    over the m. With nobody gone the factor is 1 and is not applied: the
    arithmetic is bit-identical to plain sync, for one more 4-byte push/pull
    per step. When every worker has left (m = 0) the rounds end. A worker that
    *dies* would still block ``dist_sync``: under ``mxhet-launch --elastic`` the
    Trainer runs :class:`ElasticSync` instead (``elastic_executor``).
    """
    spec = specs.SYNC
    program = staticmethod(programs.sync)
    departed = False     # this worker left its training loop before the job stopped

    def on_setup(self, batch_size):
        super().on_setup(batch_size)
        self._live_push = mx.nd.ones((1,))
        self._live_pull = mx.nd.zeros((1,))
        self._live = None    # this step's number of training workers, once exchanged
        self.channel.init([ps_keys.LIVE_KEY], [mx.nd.zeros((1,))])

    def live_workers(self, training=True):
        """How many workers train in this step (this one counted if ``training``):
        exchanged once per step, at its first exchange."""
        if self._live is None:
            self._live_push[:] = 1.0 if training else 0.0
            self.channel.push_pull([ps_keys.LIVE_KEY], [self._live_push], [self._live_pull])
            self._live = int(round(float(self._live_pull.asscalar())))
        return self._live

    def push_scale(self):
        live = self.live_workers()
        num_workers = self.channel.num_workers
        return num_workers / live if live != num_workers else 1.0

    def exchanged(self):
        self._live = None

    def finish(self):
        """As :meth:`SyncMode.finish`; a worker whose script left the loop before
        the job stopped first serves its share of the others' rounds (the class docstring)."""
        if self._ready and self.kv is not None and not self.stopped:
            self._serve_departed()
        super().finish()

    def leave_at_exit(self):
        """A worker whose script ended its loop (or never called :meth:`finish`) serves
        the others' rounds, takes the final model and closes."""
        return self.finish_and_close()

    def _serve_departed(self):
        """Push zeros (and no stop ballot) every round until the training workers
        stop (their ballot) or every worker has left."""
        self.departed = True
        self._live = None
        keys = list(self._grad_keys)
        zeros = [mx.nd.zeros(g.shape, ctx=g.context, dtype=g.dtype) for g in self._gbufs]
        sums = None
        if getattr(self, "_sum_keys", None) is not None:   # the script used allreduce_grads() + update()
            sums = [mx.nd.zeros(g.shape, ctx=g.context, dtype=g.dtype) for g in self._sum_push]
        wbufs = [self.wbufs[i] for i in keys]
        no_vote = mx.nd.zeros((1,))
        while True:
            live = self.live_workers(training=False)
            self._live = None
            if live == 0:
                break
            # MXNet's dist kvstore pulls a key into the very array pushed from the CPU (its
            # comm buffer), so the zeros are written again each round.
            for z in zeros + (sums or []) + [no_vote]:
                z[:] = 0
            if sums is not None:
                self.push_pull(self._sum_keys, sums, self._sum_pull)
            self.push_pull(keys + [ps_keys.STOP_VOTE_KEY], zeros + [no_vote], wbufs + self.stopping.votes)
            if self.stopping.tally() > 0:
                break
        self.stopped = True

    def allreduce_grads(self):
        """Every worker's gradients become their mean over the workers: one
        push/pull of the sums through control keys (the servers' optimizer is
        not involved); ``update()`` then pushes the (transformed) mean, which
        every worker holds alike, so the servers apply it as it is."""
        super().allreduce_grads()
        params = trainer_params(self.trainer)
        grads = [params[i].list_grad()[0] for i in self._grad_keys]
        if getattr(self, "_sum_keys", None) is None:
            limit = ps_keys.ALLREDUCE_KEY_END - ps_keys.ALLREDUCE_KEY_BASE
            if len(grads) > limit:
                raise ConfigError("allreduce_grads() in mode sync handles at most %d parameters, got %d"
                                  % (limit, len(grads)))
            self._sum_keys = [ps_keys.ALLREDUCE_KEY_BASE + j for j in range(len(grads))]
            self._sum_push = [mx.nd.zeros(g.shape, ctx=g.context, dtype=g.dtype) for g in grads]
            self._sum_pull = [mx.nd.zeros(g.shape, ctx=g.context, dtype=g.dtype) for g in grads]
            self.channel.init(self._sum_keys, self._sum_pull)  # every worker calls it at the same step
        mx.nd.waitall()  # backward is done (compute time)
        t0 = self.clock()
        live = self.live_workers()   # update() then pushes the mean times N / live (push_scale)
        copy_all(grads, self._sum_push)
        self.push_pull(self._sum_keys, self._sum_push, self._sum_pull)
        for total, grad in zip(self._sum_pull, grads):
            grad[:] = total / live
        mx.nd.waitall()
        spent = self.clock() - t0
        self.stats.wait_s += spent
        self.pause(spent)  # exchange time is not compute time


ELASTIC_SYNC_OPTIMIZERS = (mx.optimizer.SGD, mx.optimizer.NAG)
"""The optimizers ``sync`` runs under ``--elastic``: their step is linear in the gradient (momentum,
weight decay and Nesterov included), so the mean of the members' one-step deltas is the step on the mean
gradient that ``sync``'s servers take."""


class _ElasticSyncBase(RoundMembers, ProgramMode):
    spec = specs.SYNC_ELASTIC   # (name "sync"; dist_async, the State Server's membership rule, deltas)


class ElasticSync(_ElasticSyncBase):
    """``sync`` where a worker may leave or die (``mxhet-launch --elastic``; the simulator's ``--events``):
    the worker program :func:`mxhet.protocol.programs.sync_rounds` over the rounds whose members the State
    Server names (:class:`~mxhet.modes.rounds.RoundMembers`, as ``localsgd`` with one local step).

    ``dist_sync`` applies the optimizer once N pushes of a key arrived, so one dead worker blocks every later
    step. Here each member applies the script's optimizer to its replica (the same weights on every member)
    and pushes its delta / m; for SGD and NAG (momentum, weight decay, a learning-rate schedule) the step is
    linear in the gradient, so the mean of the deltas equals ``sync``'s server-side step on the members' mean
    gradient, and the mean of the members' momentum buffers follows the servers' momentum recursion (equal
    up to float rounding: ``tests/unit/test_elastic_sync.py``). What differs from ``sync``: a worker that
    dies takes its share of the momentum out of the mean; a restarted one starts with fresh optimizer state;
    the BatchNorm statistics are averaged with the rest (``sync`` keeps them local); ``allreduce_grads()``
    leaves each worker's gradient its own, so a transformation between it and ``update()`` (e.g. clipping)
    applies per worker. Other optimizers (and ``clip_gradient``) are refused, naming them.
    """
    program = staticmethod(programs.sync_rounds)
    bucket_bytes = DEFAULT_BUCKET_BYTES

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        if isinstance(trainer, gluon.Trainer):   # (not a test's fake)
            self.check_optimizer(trainer_optimizer(trainer))

    @staticmethod
    def check_optimizer(optimizer):
        """Checked when the Trainer is made (and by the simulator's updater), before any communication.

        Raises:
            ConfigError: naming the optimizer, or its ``clip_gradient``, when the members' averaged one-step
                deltas would not be ``sync``'s step.
        """
        if type(optimizer) not in ELASTIC_SYNC_OPTIMIZERS:
            raise ConfigError(
                "mode sync under --elastic (or the simulator's --events) averages the members' one-step deltas, "
                "which equals sync's step only for an optimizer linear in the gradient (%s); the script's "
                "optimizer %r is not (its state, e.g. adam's second moment, does not average): use sgd or nag, "
                "or run sync without --elastic"
                % (", ".join(o.__name__.lower() for o in ELASTIC_SYNC_OPTIMIZERS), type(optimizer).__name__.lower()))
        clip = getattr(optimizer, "clip_gradient", None)
        if clip is not None and clip >= 0:
            raise ConfigError(
                "mode sync under --elastic (or the simulator's --events): clip_gradient=%r would clip each "
                "worker's gradient, not their mean as sync's servers do; drop clip_gradient or run sync without "
                "--elastic" % (clip,))

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        cls.check_optimizer(optimizer)
        return super().updater_for(num_workers, batch_size, optimizer, opts)


Sync.elastic_executor = ElasticSync


@register
class Async(ElasticEnd, ProgramMode, _GradientMode):
    """Asynchronous SGD on the real cluster: the worker program
    (:func:`mxhet.protocol.programs.asynchronous`) over ``dist_async``.

    Under ``mxhet-launch --elastic --max-restarts 1`` a worker started again after a death takes the
    dead one's PS-LITE rank (its ``kv.init`` pushes nothing), keeps the servers' optimizer and its
    state (it ships none), pulls the current global model and trains on: it *rejoins* with its first
    push after that pull (its step 0: ``rejoined_at_round`` 0; its ``rounds`` count its own pushes,
    those of the dead process are in the model, not in its counters). Nobody waits for it, before or
    after; it ends on the job's finish barrier like the others."""
    spec = specs.ASYNC
    program = staticmethod(programs.asynchronous)
    votes = False   # each worker stops on its own
    _push_round = 0   # the step whose gradient the exchange under way pushes (the test hook's round)

    def request_stop(self):
        # Nobody waits for this worker: it stops at once, not at its next push.
        super().request_stop()
        self.stopped = True

    def leave_at_exit(self):
        """A worker whose loop ended (e.g. its data, before a slower worker's)
        leaves alone (:meth:`SyncMode.leave_alone`). Nobody waits for it
        meanwhile (ssp's gate counts only the workers still training).
        Under ``--elastic`` it finishes on the State Server's rendezvous instead."""
        return self.finish_and_close() if self._elastic() else self.leave_alone()

    # -- mxhet-launch --elastic: nobody waits for another's push, so a death releases no round; only the
    # end waits for every worker (the last pushes before the final pull, the summary's worker files), and
    # PS-LITE's barrier counts the dead: the end runs on the State Server's round rendezvous instead
    # (mxhet.control.membership: a finish is answered once no live worker trains).
    # (ElasticEnd: the end on the State Server's finish barrier)
    def on_connect(self):
        super().on_connect()
        if self._elastic():
            keep_kvstore_alive(self.channel.kv)
            if self.client.job_over:   # started again after every other worker stopped training
                leave_too_late(self)
            if self.client.rejoined:
                self.stats.rejoined_at_round = 0

    def server_updater(self, batch_size):
        """The script's optimizer for the servers; None (ship nothing) for a worker started again, whose
        servers run it already and hold its state (momentum, update counts) for every key."""
        if self.stats.rejoined_at_round is not None:
            return None
        return super().server_updater(batch_size)

    def exchange_gradients(self, batch_size, round_index, *control):
        self._push_round = round_index
        super().exchange_gradients(batch_size, round_index, *control)

    def push_pull(self, keys, values, outs):
        spec = self.config.test_kill_after_push
        if kill_due(spec, self.channel.rank, self._push_round):
            # tests only: die once the servers applied this push (it returns then), before the pull
            self.channel.push(keys, values)
            kill_if_due(spec, self.channel.rank, self._push_round, values)
        super().push_pull(keys, values, outs)


@register
class DCASGD(Async):
    """Asynchronous SGD with delay compensation (Zheng et al. 2017) on the servers:
    MXNet's ``DCASGD`` rule (:class:`kvstore_ext.updaters.DelayCompensatedSGD`)
    corrects each stale gradient with ``λ·g⊙g⊙(W − W_prev)``. The original ESync
    code compared with it."""
    spec = specs.DCASGD

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        if isinstance(trainer, gluon.Trainer):   # (not a test's fake)
            self.check_optimizer(trainer_optimizer(trainer))

    @staticmethod
    def check_optimizer(optimizer):
        """The other gradient modes run the script's own optimizer on the servers
        (:class:`kvstore_ext.updaters.ServerOptimizer`); DC-ASGD's compensation is
        an SGD rule, so only SGD (with momentum, weight decay, clipping and its
        learning-rate schedule, all kept) or MXNet's ``dcasgd`` can be honoured.
        Checked when the Trainer is made, before any communication.

        Raises:
            ConfigError: naming the script's optimizer.
        """
        if type(optimizer) is not mx.optimizer.SGD and not isinstance(optimizer, mx.optimizer.DCASGD):
            raise ConfigError(
                "mode dcasgd runs MXNet's DCASGD (SGD with delay compensation) on the servers and cannot honour "
                "the script's optimizer %r; pass 'sgd' (its learning_rate, momentum, wd, clip_gradient and "
                "lr_scheduler are kept), or use mode async, which runs the script's optimizer on the servers"
                % type(optimizer).__name__.lower())

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import DelayCompensatedSGD, ServerOptimizer
        cls.check_optimizer(optimizer)
        dc = DelayCompensatedSGD(learning_rate=optimizer.learning_rate, momentum=getattr(optimizer, "momentum", 0.0),
                                 lamda=opts["lamda"], wd=optimizer.wd, rescale_grad=1.0 / batch_size,
                                 clip_gradient=optimizer.clip_gradient, lr_scheduler=optimizer.lr_scheduler)
        return ServerOptimizer(num_workers, dc)


@register
class SSP(Async):
    """Stale synchronous parallel: asynchronous SGD, but no worker runs more
    than ``staleness`` iterations ahead of the slowest worker still training
    (the worker program :func:`mxhet.protocol.programs.ssp`). The gate is the
    State Server (``mxhet-launch --staleness S``)."""
    spec = specs.SSP
    program = staticmethod(programs.ssp)

    def on_connect(self):
        self.client = self.join_state_server()

    def communicate(self, batch_size, capability, compute_end):
        super().communicate(batch_size, capability, compute_end)
        if self.stopped:
            # Leave the gate now, not at close(): the others must not wait for
            # this worker's clock while it waits for them at the final barrier.
            self.leave_state_server()

    def request_stop(self):
        super().request_stop()
        self.leave_state_server()


__all__ = ["Sync", "ElasticSync", "Async", "DCASGD", "SSP"]
