"""Asynchronous SGD without gradient delay (``nodelay``) on the real cluster.

Algorithm 1 of "Asynchronous SGD without gradient delay for efficient
distributed training". The worker protocol is
:func:`mxhet.protocol.programs_groups.nodelay` (with
:class:`mxhet.policy.nodelay.NoDelayPolicy`), the master the State Server's
:class:`mxhet.control.nodelay.TransferRule`; this module carries the
program's effects out with the arrays, the State Server client and a
data-plane thread:

* ``x`` is the replica (the Trainer's parameters), ``x_init`` the last
  global model received or, after a transfer, ``x`` at that moment; the
  local update is ``w.x = x - x_init``;
* a transfer (``Handover``) copies ``w.x`` into a send buffer, sets ``x_init
  = x`` and hands the buffer to the data-plane thread (:class:`Courier`),
  which pushes it and pulls the merged model through ``dist_sync`` with the
  ESync averaging updater (``PS.x += mean(w.x)``), one round after the other
  (FIFO); an emulated link delay (``--net-delay-ms``) holds the push and the
  merged model back by that much each way, as in the simulator;
* a transfer asked for during the emulated slowdown is carried out at once
  (thread 2 does not wait for thread 1); a merged model is taken in
  (``x_init = PS.x``, ``x = x_init + w.x``) between two steps.

The step path waits only for this worker's own parameters and gradients
(:meth:`NoDelay.wait_compute`), never ``mx.nd.waitall()``: that would also
wait for the pull in flight.

Under ``mxhet-launch --elastic`` (a worker may leave or die, the others train
on) the servers run ``dist_async`` with :class:`kvstore_ext.updaters.MemberSum`
instead, and the count of a round's pushes lives in the State Server
(:class:`mxhet.control.nodelay.TransferRule`): the request names the round's
m members, each pushes ``w.x / m``, reports its push applied (``TransferPushed``) and
pulls once every member's is, or the member is gone (the Courier waits for
that answer between its push and its pull). A worker whose loop ends leaves
the rule at the finish barrier (the round rendezvous' ``RoundFinish``), a dead
one through the heartbeat watch: the same :meth:`TransferRule.leave`. Without
``--elastic`` nothing of this runs (the same ops, the same digests).
"""
import queue
import threading
import time

import mxnet as mx

