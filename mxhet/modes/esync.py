"""ESync (Algorithm 1 of the paper), with blocking or delayed-ACK State Server queries.

Every worker trains a replica of the global model w_t. After each local
iteration it asks the State Server whether to keep training (NOT-READY) or to
aggregate (READY). On READY it pushes Δ = w_local - w_t for every parameter
(BatchNorm running statistics included), the servers apply
``w_t+1 = w_t + ε·mean(Δ)`` (:class:`kvstore_ext.updaters.ESyncAverage`), the
worker pulls w_t+1 into its replica and sends RESET without waiting for its
answer: the job's decision to stop after that round comes back with the answer
to the next query (protocol v2), so a round costs one blocking exchange, the
push/pull, and no State Server round trip.

``ack="blocking"`` waits for every answer (Algorithm 1). ``ack="delayed"`` is
the non-blocking mode of §4.2: the query is sent and training goes on; no
answer yet means NOT-READY. Answers are picked up without waiting at two
points: right after the query is sent, and at the start of the next ``step()``
-- after that iteration's forward and backward, *before* its optimizer update
(and during the emulated slowdown, which stands for the rest of a slow
device's computation). When a READY for the current round is there, the
iteration in progress is abandoned -- its gradients are dropped, no part of it
reaches the replica -- and the worker aggregates the iterations it completed.
Answers for an earlier round (late or duplicated) are ignored. One exception
to not waiting: the device the latest answer named the slowest waits a few
round trips (``SLOWEST_WAIT_RTTS``) for the answer to its query -- READY at once
under Algorithm 2 -- rather than start an iteration the READY would abandon
while every other device waits for its push.

The capability the worker reports is its compute time per iteration plus the
measured round-trip time of its State Server queries (§4.2), so a device on a
slow link counts as a slow device. Where it starts its next iteration without
waiting for an answer (after RESET; after a query with delayed ACKs) it adds
that round trip to ``since_finish``, so the State Server's t_e + c is its next
query's arrival (:mod:`mxhet.control.state_rule`).

The first ``step()`` of a worker process is Algorithm 1's test batch (line 3,
RUN-BATCH-DATA-TEST): timed as any iteration, emulated slowdown included, but
its gradient is dropped and the replica's BatchNorm statistics are set back to
the global model's (w_0,0 = w_0, line 6); the data batch is consumed. It is
reported with k = 0 (always NOT-READY), so the State Server knows every
device's capability before the first one asks to aggregate. Its time counts in
``compute_s`` (and ``test_batch_s``), not as an iteration (``iterations``,
``samples``, ``local_iters``). A worker resumed from a checkpoint runs one too.

Optimizer state at a round boundary: kept by default (momentum or Adam moments
carry on, as if the local optimizer ran continuously on the replica); with
``reset_optimizer_state=True`` it starts afresh every round.
"""
from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..errors import ConfigError
from ..gluon_private import trainer_optimizer, trainer_params
from ..policy import specs
from ..policy.aggregation import check_options as check_aggregation
from ..policy.worker import Action, ESyncPolicy
from .esync_outer import OuterMomentumMirror
from .esync_weighting import DeltaWeighting
from .base import SyncMode
from .registry import register

ACK_MODES = ("blocking", "delayed")
SLOWEST_WAIT_RTTS = 4
SLOWEST_WAIT_MAX_S = 0.02
"""Delayed ACKs: after its query, the device last named slowest waits for the
answer up to this many smoothed round trips (at most this many seconds)."""


