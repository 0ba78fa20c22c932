"""Synchronous rounds whose members the State Server names: the data plane
that lets a worker leave its training loop, or die, while the others train on.

``dist_sync`` counts pushes per key: a round completes after exactly N
pushes, so once one worker is gone every later round blocks. Here the
servers run ``dist_async`` with :class:`kvstore_ext.updaters.MemberSum`
(every push is added on arrival) and the count lives in the State Server's
round rendezvous (:mod:`mxhet.control.membership`):

1. ``round_enter(r, ballot)`` -> ``(m, ballots)``: waits until every worker
   still training has entered round r; m is the number of members, ballots
   the members that want to stop (the program's :class:`~mxhet.protocol.Exchange`
   result, as the stop-vote key gave it under ``dist_sync``);
2. push ε·Δ/m (Δ = replica − global model) and wait until it is applied;
3. ``round_done(r)``: waits until every member's push is applied, or the
   member is gone (then the round holds what arrived of it);
4. pull the global model; the replica becomes it.

A worker leaves the rounds with :meth:`RoundMembers.finish` -- after the
job's stop, or at interpreter exit when its script stopped calling
``step()`` (``mxhet.Trainer`` runs it then): its local work since its last
round is dropped, it waits until no worker trains any more, and pulls the
final global model, so its digest is the job's final model like everyone
else's. A dead worker leaves through the State Server's heartbeat watch
(``mxhet-launch --elastic``).
"""
import json
import logging
import os
import sys
import time

import mxnet as mx

from ..control.membership import job_events
from ..dataplane import copy_all
from ..errors import ConfigError, ProtocolError, StateServerTimeout
from ..protocol.effects import JOB_OVER
from .killhook import kill_if_due
from .liveness import PROGRESS_LATE, note_progress

LOG = logging.getLogger("mxhet.modes")

ROUND_WAIT_S = 3600.0
"""Seconds a worker waits at a round rendezvous (for the slowest peer's
local steps, or for the whole job at the end) before giving up. The launcher's
``--timeout`` and the State Server's heartbeat watch end a stuck job first."""

_KEPT_ALIVE = []


def elastic_record(mode):
    """Each leave and join of ``mode``'s job (seconds since this worker's training started, round, cause)
    and the rounds each slot took part in (:func:`mxhet.control.membership.job_events`); None, with a
    warning, when the State Server cannot send its record: the summary is still written."""
    try:
        record = mode.client.membership_record()
    except (ProtocolError, StateServerTimeout) as exc:
        LOG.warning("the membership record could not be fetched: %s", exc)
        return None
    exits, takeovers = [], []
    if mode.config.exits_file:   # the launcher's sight of the processes that ended (local workers)
        try:
            with open(mode.config.exits_file) as f:
                exits = json.load(f)
        except (OSError, ValueError):
            exits = []
    if mode.config.takeovers_file:   # --max-restarts above 1: which spare took over which slot
        try:
            with open(mode.config.takeovers_file) as f:
                takeovers = json.load(f)
        except (OSError, ValueError):
            takeovers = []
    started = mode.timer.t_start if mode.timer.t_start is not None else mode.clock()
    return job_events(record, exits, origin=time.time() - (mode.clock() - started), takeovers=takeovers)


def take_registered_round(mode):
    """After registering: a worker started after the job's end leaves (:func:`leave_too_late`); one
    started again after a death (``mxhet-launch --max-restarts``) counts the job's rounds from the
    round the State Server named (the next round boundary; nodelay: the next transfer round). The model
    it starts from is the global one ``share_model`` pulls next: PS-LITE's recovery gave it the dead
    worker's rank, whose ``kv.init`` pushes nothing."""
    if getattr(mode.client, "job_over", False):
        leave_too_late(mode)
    first = getattr(mode.client, "registered_round", 0)
    if first > mode.stats.rounds:
        mode.stats.rounds = first
        mode.stats.rejoined_at_round = first


