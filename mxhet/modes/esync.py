"""ESync (Algorithm 1 of the paper), with blocking or delayed-ACK State Server queries:
the cluster's executor of its worker program (:func:`mxhet.protocol.programs.esync`).

Every worker trains a replica of the global model w_t. After each local
iteration it asks the State Server whether to keep training (NOT-READY) or to
aggregate (READY). On READY it enters the round at the State Server, which names
the round's m members (every worker still training), pushes its share
ε·Δ/m of Δ = w_local - w_t for every parameter (BatchNorm running statistics
included) to ``dist_async`` servers that add every push, so that
``w_t+1 = w_t + ε·mean(Δ)`` once all m are in (:meth:`ESync._member_round`), the
worker pulls w_t+1 into its replica and sends RESET without waiting for its
answer: the job's decision to stop after that round comes back with the answer
to the next query (protocol v2). A worker whose script leaves its loop, or
that dies under ``mxhet-launch --elastic``, leaves the rounds
(:class:`~mxhet.modes.rounds.RoundMembers`) and the others go on. Under
``--round-deadline D`` a round's members are those the State Server's READY
named (the devices on time and the late ones whose delta enters it), and each
pushes ε·share·Δ with the share its READY carries (:meth:`ESync._deadline_round`).

``ack="blocking"`` waits for every answer (Algorithm 1). ``ack="delayed"`` is
the non-blocking mode of §4.2: the query is sent and training goes on; no
answer yet means NOT-READY. Answers are picked up without waiting right
after the query is sent, at the end of every iteration (with either kind of
ACK: the job's stop decision, from RESET's answer, ends the worker there, as
in the simulator), and in the next ``step()`` -- after that iteration's
forward and backward, *before* its optimizer update (and during the emulated
slowdown, which stands for the rest of a slow device's computation). When a READY for the current round is there, the
iteration in progress is abandoned -- its gradients are dropped, no part of it
reaches the replica -- and the worker aggregates the iterations it completed.
Answers for an earlier round (late or duplicated) are ignored. One exception
to not waiting, decided by the worker program for both engines: the device
the latest answer named the slowest waits a few round trips
(:data:`mxhet.protocol.programs.SLOWEST_WAIT_RTTS`) for the answer to its
query -- READY at once under Algorithm 2 -- rather than start an iteration the
READY would abandon while every other device waits for its push.

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
Under ``--round-deadline`` the test batch is the second ``step()``: the first,
MXNet's warm-up, is dropped the same way, without emulated slowdown and not
reported (the deadline judges devices by the test batch's time).

Optimizer state at a round boundary: kept by default (momentum or Adam moments
carry on, as if the local optimizer ran continuously on the replica); with
``reset_optimizer_state=True`` it starts afresh every round.
"""
import math

import mxnet as mx

from kvstore_ext import keys as ps_keys

from ..errors import ConfigError
from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..dataplane.weighting import DeltaWeighting
from ..gluon_private import trainer_params
from ..policy import aggregation as agg
from ..policy import specs
from ..policy.needed import check_loss
from ..protocol import Session, programs
from ..protocol.effects import (AggregateDeltas, AwaitAnswer, Iterate, Iterated, Listen, ResetOptimizer,
                                JOB_OVER, RoundTrip, SendReset, StateQuery)
from .esync_outer import OuterMomentumMirror
from .program import ProgramMode
from .registry import register
from .rounds import ROUND_WAIT_S, RoundMembers, refused_round

ACK_MODES = programs.ACK_MODES


