"""``mxhet.Trainer``: a drop-in replacement for ``gluon.Trainer``.

It keeps ``gluon.Trainer``'s signature and adds ``sync=``, the name of a
synchronization mode (see :mod:`mxhet.modes`). Under the launcher the mode and
the worker's slot come from the environment::

    net = get_model("smallcnn"); net.initialize(mx.init.Xavier())
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    while not trainer.should_stop:
        data, label = next(batches)
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(batch_size)
"""
import atexit
import logging
import os
import sys
import time
import warnings
import weakref

import mxnet as mx
from mxnet import gluon

from .config import worker_config
from .errors import ConfigError
from .modes import get_mode
from .modes.base import PROGRESS_TRAINER, note_progress


def sorted_by_name(params):
    """``params`` (a ``ParameterDict``, dict or list of Parameters) as a list
    sorted by name, so every worker uses the same key order whatever order
    its model registered them in (as Horovod's ``DistributedTrainer``).

    Raises:
        ConfigError: if two parameters share a name.
    """
    values = list(params.values()) if hasattr(params, "values") else list(params)
    ordered = sorted(values, key=lambda p: p.name)
    for a, b in zip(ordered, ordered[1:]):
        if a.name == b.name:
            raise ConfigError("two parameters are named %r; mxhet orders parameters by name" % a.name)
    return ordered


