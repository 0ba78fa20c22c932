"""G-CADA (``gcada``) and CADA (``cada``) on the real parameter server.

The decisions are the State Server's (:mod:`mxhet.control.gcada`): which
groups compute in iteration k, which member uploads, when the servers step.
The servers (``dist_async``: only a subset pushes each iteration) keep every
group's last gradient in a reserved key range and apply AMSGrad over the
fresh and stale ones (:class:`kvstore_ext.gcada.GroupAMSGrad`). A worker:

1. asks to take part in the next iteration (``GroupBegin``; answered once its
   groups are selected): if its group is selected it pulls θ^k (a download,
   eq. 5), sends a ``GroupWatch`` without waiting and computes one mini-batch
   gradient (the training loop's forward and backward); if not, it asks for
   the next iteration -- it computes nothing meanwhile;
2. during its emulated computing time (``--base-iter``, optionally
   exponential) it polls the watch: when a teammate claimed the group's
   upload first, it drops its work at once (the iteration is abandoned; a
   straggler never holds its group);
3. else claims the upload (``GroupDone``); the first finisher pushes its
   gradient to its group's keys and reports it (``GroupUploaded``); the last
   upload of the iteration triggers the servers' step: a push to the
   parameter keys (its value is not used), a pull of θ^{k+1}, a push and pull
   of the norm keys, whose sums go back to the State Server (``GroupStepped``),
   which selects the next iteration's groups.

The protocol is :func:`mxhet.protocol.programs_gcada.gcada`, run here by
:class:`~mxhet.modes.program.PreludeProgramMode` (its first request comes
before the first iteration) and in the simulator by
:func:`mxhet.sim.program.run_program`.

Under ``mxhet-launch --elastic`` a worker may die: the State Server hands
its open claim to a teammate, or the step it was to trigger to a live worker
(:meth:`mxhet.control.gcada.GroupCoordinator.depart`); the trigger then pushes
k+1 and the servers step each parameter once per iteration; the end runs on
the State Server's finish barrier, not PS-LITE's (which counts the dead).
A worker started again (``--max-restarts 1``) takes the dead one's PS-LITE
rank (its ``kv.init`` pushes nothing), ships no updater -- the servers'
AMSGrad state and every group's last gradient stay --, and is taken back into
its group from the iteration after its first request
(:meth:`mxhet.control.gcada.GroupCoordinator.rejoin`); it downloads θ^k like
any selected member, so it needs no model of its own.

CADA is the same with groups of one (the servers then wait for every selected
worker); with ``max_delay=1`` every worker is selected every iteration:
distributed AMSGrad. The trainer's own optimizer is not used (AMSGrad runs on
the servers with ``step_size``, ``beta1``, ``beta2``); BatchNorm statistics
stay local, as in the other gradient modes.
"""
import math
import os
import signal
import warnings

import mxnet as mx
from mxnet import gluon

from kvstore_ext import keys as ps_keys
from ..control import messages as m
from ..control.gcada import check_groups, group_of
from ..dataplane import copy_all
from ..errors import ConfigError
from ..gluon_private import mark_grad_used, trainer_optimizer, trainer_params
from ..policy import specs
from ..protocol import programs_gcada
from ..protocol.effects import BeginIteration, ClaimUpload, Download, Selection, StepServers, Upload
from .program import PreludeProgramMode
from .rounds import ElasticEnd, keep_kvstore_alive, leave_too_late
from .registry import register

WATCH_POLL_S = 0.005
"""Seconds between two looks at the group's watch while the emulated computing time runs."""
_BIGARRAY_BOUND = 1_000_000  # MXNet's default MXNET_KVSTORE_BIGARRAY_BOUND (elements)


def check_rule_options(opts):
    """Raises ConfigError naming a bad G-CADA (or CADA: no ``groups``) option, by the spec's checks."""
    (specs.GCADA if "groups" in opts else specs.CADA).check(opts)