@register
class ESync(RoundMembers, ProgramMode):
    """The executor of ESync's worker program (:func:`mxhet.protocol.programs.esync`) on the real cluster:
    each round's members are named by the State Server (:class:`~mxhet.modes.rounds.RoundMembers`), so a
    worker may leave its loop, or die under ``mxhet-launch --elastic``, and the others go on."""
    spec = specs.ESYNC
    program = staticmethod(programs.esync)
    bucket_bytes = DEFAULT_BUCKET_BYTES
    votes = False   # the stop decision comes from the State Server (RESET), not a ballot

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        programs.check_esync(self.opts)
        if self.opts["round_deadline"] and self.opts["outer_optimizer"] != "none":
            # The outer momentum is mirrored by every member alike; a late device misses the rounds it
            # was late for, so its mirror would differ from the others'.
            raise ConfigError("esync: round_deadline (--round-deadline) %r needs outer_optimizer 'none' on the "
                              "cluster, got %r" % (self.opts["round_deadline"], self.opts["outer_optimizer"]))
        if self.opts["round_deadline"]:
            self.stats.deadline_pushes = []   # [round, share] of every delta this worker pushed
        # --wait-needed: the first batch from each global model reports its loss (Trainer.observe_loss)
        self.uses_loss = bool(self.opts["wait_needed"])
        self._batch_loss = None   # what the loop observed since the last step, for the pending Iterate
        self.delayed = self.opts["ack"] == "delayed"
        self.weighting = DeltaWeighting(self.opts["aggregation"])
        self.outer = None   # the servers' outer momentum, mirrored (outer_optimizer="nesterov")
        if self.opts["outer_optimizer"] == "nesterov":
            keys = [i for i, p in enumerate(trainer_params(trainer)) if p.grad_req != "null"]
            self.outer = OuterMomentumMirror(self.opts["outer_lr"], self.opts["outer_momentum"], keys)
        self._batch_size = 0
        self.answers = None        # the program's ESyncAnswers (its Listen effect)
        self._answered = True      # the last non-blocking query's answer is in
        self._compute_end = 0.0

    @property
    def round(self):
        """The round in progress (rounds aggregated so far)."""
        return self.stats.rounds

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts, plain_keys=(), initial_momentum=None):
        from kvstore_ext.updaters import ESyncAggregate
        return ESyncAggregate(num_workers, epsilon=opts["global_lr"], outer=opts["outer_optimizer"],
                              outer_lr=opts["outer_lr"], outer_momentum=opts["outer_momentum"],
                              plain_keys=plain_keys, initial_momentum=initial_momentum)

    # The cluster's servers add every push (RoundMembers.server_updater: MemberSum); the members
    # scale their pushes (_member_round). updater_for above is the simulator's servers' rule.

    def on_setup(self, batch_size):
        if self.opts["late_memory"]:
            self._setup_memory()
        self._count_messages()
        # The program's first effects (Listen) come before its first iteration.
        self.session = Session(type(self).program(self.opts, self.stats), self.trace)
        if self.session.run_until_compute(self.carry_out) is None:
            self.stopped = True

    # -- the iteration (the pending Iterate) ---------------------------------------------
    def _iteration(self):
        effect = self.session.pending
        return effect if isinstance(effect, Iterate) else None

    def local_update(self, batch_size, ignore_stale_grad):
        self._batch_size = batch_size
        effect = self._iteration()
        if effect is not None and effect.test:
            self._drop_test_batch()
            return
        super().local_update(batch_size, ignore_stale_grad)

    def _drop_test_batch(self):
        """Algorithm 1 lines 3 and 6: the test batch's gradient is not applied, and
        its forward pass's BatchNorm statistics are undone (the replica stays w_t)."""
        self.drop_gradients()
        for p, w, g in zip(trainer_params(self.trainer), self.weights(), self.wbufs):
            if p.grad_req == "null":
                g.copyto(w)

    def communicate(self, batch_size, capability, compute_end):
        effect = self._iteration()
        if effect is not None and effect.test:
            # The test batch is no iteration: its time is the first capability (k = 0).
            self.stats.iterations -= 1
            self.stats.samples -= batch_size
            if not effect.warmup:
                self.stats.test_batch_s = capability
        self._compute_end = compute_end
        self._take(self.client.poll())   # the job's stop may have come meanwhile (RESET's answer)
        self._advance(Iterated(capability, loss=self._read_loss(effect)))

    def observe_loss(self, value):
        super().observe_loss(value)
        self._batch_loss = value

    def _read_loss(self, effect):
        """The pending Iterate's batch loss when it asks for one (``--wait-needed``), else None;
        the loop must have observed it since the last step."""
        loss, self._batch_loss = self._batch_loss, None
        if effect is None or not effect.read_loss:
            return None
        if loss is None:
            raise ConfigError("esync --wait-needed reads the training loss of the first batch from each global "
                              "model: call trainer.observe_loss(loss) before every trainer.step() (python -m "
                              "mxhet.train does)")
        loss = float(loss.asscalar() if hasattr(loss, "asscalar") else loss)
        if not math.isfinite(loss):   # the non-finite guard deals with the model; no measure this time
            return None
        return check_loss(loss)

    def _advance(self, result):
        self._step_batch = self._batch_size
        if self.session.run_until_compute(self.carry_out, result) is None:
            self.stopped = True
            self._drop_unaggregated()

    def _drop_unaggregated(self):
        """The iterations since the last aggregated round are discarded work (the
        job stopped after that round): they are not counted as done, as aborted ones."""
        done = sum(self.stats.local_iters)
        self.stats.samples -= (self.stats.iterations - done) * self._batch_size
        self.stats.iterations = done

    def emulate_slowdown(self, seconds):
        effect = self._iteration()
        if effect is not None and effect.warmup:   # not an iteration of the profile: the machine's time only
            return
        if effect is None or not effect.abortable:
            self.sleep(seconds)
            return
        # The emulated rest of a slow device's computation: a READY that comes
        # meanwhile ends it at once, as the paper's devices abort immediately.
        deadline = self.clock() + seconds
        while not self.answers.wake:
            left = deadline - self.clock()
            if left <= 0:
                break
            self._take(self.client.poll(timeout=left))

    def should_abort(self):
        effect = self._iteration()
        if effect is None or not effect.abortable:
            return False
        self._take(self.client.poll())
        # A stop decided meanwhile is no abort: the program stops after this iteration.
        return self.answers.abort and not self.answers.stop_decided

    def on_abort(self):
        self._advance(Iterated(self.clock() - self.timer.t_last, aborted=True))

    # -- the State Server ---------------------------------------------------------------------
    def _take(self, replies):
        """Hand the State Server's answers (and its stop decision) to the program."""
        for reply in replies:
            self.answers.answer(reply)
            self._answered = True
        if self.client.stop_decided:
            self.answers.stop()
        self._count_messages()

    def _count_messages(self):
        self.stats.state_queries = self.client.queries
        self.stats.state_replies = self.client.replies
        self.stats.rtt_s = self.client.rtt
        self.stats.max_queries_in_flight = self.client.max_in_flight

    def carry_out(self, effect):
        if isinstance(effect, Listen):
            self.answers = effect.answers
            return None
        if isinstance(effect, RoundTrip):
            return self.client.rtt
        if isinstance(effect, StateQuery):
            t0 = self.clock()
            since_finish = t0 - self._compute_end + effect.ahead
            reply = None
            if effect.blocking:
                reply = self.client.query(effect.round, effect.k, effect.c, since_finish=since_finish,
                                          loss=effect.loss)
            else:
                self._answered = False
                self.client.send_query(effect.round, effect.k, effect.c, since_finish=since_finish,
                                       loss=effect.loss)
                self._take(self.client.poll())   # an answer already in is taken at once
            if self.client.stop_decided:
                self.answers.stop()
            self.stats.query_s += self.clock() - t0
            self._count_messages()
            return reply
        if isinstance(effect, AwaitAnswer):
            t0 = self.clock()
            if not self._answered:
                self._take(self.client.poll(timeout=effect.timeout))
            self.stats.query_s += self.clock() - t0
            return None
        if isinstance(effect, AggregateDeltas):
            return self._aggregate(effect)
        if isinstance(effect, ResetOptimizer):
            self.reset_optimizer_state()
            return None
        if isinstance(effect, SendReset):
            t0 = self.clock()
            self.client.send_reset(effect.round, want_stop=effect.want_stop, since_finish=effect.since_finish)
            self.stats.query_s += self.clock() - t0
            self._count_messages()
            return None
        return super().carry_out(effect)

    # -- aggregation ------------------------------------------------------------------------------
    def _aggregate(self, effect):
        """One round among its members: push this worker's share, pull w_t+1 into the replica.
        Returns None; JOB_OVER when the round comes after the job's agreed stop (nothing pushed)."""
        before = self.outer.before(self.wbufs) if self.outer else None
        times = self._member_round(effect)
        if times is JOB_OVER:
            return JOB_OVER
        start, issued, end = times
        self.stats.round_exchange_start_s.append(start - self.timer.t_start)
        self.stats.round_exchange_issued_s.append(issued - self.timer.t_start)
        self.stats.round_exchange_end_s.append(end - self.timer.t_start)
        if self.outer:
            self.outer.after(before, self.wbufs)
        self.aggregated = True

    def _member_round(self, effect):
        """Enter the round (with the count vector when the deltas are weighted), push
        this member's share of ``w_t+1 - w_t``, wait until every member's is applied
        (or the member is gone), pull w_t+1. Returns the clock readings (start, pushed, end).

        The servers add every push (:class:`kvstore_ext.updaters.MemberSum`), so the
        members push what ESync's server rule (:class:`kvstore_ext.updaters.ESyncAggregate`)
        would apply, split m ways: ``a_i = ε·f_i·Δ_i/m`` with ``f_i`` the push scale of
        the weighting over the round's m members (:func:`mxhet.policy.aggregation.push_scale`:
        the weights sum to one over the members present); with the Nesterov outer
        optimizer ``lr·((1+μ)·a_i − μ²·v/m)``, v the outer momentum every member
        follows alike (:class:`~mxhet.modes.esync_outer.OuterMomentumMirror`: with no
        state on the servers it is the momentum itself). BatchNorm statistics take ``Δ_i/m``, their
        mean, whatever ε (:class:`~kvstore_ext.updaters.ESyncAggregate`'s plain keys).
        """
        if effect.members:
            return self._deadline_round(effect)
        t0 = self.clock()
        own = self.weighting.counts(effect.steps, self._batch_size, self.trainer) if self.weighting.active else ()
        members, _, totals = self.client.round_enter_counted(effect.round, own, timeout=ROUND_WAIT_S)
        t1 = self.clock()
        if self.client.job_over:
            self.stats.query_s += t1 - t0
            return refused_round(self, effect.round)
        factor = 1.0
        if self.weighting.active:
            factor = agg.push_scale(self.weighting.aggregation, own, list(totals), members)
            self.weighting.last_factor = factor
        epsilon = self.opts["global_lr"]
        outer = self.outer
        params = trainer_params(self.trainer)
        weights = self.weights()
        if getattr(self, "_sends", None) is None:
            self._sends = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in self.wbufs]
        trainable = [p.grad_req != "null" for p in params]
        for w, g, d, moves in zip(weights, self.wbufs, self._sends, trainable):
            mx.nd.elemwise_sub(w, g, out=d)
            if moves and factor != 1.0:
                d *= factor
        self.check_finite(self._sends, "model delta", effect.round)
        hook = self.round_hook
        if hook:   # the weighted deltas, as ESyncAggregate would have summed them (the script's dump)
            before = [g.asnumpy() for g in self.wbufs]
            pushed = [d.asnumpy() for d in self._sends]
        for i, (d, moves) in enumerate(zip(self._sends, trainable)):
            if not moves:
                d *= 1.0 / members
            elif outer is None:
                d *= epsilon / members
            else:
                d *= outer.lr * (1.0 + outer.momentum) * epsilon / members
                v = outer.buffers.get(i)
                if v is not None:
                    d -= v * (outer.lr * outer.momentum * outer.momentum / members)
        t2, t4 = self._push_done_pull(effect.round, members, weights, t0, t1)
        if hook:
            hook(effect.round, before, pushed, [g.asnumpy() for g in self.wbufs])
        return t1, t2, t4

    def _deadline_round(self, effect):
        """``--round-deadline``: a round of the members the State Server named on this worker's READY
        (the devices on time and the late ones whose delta enters it; the rendezvous waits for exactly
        them, :meth:`mxhet.control.membership.RoundRendezvous.name`). The servers add every push, so
        each member pushes ``ε·share·Δ`` (its share from the READY, the shares summing to one):
        ``w += ε·Σ share_i·Δ_i``, as the simulator's servers apply
        (:func:`mxhet.sim.program._deadline_aggregate`); BatchNorm statistics without ε. A late member
        continues from the round's result. Returns the clock readings (start, pushed, end), or
        JOB_OVER when the round comes after the job's agreed stop (nothing pushed)."""
        t0 = self.clock()
        members, _, _ = self.client.round_enter_counted(effect.round, (), timeout=ROUND_WAIT_S)
        t1 = self.clock()
        if self.client.job_over:
            self.stats.query_s += t1 - t0
            return refused_round(self, effect.round)
        weights = self.weights()
        if getattr(self, "_sends", None) is None:
            self._sends = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in self.wbufs]
        for w, g, d in zip(weights, self.wbufs, self._sends):
            mx.nd.elemwise_sub(w, g, out=d)
        self.check_finite(self._sends, "model delta", effect.round)
        if effect.remember:   # --late-memory: this late delta becomes the device's memory on the servers
            self._remember()
        for d in self._sends:
            d *= effect.weight * effect.members
        hook = self.round_hook
        extra = {}
        if hook and effect.memory:   # the script's dump: the memories' term apart (pushed - own)
            own = [d.asnumpy() for d in self._sends]
        if effect.memory:   # --late-memory, the round's keeper: the absent devices' memories at 1/N each
            self._add_memories(effect)
        if hook:   # the deltas as the simulator's members push them (share·m·Δ: their mean is Σ share·Δ)
            before = [g.asnumpy() for g in self.wbufs]
            pushed = [d.asnumpy() for d in self._sends]
            if effect.memory:
                extra["memory"] = [p - o for p, o in zip(pushed, own)]
        scale, plain = self.opts["global_lr"] / effect.members, 1.0 / effect.members
        for d, p in zip(self._sends, trainer_params(self.trainer)):
            d *= scale if p.grad_req != "null" else plain
        t2, t4 = self._push_done_pull(effect.round, members, weights, t0, t1)
        if self.opts["late_memory"]:
            self._rounds_over.add(effect.round)
        if hook:
            hook(effect.round, before, pushed, [g.asnumpy() for g in self.wbufs], **extra)
        self.stats.deadline_pushes.append([effect.round, effect.weight])
        return t1, t2, t4

    # -- --late-memory (mxhet.policy.deadline) ----------------------------------------------------
    def _setup_memory(self):
        """One key set per rank for its latest late delta (zeros until it is late; every worker takes part
        in the init, rank 0's zeros win, as for the model's keys), and the keeper's copies."""
        weights = self.weights()
        try:
            self.memory_keys = [ps_keys.memory_keys(r, len(weights)) for r in range(self.channel.num_workers)]
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._memory_cache = {}   # rank -> (the round its memory entered, its arrays): this worker as keeper
        self._rounds_over = set()   # the rounds this worker was a member of: each was over when it pulled
        if self.channel.rank >= len(self.memory_keys):
            raise ConfigError("esync --late-memory: rank %d has no memory keys (%d workers)"
                              % (self.channel.rank, len(self.memory_keys)))
        self.stats.late_memory = {"pushes": 0, "pulls": 0}
        if not (self.channel.rank == 0 and getattr(self.client, "rejoined", False)):   # (see SyncMode.setup)
            zeros = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in weights]
            self.channel.init([k for keys in self.memory_keys for k in keys], zeros * len(self.memory_keys))

    def _remember(self):
        """Push the raw delta in ``_sends`` to this worker's memory keys (the servers keep the last push)."""
        t0 = self.clock()
        self.channel.push(self.memory_keys[self.channel.rank], self._sends)
        self.stats.sync_s += self.clock() - t0
        self.stats.late_memory["pushes"] += 1

    def _add_memories(self, effect):
        """Add each memory the keeper's READY names, times share x m (the push is scaled by ε/m like the
        shares), to ``_sends``; a memory is pulled once per version (the round its delta entered).

        The late device pushes its memory before it says done in that round, so once the round is over
        the memory is on the servers. A keeper that was not a member of that round (it rejoined since,
        or was itself late then) cannot know it is: it waits for the round first, or it would keep
        the device's previous memory under the new version."""
        factor = effect.memory_share * effect.members
        t0 = self.clock()
        for rank, version in zip(effect.memory[0::2], effect.memory[1::2]):
            have = self._memory_cache.get(rank)
            if have is None or have[0] != version:
                if version not in self._rounds_over:
                    self.client.round_wait(version, timeout=ROUND_WAIT_S)
                arrays = have[1] if have is not None else [mx.nd.zeros(d.shape, ctx=d.context, dtype=d.dtype)
                                                           for d in self._sends]
                self.channel.pull(self.memory_keys[rank], arrays)
                have = self._memory_cache[rank] = (version, arrays)
                self.stats.late_memory["pulls"] += 1
            for d, a in zip(self._sends, have[1]):
                d += a * factor
        self.stats.sync_s += self.clock() - t0

    def checkpoint_state(self):
        return dict(super().checkpoint_state(), round=self.round)

    def restore_state(self, state):
        super().restore_state(state)
        self.stats.rounds = int(state["round"])   # the program starts in this round
        if self.outer is not None and "arrays" in state:
            self.outer.restore(state["arrays"])

    def checkpoint_arrays(self):
        """The outer momentum (mirrored), saved with every checkpoint."""
        return self.outer.arrays() if self.outer is not None else {}