class ElasticEnd:
    """The end of a mode with no member rounds (``async``, ``preduce``, ``gcada``) under
    ``mxhet-launch --elastic``: PS-LITE's barrier counts the dead, so the end waits on the State
    Server's finish barrier instead (:mod:`mxhet.control.membership`: answered once no live worker
    trains), which names the rank that writes the summary; the summary gets the ``elastic`` record.
    Mixed in before the mode's base class."""
    summary_rank = 0   # who writes the job's summary (the rendezvous names a survivor under --elastic)

    def _elastic(self):
        return bool(self.config.elastic) and self.client is not None

    def barrier(self):
        if self._elastic():
            self.summary_rank = self.client.round_finish(timeout=ROUND_WAIT_S)
        else:
            super().barrier()

    def summary_fields(self):
        fields = dict(super().summary_fields())
        if self._elastic():
            fields["elastic"] = elastic_record(self)
        return fields


def leave_too_late(mode):
    """A worker started again (``mxhet-launch --max-restarts``) that registered after the job's end
    (nobody trains any more, or the job agreed to stop: no round is left for it) leaves at once with
    exit 0: it says goodbye, tells the launcher through its progress note (the job file's
    ``worker_restarts`` then says ``too_late``) and ends the process without training -- waiting
    for rounds nobody else enters would hang it until the launcher's orphan watch failed the job."""
    LOG.warning("rank %d (slot %d) was started again after the job's end: nothing is left to take part in; "
                "it leaves (exit 0)", mode.channel.rank, mode.config.slot)
    note_progress(mode.config.progress_file, PROGRESS_LATE)
    mode.leave_state_server()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # the dist kvstore's destructor would wait in PS-LITE's barrier (keep_kvstore_alive)


def refused_round(mode, round_index):
    """``mode``'s entry of ``round_index`` was answered ``over``: the round comes after the job's agreed
    stop (this worker was started again while the others' last round was open). It pushes nothing; its
    program stops, and the finish barrier gives it the final model (then exit 0, as any worker under
    ``--elastic``). The launcher's job file says ``too_late``, as for a worker back after the end."""
    LOG.warning("rank %d (slot %d) was started again while the job's last round was open: round %d comes "
                "after the agreed stop, it takes part in nothing more and takes the final model",
                mode.channel.rank, mode.config.slot, round_index)
    mode.late_restart = True
    note_progress(mode.config.progress_file, PROGRESS_LATE)
    return JOB_OVER


def keep_kvstore_alive(kv):
    """Never free ``kv`` before the process ends (``mxhet.Trainer`` ends it with ``os._exit`` under
    ``--elastic``): the dist kvstore's destructor waits in PS-LITE's barrier for every worker, a dead
    one included."""
    _KEPT_ALIVE.append(kv)