@register
class GCADA(ElasticEnd, PreludeProgramMode):
    """G-CADA on the real cluster: the worker program, the State Server's rule, the group keys."""
    spec = specs.GCADA
    program = staticmethod(programs_gcada.gcada)
    votes = False   # the State Server answers stop to all

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        check_rule_options(self.opts)
        if isinstance(trainer, gluon.Trainer) and config.slot == 0:   # (not a test's fake); one warning a job
            self.warn_optimizer_unused(trainer_optimizer(trainer), self.name, self.opts["step_size"])
        try:
            self.groups = self.groups_for(config.num_slots, self.opts)
            check_groups(config.num_slots, self.groups)
            self.group = group_of(config.slot, config.num_slots, self.groups)
            ps_keys.group_key_layout(self.groups, max(1, config.num_servers))
        except ValueError as exc:
            raise ConfigError("%s: %s" % (self.name, exc)) from None
        self.iteration = None   # the iteration whose gradient this worker computes
        self._watch = None      # seq of the GroupWatch of that iteration
        self._dropped = False
        self._zero_groups = ()   # groups whose last gradient this worker's next trigger zeroes (--elastic)
        self._smoothness = 1.0 if self.opts["smoothness"] == "folded" else None   # L_g of this worker's group
        self._rejoining = False   # started again after a death (--max-restarts): until its first selection

    @staticmethod
    def warn_optimizer_unused(optimizer, mode, step_size):
        """The servers run AMSGrad at ``step_size`` (the paper's rule): a script
        that passed its own optimizer and learning rate is told they are not
        used, rather than training at a rate it did not choose."""
        warnings.warn("mode %s runs AMSGrad on the servers at step size %g (--step-size); the script's optimizer "
                      "%r (learning_rate %g) is not used" % (mode, step_size, type(optimizer).__name__.lower(),
                                                             optimizer.learning_rate), stacklevel=3)

    def set_smoothness(self, value):
        """L_g of this worker's group for eq. (9), computed from its shard
        (option ``smoothness='shard'``; before :meth:`setup`).

        Raises:
            ConfigError: with ``smoothness='folded'`` or for a bad value.
        """
        if self.opts["smoothness"] != "shard":
            raise ConfigError("%s: L_g is folded into c (smoothness='folded'); set smoothness='shard' to give it"
                              % self.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ConfigError("%s: L_g must be a finite number > 0, got %r" % (self.name, value))
        self._smoothness = float(value)

    @classmethod
    def groups_for(cls, num_workers, opts):
        return opts["groups"]

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts, num_servers=1, elastic=False):
        from kvstore_ext.gcada import GroupAMSGrad
        return GroupAMSGrad(num_workers, groups=cls.groups_for(num_workers, opts), num_servers=num_servers,
                            alpha=opts["step_size"], beta1=opts["beta1"], beta2=opts["beta2"],
                            rescale=1.0 / batch_size, once_per_iteration=elastic)

    def server_updater(self, batch_size):
        if self._rejoining:
            # the servers run GroupAMSGrad already and hold its state (h, v̂, every group's last gradient,
            # the iterations stepped), which a second set_optimizer would replace with a fresh one
            return None
        return self.updater_for(self.channel.num_workers, batch_size, None, self.opts,
                                num_servers=self.config.num_servers, elastic=bool(self.config.elastic))

    def on_connect(self):
        self.client = self.join_state_server()
        if self._elastic():
            keep_kvstore_alive(self.channel.kv)
            if self.client.job_over:   # started again after every other worker stopped training
                leave_too_late(self)
            self._rejoining = bool(self.client.rejoined)

    # -- mxhet-launch --elastic: a death is the State Server's (GCADARule.depart: the dead claimant's
    # group is reopened, a dead trigger's step is triggered again); the end waits on the State Server's
    # round rendezvous (the membership rule), since PS-LITE's barrier counts the dead.

    def on_setup(self, batch_size):
        if self._smoothness is None:
            raise ConfigError("%s with smoothness='shard' needs L_g of the worker's shard before setup "
                              "(set_smoothness; python -m mxhet.train computes it for --model linear --loss l2)"
                              % self.name)
        self._batch_size = batch_size
        params = trainer_params(self.trainer)
        self._grad_keys = [i for i, p in enumerate(params) if p.grad_req != "null"]
        layout = self._layout = ps_keys.group_key_layout(self.groups, self.config.num_servers,
                                                         num_params=len(self.keys))
        if self.config.num_servers > 1 and any(self.wbufs[i].size >= int(os.environ.get(
                "MXNET_KVSTORE_BIGARRAY_BOUND", _BIGARRAY_BOUND)) for i in self._grad_keys):
            raise ConfigError("%s with %d servers: a parameter above MXNet's big-array bound is split across "
                              "servers, but its step norms are kept on one; use one server"
                              % (self.name, self.config.num_servers))
        like = [self.wbufs[i] for i in self._grad_keys]
        self._gbufs = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in like]
        self._trigger_bufs = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in like]
        self._group_keys = [ps_keys.group_grad_key(i, self.group, layout) for i in self._grad_keys]
        self._norm_keys = [ps_keys.group_norm_key(i, layout) for i in self._grad_keys]
        self._norm_bufs = [mx.nd.zeros((self.groups + 1,)) for _ in self._grad_keys]
        all_group_keys = [ps_keys.group_grad_key(i, g, layout) for g in range(self.groups) for i in self._grad_keys]
        self.channel.init(all_group_keys + self._norm_keys,
                          [mx.nd.zeros(w.shape, dtype=w.dtype) for _ in range(self.groups) for w in like]
                          + [mx.nd.zeros((self.groups + 1,)) for _ in self._grad_keys])
        super().on_setup(batch_size)   # the program runs up to its first iteration (or the job's stop)

    # -- the effects -------------------------------------------------------------------
    def carry_out(self, effect):
        if isinstance(effect, BeginIteration):
            self.iteration = None
            reply = self._ask(m.GroupBegin, iteration=effect.iteration, groups=self.groups,
                              max_delay=self.opts["max_delay"], c=float(self.opts["c"]), want_stop=effect.want_stop,
                              smoothness=self._smoothness)
            self._zero_groups = reply.zero_groups
            if self._rejoining and not reply.stop:   # its first iteration back (the coordinator's next one)
                self.stats.rejoined_at_round = reply.iteration
                self._rejoining = False
            return Selection(reply.iteration, stop=reply.stop, target=int(reply.step_servers), ready=reply.download)
        if isinstance(effect, Download):
            self._download(effect.iteration)
            return None
        if isinstance(effect, ClaimUpload):
            return bool(self._ask(m.GroupDone, iteration=effect.iteration).upload)
        if isinstance(effect, Upload):
            return self._upload(effect.iteration)
        if isinstance(effect, StepServers):
            self._trigger(effect.iteration)
            return None
        return super().carry_out(effect)

    # -- the State Server ------------------------------------------------------------
    def _ask(self, cls, **fields):
        t0 = self.clock()
        reply = self.client.ask(cls, group=self.group, **fields)
        self.stats.query_s += self.clock() - t0
        self.stats.state_queries += 1
        return reply

    def _download(self, k):
        keys = self._grad_keys
        outs = [self.wbufs[i] for i in keys]
        self.channel.pull(keys, outs)
        params = trainer_params(self.trainer)
        copy_all(outs, [params[i].list_data()[0] for i in keys])
        mx.nd.waitall()
        self.stats.downloads += 1
        self.iteration = k
        self._dropped = False
        self._watch = self.client.send_request(m.GroupWatch, iteration=k, group=self.group)

    def _look_at_watch(self, timeout=0.0):
        for reply in self.client.poll(timeout):
            if reply.seq == self._watch and reply.iteration == self.iteration and not reply.keep:
                self._dropped = True

    # -- the iteration (the program's WatchedCompute) ------------------------------------
    def emulate_slowdown(self, seconds):
        end = self.clock() + seconds
        while not self._dropped:
            left = end - self.clock()
            if left <= 0:
                return
            self._look_at_watch(min(left, WATCH_POLL_S))

    def should_abort(self):
        if self.iteration is None:
            return False
        if not self._dropped:
            self._look_at_watch()
        return self._dropped

    def on_abort(self):
        # The WatchedCompute's result: dropped (the step counted it as aborted).
        if self.session.run_until_compute(self.carry_out, False) is None:
            self.stopped = True

    def local_update(self, batch_size, ignore_stale_grad):
        if batch_size != self._batch_size:
            raise ValueError("mode %r ships the gradient scale to the servers at the first step: "
                             "batch_size must stay %d, got %d" % (self.name, self._batch_size, batch_size))
        if not ignore_stale_grad:
            self.check_fresh_grads(self._grad_keys)

    def communicate(self, batch_size, capability, compute_end):
        # The WatchedCompute's result: computed; the gradient is now either uploaded or dropped.
        params = trainer_params(self.trainer)
        for i in self._grad_keys:
            mark_grad_used(params[i].list_data()[0])
        if self.session.run_until_compute(self.carry_out, True) is None:
            self.stopped = True

    def _upload(self, k):
        """Push this iteration's gradient to the group's keys, report it; True if it was the iteration's last."""
        params = trainer_params(self.trainer)
        grads = [params[i].list_grad()[0] for i in self._grad_keys]
        copy_all(grads, self._gbufs)
        self.check_finite(self._gbufs, "gradient", k)
        if self.config.test_kill_after_push:
            _kill_mid_push(self.config.test_kill_after_push, "upload", self.channel, k, self._group_keys, self._gbufs)
        self.channel.push_pull(self._group_keys, self._gbufs, self._gbufs)  # applied once the pull returns
        self.stats.uploads += 1
        reply = self._ask(m.GroupUploaded, iteration=k)
        self._zero_groups = reply.zero_groups
        return bool(reply.step_servers)

    def _trigger(self, k):
        """The servers' step of iteration ``k``, then its norms to the State Server."""
        keys = self._grad_keys
        if self._zero_groups:   # --elastic: groups nobody is left in stop counting in the sum
            zero_keys = [ps_keys.group_grad_key(i, g, self._layout) for g in self._zero_groups for i in keys]
            self.channel.push_pull(zero_keys, [mx.nd.zeros(b.shape, dtype=b.dtype) for _ in self._zero_groups
                                               for b in self._gbufs],
                                   [mx.nd.zeros(b.shape, dtype=b.dtype) for _ in self._zero_groups for b in self._gbufs])
        if self._elastic():   # the servers step a parameter once per iteration, whoever triggers it
            for buf in self._trigger_bufs:
                buf[:] = k + 1
        if self.config.test_kill_after_push:
            _kill_mid_push(self.config.test_kill_after_push, "trigger", self.channel, k, keys, self._trigger_bufs)
        self.channel.push_pull(keys, self._trigger_bufs, [self.wbufs[i] for i in keys])  # the value is not used
        self.channel.push_pull(self._norm_keys, [mx.nd.zeros(b.shape) for b in self._norm_bufs], self._norm_bufs)
        total = sum(b.asnumpy().astype("float64") for b in self._norm_bufs)
        self._ask(m.GroupStepped, iteration=k, delta_sq=float(total[0]), group_sq=[float(x) for x in total[1:]])

    def global_keys(self):
        return list(self._grad_keys)

    def leave_at_exit(self):
        """A worker whose loop ended before the others' leaves alone
        (:meth:`SyncMode.leave_alone`); the gradient it was computing is
        dropped. Its teammates go on computing for its group; once the last
        member of a group has left, the group is never selected again and its
        last gradient is zeroed on the servers (their sum then covers the
        shards still trained on, as a departed worker's data stops counting in
        the other modes)."""
        if self._elastic():
            # the end runs on the State Server's finish, which also tells the coordinator this worker left
            # (a group so retired keeps its last gradient on the servers, as a group whose members died)
            return self.finish_and_close()
        return self.leave_alone()

    def leave_state_server(self):
        # The goodbye's answer says whether this worker's group has no member left.
        if self.client is not None:
            self._group_retired = bool(self.client.bye().retired)
            self.client.close()
            self.client = None

    def on_leave(self):
        if getattr(self, "_group_retired", False):
            self.channel.push(self._group_keys, [mx.nd.zeros(b.shape, dtype=b.dtype) for b in self._gbufs])


