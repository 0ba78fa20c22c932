"""Asynchronous SGD without gradient delay (``nodelay``) on the real cluster.

Algorithm 1 of "Asynchronous SGD without gradient delay for efficient
distributed training": the worker keeps computing gradients while its
previous update is merged, and waits only when τ of its gradients
(``staleness``) are missing from the last global model it received. The
decisions are :class:`mxhet.policy.nodelay.NoDelayPolicy` (worker) and
:class:`mxhet.control.nodelay.TransferRule` (the master, in the State Server);
this module moves the arrays:

* ``x`` is the replica (the Trainer's parameters), ``x_init`` the last
  global model received or, after a transfer, ``x`` at that moment; the
  local update is ``w.x = x - x_init``;
* the first gradient after a transfer announces the next round (Notify,
  without waiting); the State Server's answer, when every worker announced
  and the previous merge reached everyone, asks for the transfer;
* a transfer, at the next point where ``x`` is not being written (the end of
  a step, or during the emulated slowdown), copies ``w.x`` into a send buffer,
  sets ``x_init = x`` (``w.x`` is zero from then on; the pseudo-code's line
  23) and hands the buffer to a data-plane thread that pushes it and pulls the
  merged model through ``dist_sync`` with the ESync averaging updater
  (``PS.x += mean(w.x)``), one round after the other (FIFO); an emulated
  link delay (``--net-delay-ms``) holds the push and the merged model back
  by that much each way, as in the simulator;
* when the merged model has arrived, at the end of a step:
  ``x_init = PS.x`` and ``x = x_init + w.x`` (the steps since the transfer stay
  on top of it), and the worker reports the arrival (Merged).

The step path waits only for this worker's own parameters and gradients
(:meth:`NoDelay.wait_compute`), never ``mx.nd.waitall()``: that would also
wait for the pull in flight. A worker's wish to stop rides on its announcement
of a round; the State Server makes it the last round for all, every worker
hands over and waits for that round's model, so every worker stops with the
same global model.
"""
import queue
import threading
import time

import mxnet as mx

from ..control import messages as m
from ..dataplane import copy_all, nbytes
from ..errors import ConfigError, MxhetError, StateServerTimeout
from ..gluon_private import trainer_params
from ..policy import specs
from ..policy.nodelay import NoDelayPolicy
from ..policy.worker import Action
from .base import SyncMode
from .registry import register

WAIT_SLICE_S = 0.05
"""Seconds of one wait for the model in flight or for the State Server's
request while blocked, before the other source is looked at again."""