class Trainer(gluon.Trainer):
    """Applies an optimizer to a set of Parameters under a synchronization mode.

    Args:
        params, optimizer, optimizer_params: as for ``gluon.Trainer``. For
            ``esync`` and ``local`` the optimizer runs on the worker; for
            ``sync`` and ``async`` a copy of it runs on the parameter servers.
        kvstore: a dist kvstore the script created (``kv.create('dist')``,
            e.g. for ``store.rank``) is used by the mode when its servers merge
            pushes as the mode needs (``dist``/``dist_sync`` for the
            synchronous modes, ``dist_async`` for the others), else refused
            with ConfigError before any communication; without it, a dist
            kvstore alive in the process is found and used the same way. Any
            other value than the default is ignored with a warning (the mode
            creates its kvstore).
        update_on_kvstore: accepted for compatibility; ignored with a warning.
        compression_params: not supported (raises ConfigError if set).
        sync: mode name (default: ``MXHET_SYNC`` from the launcher, else
            ``local``).
        config: a :class:`mxhet.config.WorkerConfig` (default: read from the
            environment).
        on_nonfinite: ``"stop"`` (default) raises :class:`mxhet.errors.NonFiniteError`
            when a delta or gradient about to be pushed holds NaN/Inf;
            ``"skip"`` pushes zeros instead (see :mod:`mxhet.modes.guard`).
        mode_options: options of the mode, e.g. ``global_lr=1.0`` for esync.

    The parameters may live on several contexts (``split_and_load``): each
    step sums the gradients over them, runs the mode once per worker and
    copies the resulting weights to every context.

    Raises:
        UnknownModeError: for an unregistered mode name.
        ConfigError: for options the mode does not take.
    """

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device",
                 compression_params=None, update_on_kvstore=None, *, sync=None, config=None,
                 on_nonfinite="stop", **mode_options):
        config = config if config is not None else worker_config()
        mode_cls = get_mode(sync or config.sync, elastic=config.elastic)   # (sync: ElasticSync under --elastic)
        if compression_params:
            raise ConfigError("gradient compression is not supported by mxhet.Trainer")
        from .dataplane import is_dist_kvstore
        given = kvstore if is_dist_kvstore(kvstore) and mode_cls.kvstore_type else None
        if (given is None and kvstore not in ("device", None)) or update_on_kvstore is not None:
            warnings.warn("mxhet.Trainer: mode %r chooses the kvstore (%s); kvstore=%r and "
                          "update_on_kvstore=%r are ignored"
                          % (mode_cls.name, mode_cls.kvstore_type, kvstore, update_on_kvstore), stacklevel=2)
        # The local optimizer runs without a kvstore; the mode does all communication.
        super().__init__(sorted_by_name(params), optimizer, optimizer_params, kvstore=None,
                         update_on_kvstore=False)
        self.config = config
        self.mode = mode_cls(self, config, on_nonfinite=on_nonfinite, **mode_options)
        self.mode.given_kvstore = given
        note_progress(config.progress_file, PROGRESS_TRAINER)
        atexit.register(_leave_at_exit, weakref.ref(self), config.elastic)
        if given is not None:
            self.mode.existing_kvstore()   # a misfit is refused now, not at the first step

    # -- gluon.Trainer API -------------------------------------------------
    def step(self, batch_size, ignore_stale_grad=False):
        """One training step: local update and/or synchronization, by mode."""
        self.mode.step(batch_size, ignore_stale_grad)

    def allreduce_grads(self):
        """Make every parameter's gradient the one :meth:`update` applies.

        As ``gluon.Trainer`` (and Horovod's ``DistributedTrainer``), so that
        ``allreduce_grads()``, a transformation of the gradients (e.g.
        ``gluon.utils.clip_global_norm``), then ``update()`` works. In ``sync``
        the gradients become the mean of every worker's (one exchange through
        the parameter servers; every worker calls it at the same step). In the
        other modes each worker's own gradient is what its update applies --
        pushed alone (``async``, ``ssp``, ``dcasgd``) or given to the local
        optimizer (``esync``, ``localsgd``, ``adsp``, ``local``) -- so there is
        nothing to exchange.
        """
        self.mode.allreduce_grads()

    def update(self, batch_size, ignore_stale_grad=False):
        """Apply the (possibly transformed) gradients: what ``step()`` does
        after ``allreduce_grads()``, in every mode."""
        self.mode.step(batch_size, ignore_stale_grad)

    # -- mxhet additions -----------------------------------------------------
    def local_step(self, batch_size, ignore_stale_grad=False):
        """Apply the optimizer to the local parameters only (no communication)."""
        super().step(batch_size, ignore_stale_grad)

    def setup(self, batch_size):
        """Join the job now (connect, share the initial model) instead of at the first step.

        The parameters must be initialized (run one forward pass first if
        their shapes are deferred).
        """
        self.mode.setup(batch_size)

    @property
    def sync(self):
        return self.mode.name

    @property
    def rank(self):
        """PS-LITE rank of this worker (0 in standalone mode)."""
        return self.mode.stats.rank

    @property
    def num_workers(self):
        """Number of workers in the job (1 in standalone mode)."""
        kv = self.mode.kv
        return kv.num_workers if kv is not None else 1

    @property
    def should_stop(self):
        """True once the job agreed to stop; the training loop should end."""
        return self.mode.stopped

    def request_stop(self):
        """Ask to end training. Synchronous modes stop after a step or round that
        every worker completes, so no worker is left waiting."""
        self.mode.request_stop()

    def set_stop_condition(self, condition):
        """Stop when ``condition(stats)`` becomes true (e.g. a time budget or a
        number of rounds). The mode checks it at the point where every worker
        can stop together (esync: at the end of a round), so checking it there
        avoids one extra round compared with :meth:`request_stop`."""
        if condition is not None and not callable(condition):
            raise ConfigError("the stop condition must be callable, got %r" % (condition,))
        self.mode.stopping.condition = condition

    def observe_loss(self, value):
        """Tell the mode the training loss of the batch about to be stepped: call it before
        :meth:`step` (a number; a one-element NDArray is read). ADSP's commit-rate search and
        ESync's ``wait_needed`` use it (``mode.uses_loss``); other modes ignore it."""
        self.mode.observe_loss(value)

    @property
    def stats(self):
        """This worker's counters (:class:`mxhet.modes.WorkerStats`)."""
        return self.mode.stats

    def save_global(self, path):
        """Save the current global model (name -> array) to ``path``.

        Its time does not count as compute time.
        """
        t0 = time.monotonic()
        mx.nd.save(path, {name: arr for name, arr in self.mode.global_arrays().items()})
        self.mode.pause(time.monotonic() - t0)

    def finish(self):
        """After the last step, on every worker: wait for the others' last
        contributions and pull the job's final global model into the local
        parameters (the gradient modes keep BatchNorm statistics local)."""
        self.mode.finish()

    def close(self):
        """Leave the job: release the kvstore and the State Server connection."""
        self.mode.close()


def _leave_at_exit(ref, elastic):
    """At interpreter exit: a worker whose script stopped calling ``step()``
    without :meth:`Trainer.finish` leaves the job cleanly, in the modes that
    support it (:meth:`mxhet.modes.base.SyncMode.leave_at_exit`). Under
    ``mxhet-launch --elastic`` the process then ends at once with code 0:
    PS-LITE's exit barrier (in the dist kvstore's destructor, which the mode
    keeps from running earlier) would wait for a worker that died. A script
    that leaves with ``sys.exit(n)``, n != 0, under ``--elastic`` therefore
    exits 0; an uncaught exception still exits 1."""
    trainer = ref()
    left = False
    if trainer is not None:
        try:
            left = trainer.mode.leave_at_exit()
        except Exception:  # noqa: BLE001  (an exit hook must not hang the process in PS-LITE's barrier)
            logging.getLogger("mxhet.trainer").exception("leaving the job at exit failed")
            _end_now(1)
    if elastic and (left or trainer is None):
        _end_now(0)


def _end_now(code):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