from kvstore_ext import keys as ps_keys
from ..control import messages as m
from ..dataplane import copy_all, nbytes
from ..errors import ConfigError, MxhetError, StateServerTimeout
from ..gluon_private import trainer_params
from ..policy import specs
from ..policy.nodelay import NoDelayPolicy
from ..protocol import programs_groups
from ..protocol.effects import Handover, ListeningCompute, Merged, ModelArrived, Notify, Poll, TakeIn, TransferAsked
from .program import PreludeProgramMode
from .registry import register
from .killhook import kill_if_due
from .rounds import ROUND_WAIT_S, elastic_record, keep_kvstore_alive

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
        members: ``--elastic`` (``dist_async`` servers that add every push): each round's pushes are
            scaled by 1/m, m the members the request named, and between its push and its pull the
            thread waits for :meth:`release` (the State Server's answer that every member pushed);
            :meth:`take_pushed` names the rounds whose push is applied. ``test_kill``: the
            ``MXHET_TEST_KILL_AFTER_PUSH`` spec with this worker's rank, or "" (tests only).
    """

    def __init__(self, kv, keys, clock, delay=0.0, sleep=time.sleep, members=False, test_kill=("", 0)):
        if not delay >= 0:
            raise ValueError("delay must be >= 0 seconds, got %r" % (delay,))
        self.kv, self.keys, self.clock, self.delay, self.sleep = kv, list(keys), clock, float(delay), sleep
        self.members, self.test_kill = bool(members), test_kill
        self._pushed = queue.Queue()     # --elastic: rounds whose push is applied (the training thread reports them)
        self._released = queue.Queue()   # --elastic: rounds every member pushed (the pull may go)
        self.live = {}         # round -> how many workers still trained in it (NoDelay's class docstring)
        self._live_push, self._live_pull = mx.nd.zeros((1,)), mx.nd.zeros((1,))
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
            round_, sends, recvs, training = job
            t0 = self.clock()
            try:
                if self.delay:
                    self.sleep(self.delay)
                if self.members:
                    self._member_round(round_, sends, recvs, training)
                    if self.delay:
                        self.sleep(self.delay)
                    self._done.put((round_, self.clock() - t0, None))
                    continue
                # MXNet pulls a key into the very CPU array pushed (its comm buffer): set it each round.
                self._live_push[:] = 1.0 if training else 0.0
                self.kv.push(ps_keys.LIVE_KEY, self._live_push)
                self.kv.pull(ps_keys.LIVE_KEY, out=self._live_pull)
                live = int(round(float(self._live_pull.asscalar())))
                self.live[round_] = live
                if training and 0 < live != self.kv.num_workers:
                    for s in sends:   # the servers divide by N: the m still training push N/m times theirs
                        s *= self.kv.num_workers / live
                self.kv.push(self.keys, sends)
                self.kv.pull(self.keys, out=recvs)
                for r in recvs:
                    r.wait_to_read()
                if self.delay:
                    self.sleep(self.delay)
                self._done.put((round_, self.clock() - t0, None))
            except BaseException as exc:  # noqa: BLE001  (handed to the training thread)
                self._done.put((round_, 0.0, exc))

    def _member_round(self, round_, sends, recvs, members):
        """``--elastic``: push ``w.x / members``, wait until the servers applied it, say so, wait for
        :meth:`release`, pull."""
        for s in sends:
            s *= 1.0 / members
        self.kv.push(self.keys, sends)
        for s in sends:   # the push reads the very array (a CPU comm buffer): writable once it is applied
            mx.base.check_call(mx.base._LIB.MXNDArrayWaitToWrite(s.handle))
        kill_if_due(self.test_kill[0], self.test_kill[1], round_, sends)
        self._pushed.put(round_)
        released = self._released.get()
        if released is None:
            raise MxhetError("the worker closed while round %d waited for the others' pushes" % round_)
        if released != round_:
            raise MxhetError("round %d's pull was released while round %d waited" % (released, round_))
        self.kv.pull(self.keys, out=recvs)
        for r in recvs:
            r.wait_to_read()

    def submit(self, round_, sends, recvs, training=True):
        """Push ``sends`` and pull into ``recvs`` for ``round_`` (queued behind earlier rounds);
        ``training``: False for a worker that left its loop and pushes zeros. With ``members``
        (``--elastic``) it is the round's number of members instead."""
        self.busy = True
        self._jobs.put((round_, sends, recvs, training))

    def take_pushed(self):
        """``--elastic``: the rounds whose push the servers applied since the last call."""
        rounds = []
        while True:
            try:
                rounds.append(self._pushed.get_nowait())
            except queue.Empty:
                return rounds

    def release(self, round_):
        """``--elastic``: every member of ``round_`` pushed (or is gone): its pull may go."""
        self._released.put(round_)

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
        self._released.put(None)   # (a thread waiting for a release ends)
        self._thread.join(timeout)


@register
class NoDelay(PreludeProgramMode):
    """The cluster's interpreter of :func:`mxhet.protocol.programs_groups.nodelay`.

    A worker whose script ends its loop before the others (fewer steps, the end
    of its data) keeps serving its share of every transfer round -- at
    interpreter exit, or in :meth:`finish` -- as ``sync`` does and for the same
    reason (``dist_sync`` counts pushes per key, and its servers' averaging
    stays as it is): it announces each round with no gradient and hands over
    zeros until the master's stop round, or until every worker has left; its
    local work since its last transfer is dropped. So that the zeros do not
    dilute the average, the data-plane thread first exchanges how many workers
    still train (:data:`kvstore_ext.keys.LIVE_KEY`) and the m training ones push
    ``w.x`` times N/m. Nobody gone: factor 1, not applied (bit-identical).
    """
    spec = specs.NODELAY
    program = staticmethod(programs_groups.nodelay)
    votes = False
    departed = False     # this worker left its training loop before the job stopped

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        NoDelayPolicy(self.opts["staleness"])   # a bad tau fails here, before the job starts
        self.courier = None
        self.transfer_s = 0.0   # seconds the data-plane thread spent in push/pull (off the training thread)
        self._arrived = {}      # round -> seconds its push/pull took, until taken in
        self._announced = -1    # the last round this worker announced (Notify)
        self._handed = -1       # the last round it handed over
        self._asks = {}         # round -> stop, of every transfer the master asked for
        self._members = {}      # --elastic: round -> how many members the master asked it from
        self.round_members = []      # --elastic: the members of each round this worker took part in
        self.incomplete_rounds = []  # --elastic: rounds a member left before reporting its push
        self.summary_rank = 0        # who writes the job's summary (the finish barrier names a survivor)
        if config.elastic:
            self.kvstore_type = "dist_async"   # the module docstring: the State Server counts the pushes

    @property
    def elastic(self):
        return self.config.elastic

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=1.0)

    def server_updater(self, batch_size):
        if self.elastic:
            from kvstore_ext.updaters import MemberSum
            return MemberSum(self.channel.num_workers)
        return super().server_updater(batch_size)

    def on_connect(self):
        if self.elastic:
            keep_kvstore_alive(self.channel.kv)
        self.client = self.join_state_server()
        if self.elastic:
            from .rounds import take_registered_round
            take_registered_round(self)

    def on_setup(self, batch_size):
        def like():
            return [mx.nd.zeros(g.shape, ctx=g.context, dtype=g.dtype) for g in self.wbufs]
        self._xinit, self._send, self._recv, self._tmp = like(), like(), like(), like()
        self.channel.init([ps_keys.LIVE_KEY], [mx.nd.zeros((1,))])
        self.courier = Courier(self.kv, self.keys, self.clock, delay=self.config.net_delay_ms / 1000.0,
                               members=self.elastic, test_kill=(self.config.test_kill_after_push, self.stats.rank))
        super().on_setup(batch_size)

    def wait_compute(self):
        # Only this worker's own arrays: the pull in flight must not be waited for.
        for p in trainer_params(self.trainer):
            for a in p.list_data():
                a.wait_to_read()
            if p.grad_req != "null":
                for g in p.list_grad():
                    g.wait_to_read()

    def emulate_slowdown(self, seconds):
        # The rest of a slow device's computation (the pending ListeningCompute): a
        # transfer asked for meanwhile goes to the program at once (thread 2 does not
        # wait for thread 1), which carries it out and goes on with the iteration.
        deadline = self.clock() + seconds
        while True:
            left = deadline - self.clock()
            if left <= 0:
                return
            if self.elastic:   # the others' pull waits for this worker's report of its push: look often
                self._report_pushed()
                left = min(left, WAIT_SLICE_S)
            asked = self._asked(self.client.poll(timeout=left))
            if asked:
                effect = self.session.run_until_compute(self.carry_out, asked)
                if not isinstance(effect, ListeningCompute):
                    raise MxhetError("the nodelay program left an iteration unfinished for %r" % (effect,))

    def _asked(self, replies):
        self.stats.state_queries = self.client.queries
        self.stats.state_replies = self.client.replies
        self.stats.rtt_s = self.client.rtt
        # ready: the master's request for a transfer (the answer to a Notify); Merged's answers carry nothing
        asked = tuple(TransferAsked(r.round, r.stop) for r in replies if isinstance(r, m.TransferReply) and r.ready)
        for r in replies:
            if isinstance(r, m.TransferReply) and r.ready:
                self._members[r.round] = r.members
            elif isinstance(r, m.TransferPushedReply):   # --elastic: every member pushed or is gone: pull
                if not r.complete:
                    self.incomplete_rounds.append(r.round)
                self.courier.release(r.round)
        for a in asked:
            self._asks[a.round] = a.stop
        return asked

    def _report_pushed(self):
        """``--elastic``: tell the State Server of each round whose push the servers applied."""
        for round_ in self.courier.take_pushed():
            self.client.send(m.TransferPushed, round=round_)

    def carry_out(self, effect):
        if isinstance(effect, Poll):
            return self._poll(effect.block)
        if isinstance(effect, Notify):
            self._announced = effect.round
            self.client.send(m.Notify, round=effect.round, pending=effect.pending, want_stop=effect.want_stop)
            self.client.queries += 1
            return None
        if isinstance(effect, Merged):
            self.client.send(m.Merged, round=effect.round)
            return None
        if isinstance(effect, Handover):
            self._transfer(effect.round)
            return None
        if isinstance(effect, TakeIn):
            if effect.round < 0:
                copy_all(self.wbufs, self._xinit)
                mx.nd.waitall()
            else:
                self._arrive(effect.round)
            return None
        return super().carry_out(effect)

    def _poll(self, block):
        """The merged model that has arrived, then the master's requests; with
        ``block``, wait (slices of :data:`WAIT_SLICE_S` on the one source that
        can answer next) until there is one.

        Raises:
            StateServerTimeout: nothing arrived for the State Server client's timeout.
        """
        last_progress = self.clock()
        while True:
            if self.elastic:
                self._report_pushed()
            busy = self.courier.busy
            waited = block and busy
            got = self.courier.take(WAIT_SLICE_S if waited else 0.0) if busy else None
            asked = self._asked(self.client.poll(timeout=WAIT_SLICE_S if block and not waited else 0.0))
            events = asked
            if got is not None:
                self._arrived[got[0]] = got[1]
                events = (ModelArrived(got[0]),) + asked
            if events or not block:
                return events
            # (--elastic: a merge waits for a dead member until the heartbeat watch finds it)
            limit = ROUND_WAIT_S if self.elastic else self.client.timeout
            if self.clock() - last_progress > limit:
                raise StateServerTimeout("nodelay worker rank %d waited %.0f s for a transfer request or a "
                                         "merged model" % (self.stats.rank, limit))

    def _transfer(self, round_):
        """Lines 22-23: hand ``w.x`` over, ``x_init = x``."""
        weights = self.weights()
        for x, xi, s in zip(weights, self._xinit, self._send):
            mx.nd.elemwise_sub(x, xi, out=s)
        if self.check_finite(self._send, "model update w.x", round_):
            copy_all(weights, self._xinit)
        else:  # skipped (zeros pushed): the local work since the last transfer is dropped
            copy_all(self._xinit, weights)
        self._handed = round_
        if self.elastic:
            members = self._members.pop(round_)
            self.round_members.append(members)
            self.courier.submit(round_, self._send, self._recv, training=members)
        else:
            self.courier.submit(round_, self._send, self._recv)

    def _arrive(self, round_):
        """Lines 8-11: ``x_init = PS.x``, ``x = x_init + w.x``."""
        # tests only: dies between two transfers, none in flight
        kill_if_due(self.config.test_kill_computing, self.stats.rank, round_ + 1)
        weights = self.weights()
        for x, xi, t in zip(weights, self._xinit, self._tmp):
            mx.nd.elemwise_sub(x, xi, out=t)          # w.x: the steps since the transfer
        copy_all(self._recv, self._xinit)
        copy_all(self._recv, self.wbufs)               # the global model as last received
        for xi, t in zip(self._xinit, self._tmp):
            t += xi
        copy_all(self._tmp, weights)
        self.transfer_s += self._arrived.pop(round_)
        counts = getattr(self.courier, "live", None)   # (a test's fake courier keeps none)
        self._last_live = counts.pop(round_, None) if counts is not None else None   # how many trained in it
        self.stats.bytes_pushed += nbytes(self._send)
        self.stats.bytes_pulled += nbytes(self._recv)
        self.aggregated = True

    # -- the end -----------------------------------------------------------------------
    def _serve_departed(self):
        """Announce every round with no gradient and hand over zeros until the
        master's stop round is merged or every worker has left (the class docstring).

        Raises:
            StateServerTimeout: nothing arrived for the State Server client's timeout.
        """
        self.departed = True
        copy_all(self._xinit, self.weights())   # the local work since the last transfer is dropped
        last_progress = self.clock()
        while True:
            if self.courier.busy:
                got = self.courier.take(WAIT_SLICE_S)
                if got is not None:
                    round_, seconds = got
                    self._arrived[round_] = seconds
                    self._arrive(round_)
                    self.client.send(m.Merged, round=round_)
                    if self._last_live == 0 or self._asks.get(round_):
                        break   # every worker has left, or the job's last round is merged
                    last_progress = self.clock()
                self._asked(self.client.poll(timeout=0.0))
                continue
            nxt = self._handed + 1
            if nxt in self._asks:
                for s in self._send:
                    s[:] = 0
                self._handed = nxt
                self.courier.submit(nxt, self._send, self._recv, training=False)
                continue
            if self._announced < nxt:
                self._announced = nxt
                # pending is informative only (the master ignores it) and must be >= 1
                self.client.send(m.Notify, round=nxt, pending=1, want_stop=False)
            if self._asked(self.client.poll(timeout=WAIT_SLICE_S)):
                last_progress = self.clock()
            elif self.clock() - last_progress > self.client.timeout:
                raise StateServerTimeout("nodelay worker rank %d (left its loop) waited %.0f s for a transfer "
                                         "request" % (self.stats.rank, self.client.timeout))
        self.stopped = True

    def _leave_elastic(self):
        """``--elastic``: a worker whose script ended its loop finishes its part of the rounds it is a
        member of, or announced -- it hands ``w.x`` over for a transfer asked of it and not yet carried
        out, and its pushes in flight are applied whole and counted once --, drops the rest of its local work and
        leaves the rule at the finish barrier (:meth:`barrier`), as a dead worker leaves it through the
        heartbeat watch.

        Raises:
            StateServerTimeout: the rounds in flight did not end within :data:`ROUND_WAIT_S`.
        """
        self.departed = True
        deadline = self.clock() + ROUND_WAIT_S
        while True:
            if self._handed + 1 in self._members:   # asked of it: a member of that round
                self._transfer(self._handed + 1)
                continue
            if not self.courier.busy and self._announced <= self._handed:
                break   # (an announcement outstanding is answered with a request once the others announce)
            self._report_pushed()
            got = self.courier.take(WAIT_SLICE_S) if self.courier.busy else None
            self._asked(self.client.poll(timeout=0.0 if self.courier.busy else WAIT_SLICE_S))
            if got is not None:
                self.client.send(m.Merged, round=got[0])
            elif self.clock() > deadline:
                raise StateServerTimeout("nodelay worker rank %d (left its loop) waited %.0f s for its last "
                                         "round" % (self.stats.rank, ROUND_WAIT_S))
        copy_all(self._xinit, self.weights())   # (the final model replaces it at the finish barrier)
        self.stopped = True

    def barrier(self):
        """``--elastic``: the State Server's finish barrier (PS-LITE's would wait for the dead), which also
        takes this worker out of the transfer rule; :attr:`summary_rank` becomes the rank it names for the
        chief's end-of-job duties."""
        if self.elastic and self.client is not None:
            self.summary_rank = self.client.round_finish(timeout=ROUND_WAIT_S)
        else:
            super().barrier()

    def summary_fields(self):
        fields = dict(super().summary_fields())
        if self.elastic:
            fields["round_members"] = list(self.round_members)
            fields["incomplete_rounds"] = list(self.incomplete_rounds)
            fields["elastic"] = elastic_record(self)
        return fields

    def leave_at_exit(self):
        """A worker whose script ended its loop serves the others' rounds, takes the final model and closes."""
        return self.finish_and_close()

    def finish(self):
        if self._ready and self.kv is not None and not self.stopped and self.courier is not None:
            if self.elastic:
                self._leave_elastic()
            else:
                self._serve_departed()
        if self.courier is not None:
            if self.courier.busy:
                raise MxhetError("finish() with a round in flight")
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