class Courier:
    """The data-plane thread: for each handed-over round, push ``w.x`` and pull
    the merged model, one round after the other, off the training thread.

    Args:
        kv: the dist kvstore.
        keys: the parameter keys.
        clock: monotonic clock in seconds.
        delay: emulated one-way delay of the link, seconds: the push leaves
            and the merged model is handed over this much later (the
            launcher's ``--net-delay-ms``, as the simulator models it).
        sleep: the sleep function.
    """

    def __init__(self, kv, keys, clock, delay=0.0, sleep=time.sleep):
        if not delay >= 0:
            raise ValueError("delay must be >= 0 seconds, got %r" % (delay,))
        self.kv, self.keys, self.clock, self.delay, self.sleep = kv, list(keys), clock, float(delay), sleep
        self._jobs = queue.Queue()
        self._done = queue.Queue()
        self.busy = False
        self._thread = threading.Thread(target=self._run, name="mxhet-nodelay-courier", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            round_, sends, recvs = job
            t0 = self.clock()
            try:
                if self.delay:
                    self.sleep(self.delay)
                self.kv.push(self.keys, sends)
                self.kv.pull(self.keys, out=recvs)
                for r in recvs:
                    r.wait_to_read()
                if self.delay:
                    self.sleep(self.delay)
                self._done.put((round_, self.clock() - t0, None))
            except BaseException as exc:  # noqa: BLE001  (handed to the training thread)
                self._done.put((round_, 0.0, exc))

    def submit(self, round_, sends, recvs):
        """Push ``sends`` and pull into ``recvs`` for ``round_`` (queued behind earlier rounds)."""
        self.busy = True
        self._jobs.put((round_, sends, recvs))

    def take(self, timeout=0.0):
        """``(round, seconds)`` of a finished round, waiting up to ``timeout`` seconds; None if none.

        Raises:
            MxhetError: the push or pull failed in the data-plane thread.
        """
        try:
            round_, seconds, error = self._done.get(timeout=timeout) if timeout > 0 else self._done.get_nowait()
        except queue.Empty:
            return None
        self.busy = False
        if error is not None:
            raise MxhetError("the push/pull of round %d failed: %s" % (round_, error)) from error
        return round_, seconds

    def close(self, timeout=10.0):
        self._jobs.put(None)
        self._thread.join(timeout)


@register
class NoDelay(SyncMode):
    """The executor of :class:`~mxhet.policy.nodelay.NoDelayPolicy` on the real cluster."""
    spec = specs.NODELAY

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        self.policy = NoDelayPolicy(self.opts["staleness"])
        self.courier = None
        self.transfer_s = 0.0   # seconds the data-plane thread spent in push/pull (off the training thread)

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=1.0)

    def on_connect(self):
        self.client = self.join_state_server()

    def on_setup(self, batch_size):
        def like():
            return [mx.nd.zeros(g.shape, ctx=g.context, dtype=g.dtype) for g in self.wbufs]
        self._xinit, self._send, self._recv, self._tmp = like(), like(), like(), like()
        copy_all(self.wbufs, self._xinit)
        mx.nd.waitall()
        self.policy.arrived(-1)   # lines 6-11: the initial global model is in x and x_init
        self.courier = Courier(self.kv, self.keys, self.clock, delay=self.config.net_delay_ms / 1000.0)

    def wait_compute(self):
        # Only this worker's own arrays: the pull in flight must not be waited for.
        for p in trainer_params(self.trainer):
            for a in p.list_data():
                a.wait_to_read()
            if p.grad_req != "null":
                for g in p.list_grad():
                    g.wait_to_read()

    # -- the step ------------------------------------------------------------------
    def local_update(self, batch_size, ignore_stale_grad):
        self.trainer.local_step(batch_size, ignore_stale_grad)
        self.aggregated = False

    def communicate(self, batch_size, capability, compute_end):
        if self.policy.completed() is Action.QUERY:
            self._notify()
        self._service(block=False, stop_ok=True)
        if self.policy.blocked:
            self.stats.waited_iterations += 1
        last_progress = self.clock()
        while self.policy.blocked or (self.policy.stopping and not self.policy.done):  # line 5
            if self._service(block=True, stop_ok=True):
                last_progress = self.clock()
            elif self.clock() - last_progress > self.client.timeout:
                raise StateServerTimeout("nodelay worker rank %d waited %.0f s at staleness %d for round %d "
                                         "(a transfer request or a merged model)"
                                         % (self.stats.rank, self.client.timeout, self.policy.s, self.policy.round))
        if self.policy.done:
            self.stopped = True

    def emulate_slowdown(self, seconds):
        # The rest of a slow device's computation: a transfer asked for meanwhile
        # is carried out at once (thread 2 does not wait for thread 1).
        deadline = self.clock() + seconds
        while True:
            self._service(block=False, stop_ok=False, arrivals=False)
            left = deadline - self.clock()
            if left <= 0:
                return
            self._take_replies(self.client.poll(timeout=left))

    def _service(self, block, stop_ok, arrivals=True):
        """Take the State Server's answers and a finished round, carry out a due
        transfer; with ``block``, wait up to :data:`WAIT_SLICE_S` for the one
        thing that can come next. Returns True if anything happened.

        ``stop_ok``: carry out the job's last transfer too (only at the end of a
        step, after which the worker computes nothing more). ``arrivals``:
        take a merged model in (only between two steps).
        """
        busy = self.courier.busy
        waited = block and busy and arrivals
        got = self.courier.take(WAIT_SLICE_S if waited else 0.0) if arrivals and busy else None
        replies = self.client.poll(timeout=WAIT_SLICE_S if block and not waited else 0.0)
        self._take_replies(replies)
        if got is not None:
            self._arrive(*got)
        transferred = False
        if self.policy.transfer_due and not self.courier.busy and (stop_ok or not self.policy.request[1]):
            self._transfer()
            transferred = True
        return got is not None or bool(replies) or transferred

    def _take_replies(self, replies):
        for reply in replies:
            if reply.ready:  # the master's request for a transfer (the answer to a Notify)
                self.policy.requested(reply.round, reply.stop)
        self.stats.state_queries = self.client.queries
        self.stats.state_replies = self.client.replies
        self.stats.rtt_s = self.client.rtt

    def _notify(self):
        # Asks to stop after the announced round if the stop condition would
        # hold once it is done (so --max-rounds R means R transfers, as localsgd's R averages).
        self.stats.rounds += 1
        want_stop = self.wants_stop()
        self.stats.rounds -= 1
        self.client.send(m.Notify, round=self.policy.round, pending=self.policy.pending, want_stop=bool(want_stop))
        self.client.queries += 1

    def _transfer(self):
        """Lines 22-23: hand ``w.x`` over, ``x_init = x``."""
        round_ = self.policy.request[0]
        weights = self.weights()
        for x, xi, s in zip(weights, self._xinit, self._send):
            mx.nd.elemwise_sub(x, xi, out=s)
        if self.check_finite(self._send, "model update w.x", round_):
            copy_all(weights, self._xinit)
        else:  # skipped (zeros pushed): the local work since the last transfer is dropped
            copy_all(self._xinit, weights)
        _, k, _ = self.policy.transferred()
        self.courier.submit(round_, self._send, self._recv)
        self.stats.rounds += 1
        self.stats.local_iters.append(k)

    def _arrive(self, round_, seconds):
        """Lines 8-11: ``x_init = PS.x``, ``x = x_init + w.x``."""
        weights = self.weights()
        for x, xi, t in zip(weights, self._xinit, self._tmp):
            mx.nd.elemwise_sub(x, xi, out=t)          # w.x: the steps since the transfer
        copy_all(self._recv, self._xinit)
        copy_all(self._recv, self.wbufs)               # the global model as last received
        for xi, t in zip(self._xinit, self._tmp):
            t += xi
        copy_all(self._tmp, weights)
        self.policy.arrived(round_)
        self.transfer_s += seconds
        self.stats.bytes_pushed += nbytes(self._send)
        self.stats.bytes_pulled += nbytes(self._recv)
        self.stats.round_end_s.append(self.clock() - self._t_start)
        self.client.send(m.Merged, round=round_)
        self.aggregated = True

    # -- the end -----------------------------------------------------------------------
    def finish(self):
        if self.courier is not None:
            if self.courier.busy:
                raise MxhetError("finish() with round %s in flight" % self.policy.in_flight)
            self.courier.close()
            self.courier = None
        super().finish()

    def close(self):
        if self.courier is not None:
            self.courier.close(timeout=1.0)
            self.courier = None
        super().close()

    def checkpoint_state(self):
        raise ConfigError("nodelay does not support checkpoints: a worker's unmerged local work is in flight "
                          "at every step")