def _kill_mid_push(spec, where, channel, k, keys, bufs):
    """Tests only (``MXHET_TEST_KILL_AFTER_PUSH=RANK:K[:upload][,RANK:K[:upload]]``): the worker of that
    PS-LITE rank pushes the first half of ``keys`` (its trigger of the servers' step, or with ``upload`` its
    group's gradient after its claim) at the first such push of an iteration >= K, waits until the servers
    applied it, and dies by SIGKILL: a trigger killed mid-step, a claimant killed mid-upload."""
    for entry in spec.split(","):
        parts = entry.split(":")
        if ((int(parts[0]), parts[2] if len(parts) > 2 else "trigger") == (channel.rank, where)
                and k >= int(parts[1])):
            break
    else:
        return
    half = max(1, len(keys) // 2)
    channel.push_pull(keys[:half], bufs[:half], [mx.nd.zeros(b.shape, dtype=b.dtype) for b in bufs[:half]])
    mx.nd.waitall()
    os.kill(os.getpid(), signal.SIGKILL)


@register
class CADA(GCADA):
    """CADA: G-CADA with groups of one (every worker its own group and shard)."""
    spec = specs.CADA

    @classmethod
    def groups_for(cls, num_workers, opts):
        return num_workers


__all__ = ["GCADA", "CADA"]
