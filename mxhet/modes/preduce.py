"""Partial Reduce (``preduce``): the P-Reduce paper's Algorithm 2 on PS-LITE.

The worker protocol is :func:`mxhet.protocol.programs_groups.preduce`; this
module carries its effects out (the State Server's controller, the slot
keys) and adds the job's final average. Every worker takes one local SGD step on its own model, then sends READY (with
its iteration number k) to the controller in the State Server
(:mod:`mxhet.control.preduce`) and waits to be put in a group of P. The
answer names the group, its *slot* (a set of keys on the servers), this
member's weight β and the iteration number to continue with. Then:

1. push β·x to the slot's keys (``dist_async``: only the members push; the
   servers' :class:`kvstore_ext.updaters.PartialReduceSum` overwrites on the
   round's first push and adds the others);
2. tell the State Server and wait until every member has pushed (a server
   answers a pull at once, with whatever the slot holds: the barrier must be
   in the control plane);
3. pull the slot: the model becomes Σ β_j·x_j, the same on every member.

PS-LITE has no collective over a subset of workers, so this is a *star*
through the servers (each member sends its model up and the sum down), not
the paper's ring all-reduce among the members. The controller never sees
model data. After the last step every worker pushes x_i/N to the parameter
keys and pulls their sum: the job's output is the average of all N models.

A wish to stop (time budget, rounds, a signal) travels with READY; the State
Server then answers every READY with stop, groups already formed finish their
reduce, and every worker meets the others at the final average.

What is evaluated: rank 0's own model during training (the snapshots), the
average of all N models at the end, as in the simulator (docs/modes.md).

Under ``mxhet-launch --elastic`` a worker may die: the State Server's
heartbeat watch finds it silent and the controller releases the group that
waited for its push (:mod:`mxhet.control.preduce`): the other members are
told so by their PUSHED's answer, pull nothing and keep their models. The
servers hold N spare slots (a released group's slot is never reused). The
job's end runs on the State Server's round rendezvous (PS-LITE's barrier
counts the dead): each worker pushes x_i/N, says so (``ReduceLeave``), meets
the others at the finish barrier and pulls the sum, which it scales by N/m,
m the workers whose final model is in -- the average of the m models that
reached the end (a dead worker's model is lost). A worker started again
(``--max-restarts 1``) takes the model of the latest complete group from its
slot, whatever its rank's iteration number, and is grouped again.
"""
import dataclasses

import mxnet as mx

from kvstore_ext import keys as ps_keys
from ..control.preduce import check_options, default_slots
from ..dataplane import copy_all, nbytes
from ..errors import ConfigError
from ..policy import specs
from ..protocol import programs_groups
from ..protocol.effects import Grouped, JoinReduce, Ready, Reduce
from .model import model_digest
from .program import PreludeProgramMode
from .registry import register
from .killhook import kill_if_due
from .rounds import ElasticEnd, keep_kvstore_alive, leave_too_late

WEIGHTINGS = specs.WEIGHTINGS