class RoundMembers:
    """Mixin for a :class:`~mxhet.modes.base.SyncMode` whose deltas are averaged
    over the members of each round (see the module docstring). The class using
    it runs on ``dist_async`` with :class:`kvstore_ext.updaters.MemberSum`."""
    epsilon = 1.0        # the global learning rate ε of the average
    member_rounds = True  # the simulator runs its Exchange the same way (mxhet.sim.program)
    departed = False     # this worker left its training loop before the job stopped
    late_restart = False  # started again while the last round was open: answered over (refused_round)
    summary_rank = 0     # who writes the job's summary, as the last barrier named it (rank 0 unless it died)

    def on_connect(self):
        if not self.config.state_server:
            raise ConfigError("mode %r needs the State Server (start the job with mxhet-launch)" % self.name)
        if self.config.elastic:
            keep_kvstore_alive(self.channel.kv)
        self.client = self.join_state_server()
        take_registered_round(self)

    def server_updater(self, batch_size):
        """The cluster's servers add every push (the worker scales it by ε/m)."""
        from kvstore_ext.updaters import MemberSum
        return MemberSum(self.channel.num_workers)

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        """What the simulator's servers apply to a round's summed deltas, ε·sum/N
        (its round of m named members scales the pushes by N/m, :mod:`mxhet.sim.program`)."""
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=cls.epsilon)

    def exchange_deltas(self, round_index, extra_keys=(), extra_values=(), extra_outs=()):
        """One round (see the module docstring). ``extra_values[0]`` is the stop
        ballot; ``extra_outs[0]`` receives the members' combined ballot. Other
        control keys are not supported. Returns :data:`~mxhet.protocol.effects.JOB_OVER`,
        having pushed nothing, when the round comes after the job's agreed stop."""
        if len(extra_keys) > 1:
            raise ValueError("a membership round carries only the stop ballot, got %d control keys"
                             % len(extra_keys))
        if self.config.test_kill_computing:   # tests only (parity stand-ins have no rank)
            kill_if_due(self.config.test_kill_computing, self.channel.rank, round_index)
        ballot = float(extra_values[0].asscalar()) > 0 if extra_values else False
        t0 = self.clock()
        members, ballots = self.client.round_enter(round_index, ballot, timeout=ROUND_WAIT_S)
        t1 = self.clock()
        if self.client.job_over:
            self.stats.query_s += t1 - t0
            return refused_round(self, round_index)
        weights = self.weights()
        if getattr(self, "_sends", None) is None:
            self._sends = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in self.wbufs]
        for w, g, d in zip(weights, self.wbufs, self._sends):
            mx.nd.elemwise_sub(w, g, out=d)
        self.check_finite(self._sends, "model delta", round_index)
        hook = self.round_hook
        if hook:   # the script's dump (python -m mxhet.train --dump-rounds): the deltas before their 1/m
            before = [g.asnumpy() for g in self.wbufs]
            deltas = [d.asnumpy() for d in self._sends]
        scale = self.epsilon / members
        for d in self._sends:
            d *= scale
        self._push_done_pull(round_index, members, weights, t0, t1)
        if hook:
            hook(round_index, before, deltas, [g.asnumpy() for g in self.wbufs])
        if extra_outs:
            extra_outs[0][:] = float(ballots)

    @property
    def round_members(self):
        if "_round_members" not in self.__dict__:
            self._round_members = []
        return self._round_members

    @property
    def incomplete_rounds(self):
        if "_incomplete" not in self.__dict__:
            self._incomplete = []
        return self._incomplete

    def finish(self):
        """Leave the rounds and take the job's final model: wait until no worker
        trains any more (every push is then applied), pull the global model into
        the replica and record its digest. A worker whose script left the
        training loop drops its local work since its last round."""
        if self.kv is not None and self.client is not None and not self.stopped:
            self.departed = True
            self.stopped = True
        super().finish()   # its barrier is the State Server's rendezvous (:meth:`barrier`)

    def leave_at_exit(self):
        """Finish (the departure, if the script left the loop) and close, unless done already."""
        if self._ready and self.kv is not None and not self._finished:
            self.finish()
        if self.client is not None:
            self.close()
        return True

    def barrier(self):
        """Wait for every worker still in the job (the State Server's rendezvous:
        PS-LITE's barrier would wait for a dead worker for ever); :attr:`summary_rank`
        becomes the rank the State Server names for the chief's end-of-job duties."""
        if self.client is not None:
            self.summary_rank = self.client.round_finish(timeout=ROUND_WAIT_S)
        else:
            super().barrier()

    def summary_fields(self):
        fields = dict(super().summary_fields())
        fields["round_members"] = list(self.round_members)
        fields["incomplete_rounds"] = list(self.incomplete_rounds)
        fields["elastic"] = self.elastic_record()
        return fields

    def elastic_record(self):
        return elastic_record(self)

    def _push_done_pull(self, round_index, members, weights, t0, t1):
        """The end of a member round, after entering it at ``t0`` (answered at ``t1``): push the
        scaled deltas in ``_sends``, say done, pull the model once every member is done or gone,
        and account for the times; returns ``(t2, t4)``, the push's end and the pull's."""
        self.channel.push(self.keys, self._sends)
        if self.config.test_kill_after_push:   # tests only (parity stand-ins have no rank)
            kill_if_due(self.config.test_kill_after_push, self.channel.rank, round_index, self._sends)
        t2 = self.clock()
        complete = self.client.round_done(round_index, timeout=ROUND_WAIT_S)
        t3 = self.clock()
        self.channel.pull(self.keys, self.wbufs)
        copy_all(self.wbufs, weights)
        mx.nd.waitall()
        t4 = self.clock()
        self.stats.query_s += (t1 - t0) + (t3 - t2)
        self.stats.sync_s += (t2 - t1) + (t4 - t3)
        self.round_members.append(members)
        if not complete:
            self.incomplete_rounds.append(round_index)
        return t2, t4