@register
class ESync(SyncMode):
    """The executor of :class:`mxhet.policy.worker.ESyncPolicy` on the real cluster."""
    spec = specs.ESYNC
    bucket_bytes = DEFAULT_BUCKET_BYTES

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        if not self.opts["global_lr"] > 0:
            raise ConfigError("global_lr (ε of Algorithm 1) must be > 0, got %r" % (self.opts["global_lr"],))
        if self.opts["ack"] not in ACK_MODES:
            raise ConfigError("ack must be one of %s, got %r" % (ACK_MODES, self.opts["ack"]))
        self.delayed = self.opts["ack"] == "delayed"
        check_aggregation(self.opts)
        self.weighting = DeltaWeighting(self.opts["aggregation"])
        self.outer = None   # the servers' outer momentum, mirrored (outer_optimizer="nesterov")
        if self.opts["outer_optimizer"] == "nesterov":
            keys = [i for i, p in enumerate(trainer_params(trainer)) if p.grad_req != "null"]
            self.outer = OuterMomentumMirror(self.opts["outer_lr"], self.opts["outer_momentum"], keys)
        self._batch_size = 0
        self.policy = ESyncPolicy(max_local_steps=self.opts["max_local_steps"])
        self._round_start = (0.0, 0, 0, 0)
        self._named_slowest = False   # the latest answer named this device the slowest

    @property
    def round(self):
        return self.policy.round

    @property
    def k(self):
        return self.policy.k

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts, plain_keys=(), initial_momentum=None):
        from kvstore_ext.updaters import ESyncAggregate
        return ESyncAggregate(num_workers, epsilon=opts["global_lr"], outer=opts["outer_optimizer"],
                              outer_lr=opts["outer_lr"], outer_momentum=opts["outer_momentum"],
                              plain_keys=plain_keys, initial_momentum=initial_momentum)

    def server_updater(self, batch_size):
        # BatchNorm statistics (no gradient) are averaged, never moved by the outer optimizer.
        plain = [i for i, p in enumerate(trainer_params(self.trainer)) if p.grad_req == "null"]
        return self.updater_for(self.channel.num_workers, batch_size, trainer_optimizer(self.trainer), self.opts,
                                plain_keys=plain, initial_momentum=self.outer.restored if self.outer else None)

    def on_connect(self):
        self.client = self.join_state_server()

    def on_setup(self, batch_size):
        self.weighting.setup(self.channel)
        self._mark_round_start()

    # -- the local iteration -------------------------------------------------
    def local_update(self, batch_size, ignore_stale_grad):
        self._batch_size = batch_size
        if not self.policy.tested:
            self._drop_test_batch()
            return
        self.trainer.local_step(batch_size, ignore_stale_grad)
        self.aggregated = False

    def _drop_test_batch(self):
        """Algorithm 1 lines 3 and 6: the test batch's gradient is not applied, and
        its forward pass's BatchNorm statistics are undone (the replica stays w_t)."""
        self.drop_gradients()
        for p, w, g in zip(trainer_params(self.trainer), self.weights(), self.wbufs):
            if p.grad_req == "null":
                g.copyto(w)

    def communicate(self, batch_size, capability, compute_end):
        if self.stopped:  # the job stops after the round last aggregated: this iteration is dropped
            self._drop_unaggregated(batch_size)
            return
        if not self.policy.tested:
            # The test batch is no iteration: its time is the first capability (k = 0).
            self.stats.iterations -= 1
            self.stats.samples -= batch_size
            self.stats.test_batch_s = capability
            self.policy.test_batch_done()
            self._query(capability, compute_end, iteration=False)
            return
        self.policy.completed()
        self._query(capability, compute_end)
        if self.stopped:
            self._drop_unaggregated(batch_size)
        elif self.policy.after_query() is Action.AGGREGATE:
            self.aggregate()

    def _query(self, capability, compute_end, iteration=True):
        """QUERY-STATE for :attr:`round` and :attr:`k` with c = ``capability`` + the
        round trip; blocking, or sent and answered later (delayed ACKs).

        ``since_finish`` is the time since the iteration ended plus the part of
        the round trip this worker does not wait before its next iteration, so
        that t_e + c is when its next query arrives (see
        :mod:`mxhet.control.state_rule`)."""
        rtt = self.client.rtt
        c = capability + rtt
        t0 = self.clock()
        if self.delayed:
            # The device the State Server last named slowest is READY as soon as
            # its query arrives (Algorithm 2), and every other device is then
            # waiting for its push: a few round trips for the answer beat
            # starting a forward/backward pass that the READY would abandon.
            wait = min(SLOWEST_WAIT_RTTS * rtt, SLOWEST_WAIT_MAX_S) if self._named_slowest else 0.0
            self.client.send_query(self.round, self.k, c, since_finish=t0 - compute_end + max(0.0, rtt - wait))
            self.take_replies(self.client.poll(timeout=wait))
        else:
            self.take_replies([self.client.query(self.round, self.k, c, since_finish=t0 - compute_end)])
            if iteration:
                self.stats.waited_iterations += 1
        waited = self.clock() - t0
        self.stats.query_s += waited
        self.stats.query_wait_max_s = max(self.stats.query_wait_max_s, waited)
        if self.stats.query_wait_min_s is None or waited < self.stats.query_wait_min_s:
            self.stats.query_wait_min_s = waited
        self._count_messages()

    def _drop_unaggregated(self, batch_size):
        """The iterations since the last aggregated round are discarded work (the
        job stopped after that round): they are not counted as done, as aborted ones."""
        done = sum(self.stats.local_iters)
        self.stats.samples -= (self.stats.iterations - done) * batch_size
        self.stats.iterations = done

    def take_replies(self, replies):
        """Hand the State Server's answers to the policy."""
        for reply in replies:
            self.policy.answer(reply.round, reply.ready, reply.slowest)
            self._named_slowest = reply.slowest == self.stats.rank
        self.stats.late_replies = self.policy.late_replies
        if self.client.stop_decided:
            self.stopped = True

    def should_abort(self):
        if self.delayed and self.client is not None:
            self.take_replies(self.client.poll())
        return self.policy.before_update() is Action.ABORT

    def on_abort(self):
        self._count_messages()
        self.aggregate()

    def emulate_slowdown(self, seconds):
        if not self.delayed:
            self.sleep(seconds)
            return
        # The emulated rest of a slow device's computation: a READY that comes
        # meanwhile ends it at once, as the paper's devices abort immediately.
        deadline = self.clock() + seconds
        while self.policy.before_update() is Action.CONTINUE and not self.stopped:
            left = deadline - self.clock()
            if left <= 0:
                break
            self.take_replies(self.client.poll(timeout=left))

    # -- aggregation -----------------------------------------------------------
    def aggregate(self):
        """Push Δ for every key in one batch, pull w_t+1, reset the replica, RESET."""
        self.weighting.weigh(self, self.policy.k, self._batch_size)
        before = self.outer.before(self.wbufs) if self.outer else None
        self.exchange_deltas(self.round)
        start, issued, end = getattr(self.channel, "last_exchange", None) or (self._t_start,) * 3
        self.stats.round_exchange_start_s.append(start - self._t_start)
        self.stats.round_exchange_issued_s.append(issued - self._t_start)
        self.stats.round_exchange_end_s.append(end - self._t_start)
        if self.outer:
            self.outer.after(before, self.wbufs)
        if self.opts["reset_optimizer_state"]:
            self.reset_optimizer_state()
        _, k, slowest = self.policy.aggregated()
        self.stats.local_iters.append(k)
        self.stats.rounds = self.round
        self.aggregated = True
        t0 = self.clock()
        # It starts its next iteration without waiting for the answer: a round trip ahead.
        self.client.send_reset(self.round, want_stop=self.wants_stop(), since_finish=self.client.rtt)
        self.stats.query_s += self.clock() - t0
        self._close_round(slowest)

    def _count_messages(self):
        self.stats.state_queries = self.client.queries
        self.stats.state_replies = self.client.replies
        self.stats.rtt_s = self.client.rtt
        self.stats.max_queries_in_flight = self.client.max_in_flight

    def _mark_round_start(self):
        self._round_start = (self.stats.query_s + self.stats.sync_s, self.client.queries,
                             self.client.replies, self.stats.aborted)

    def _close_round(self, slowest):
        blocked, queries, replies, aborted = self._round_start
        self._count_messages()
        self.stats.round_blocked_s.append(self.stats.query_s + self.stats.sync_s - blocked)
        self.stats.round_queries.append(self.client.queries - queries)
        self.stats.round_replies.append(self.client.replies - replies)
        self.stats.round_aborted.append(self.stats.aborted - aborted)
        self.stats.round_slowest.append(slowest)
        self.stats.round_end_s.append(self.clock() - self._t_start)
        self._mark_round_start()

    def checkpoint_state(self):
        return dict(super().checkpoint_state(), round=self.round)

    def restore_state(self, state):
        super().restore_state(state)
        self.policy = ESyncPolicy(round_=int(state["round"]), max_local_steps=self.opts["max_local_steps"])
        if self.outer is not None and "arrays" in state:
            self.outer.restore(state["arrays"])

    def checkpoint_arrays(self):
        """The outer momentum (mirrored), saved with every checkpoint."""
        return self.outer.arrays() if self.outer is not None else {}