@register
class PartialReduce(ElasticEnd, PreludeProgramMode):
    """The cluster's interpreter of :func:`mxhet.protocol.programs_groups.preduce`."""
    spec = specs.PREDUCE
    program = staticmethod(programs_groups.preduce)
    votes = False

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        check_options(self.opts)
        self.groups = []         # (group id, slot, weight) of every reduce, for the record
        self.released_groups = []  # ids of this worker's groups released by a member's death
        self._send = self._recv = None

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import PartialReduceSum
        return PartialReduceSum(num_workers, opts["group_size"])

    def spare_slots(self):
        """Slots beyond N-P+1: under ``--elastic`` one per death the job may see (N, plus one per spare
        worker under ``--max-restarts`` above 1: each restart brings a worker that may die), since a
        group released by a death retires its slot."""
        return self.channel.num_workers + self.config.spare_workers if self.config.elastic else 0

    def on_connect(self):
        check_options(self.opts, self.channel.num_workers)
        if self.config.elastic:
            keep_kvstore_alive(self.channel.kv)
        self.client = self.join_state_server()
        if getattr(self.client, "job_over", False):
            leave_too_late(self)

    def on_setup(self, batch_size):
        weights = self.weights()
        n = self.channel.num_workers
        try:
            self.slot_keys = [ps_keys.preduce_keys(s, len(weights))
                              for s in range(default_slots(n, self.opts["group_size"]) + self.spare_slots())]
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._send = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in weights]
        self._recv = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in weights]
        # every worker takes part (rank 0 pushes the zeros, then a barrier)
        self.channel.init([k for keys in self.slot_keys for k in keys], self._send * len(self.slot_keys))
        super().on_setup(batch_size)

    def carry_out(self, effect):
        if isinstance(effect, JoinReduce):
            reply = self.client.reduce_join(**dataclasses.asdict(effect), spare_slots=self.spare_slots())
            if reply is not None and reply.model_slot >= 0:
                # Started again after a death: the latest complete group's model, held for this rank.
                keys = self.slot_keys[reply.model_slot]
                self.kv.pull(keys, out=self._recv)
                mx.nd.waitall()
                copy_all(self._recv, self.weights())
                mx.nd.waitall()
                self.stats.bytes_pulled += nbytes(self._recv)
                self.stats.rejoined_at_round = reply.k
                return reply.k
            return None
        if isinstance(effect, Ready):
            # tests only: dies in no group, before this READY
            if self.config.test_kill_computing:   # tests only (parity stand-ins have no rank)
                kill_if_due(self.config.test_kill_computing, self.channel.rank, self.stats.rounds)
            t0 = self.clock()
            reply = self.client.reduce_ready(effect.k, want_stop=effect.want_stop)
            self.stats.query_s += self.clock() - t0
            if reply.stop:
                return Grouped(stop=True)
            return Grouped(stop=False, group=reply.round, slot=reply.group_slot, weight=reply.weight, k=reply.k,
                           fill=reply.target)
        if isinstance(effect, Reduce):
            released = self.reduce(effect.group, effect.slot, effect.weight, effect.fill)
            self.aggregated = not released
            return released
        return super().carry_out(effect)

    def reduce(self, group, slot, weight, fill=0):
        """Replace the model by the group's Σ β_j·x_j through slot ``slot``;
        ``fill`` zero pushes complete a group smaller than P. Returns True when
        the group was released (a member died before its push was in): the
        model is left as it was."""
        keys = self.slot_keys[slot]
        weights = self.weights()
        for w, b in zip(weights, self._send):
            b[:] = w * weight
        self.check_finite(self._send, "weighted model", self.stats.rounds)
        t0 = self.clock()
        self.kv.push(keys, self._send)
        if fill:
            zeros = [mx.nd.zeros(b.shape, ctx=b.context, dtype=b.dtype) for b in self._send]
            for _ in range(fill):
                self.kv.push(keys, zeros)
            self.stats.bytes_pushed += fill * nbytes(zeros)
        mx.nd.waitall()   # a push completes once the server applied it
        # tests only: dies between its push to the group's slot and its PUSHED
        if self.config.test_kill_after_push:   # tests only (parity stand-ins have no rank)
            kill_if_due(self.config.test_kill_after_push, self.channel.rank, self.stats.rounds, self._send)
        t1 = self.clock()
        released = self.client.reduce_pushed(group)
        t2 = self.clock()
        if released:
            self.stats.query_s += t2 - t1
            self.stats.sync_s += t1 - t0
            self.stats.bytes_pushed += nbytes(self._send)
            self.released_groups.append(group)
            return True
        self.kv.pull(keys, out=self._recv)
        mx.nd.waitall()
        copy_all(self._recv, weights)
        mx.nd.waitall()
        t3 = self.clock()
        self.stats.sync_s += (t1 - t0) + (t3 - t2)
        self.stats.query_s += t2 - t1
        self.stats.bytes_pushed += nbytes(self._send)
        self.stats.bytes_pulled += nbytes(self._recv)
        self.groups.append((group, slot, weight))
        return False

    def leave_at_exit(self):
        """Under ``--elastic``: finish (the final push, then the State Server's finish barrier)
        and close -- the controller hears of it from :meth:`finish`'s ``ReduceLeave``.

        Otherwise a worker whose loop ended before the others' leaves alone
        (:meth:`SyncMode.leave_alone`): its goodbye takes it out of the
        controller's queue and groups to come (no group waits for it; once
        fewer than P are live, the groups are of all the workers left), and
        its model, that of its last group, still counts in the final average
        of all N."""
        return self.finish_and_close() if self._elastic() else self.leave_alone()

    def finish(self):
        """The job's output, Algorithm 2's last line: every worker pushes x_i/N to
        the parameter keys, and after a barrier pulls their sum, the average of
        all N models (then records its digest, as every mode does)."""
        if self.kv is not None and self._send is not None:
            n = self.channel.num_workers
            keys = self.global_keys()
            weights = self.weights()
            sends = [self._send[i] for i in keys]
            for i, b in zip(keys, sends):
                b[:] = weights[i] * (1.0 / n)
            self.kv.push(keys, sends)
            mx.nd.waitall()
            self.stats.bytes_pushed += nbytes(sends)
            if self._elastic():
                self.client.reduce_leave(final=True)
                self._finish_elastic(keys)
                return
        super().finish()

    # -- mxhet-launch --elastic: the end runs on the State Server's round rendezvous (ElasticEnd), and
    # the average is over the models that reached it.
    def _finish_elastic(self, keys):
        """:meth:`SyncMode.finish` with the sum of the m final models scaled by N/m (m < N only
        after a death: the non-elastic arithmetic is untouched otherwise)."""
        arrays = self.stopping.final_model(self.channel, self.barrier, keys, self.wbufs, self.weights)
        finals = self.client.reduce_leave(final=False)
        n = self.channel.num_workers
        if 0 < finals < n:
            weights = self.weights()
            for i, a in zip(keys, arrays):
                a *= n / finals
                weights[i][:] = a
            mx.nd.waitall()
        self.final_models = finals
        self.broadcast_weights()
        self.stats.final_model_sha256 = model_digest(arrays)
        self.stats.final_model_keys = len(keys)
        self.aggregated = True
        self._finished = True

    def summary_fields(self):
        fields = dict(super().summary_fields())
        if self._elastic():
            fields["final_models"] = getattr(self, "final_models", None)
        return fields
