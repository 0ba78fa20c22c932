"""The virtual-time engine: a real training job whose clock is virtual.

Every device has its own Gluon replica and data shard and really computes its
forward and backward passes and its local updates, so accuracies are real.
What is virtual is *time*: an iteration takes ``slowdown x base_iter`` virtual
seconds (times an optional log-normal jitter), a message or a model transfer
takes the link's one-way latency plus bytes over bandwidth. The decisions are
the real ones: the worker policies of :mod:`mxhet.policy`, the State Server's
:class:`~mxhet.control.server.StateService`, and the server-side updaters of
:mod:`kvstore_ext.updaters` applied through MXNet's own
``mx.optimizer.get_updater``, exactly as a PS-LITE server applies them.

The event loop is SimPy's (one priority queue of events ordered by virtual
time, ties in scheduling order), so a run is deterministic for a seed. A slow
device costs only its own iterations: 117x slower means 117x fewer real
forward passes, not 117x more waiting.

What the model of the cluster leaves out, on purpose or for now:

* With delayed ACKs a READY ends the iteration in progress at the moment it
  arrives; a real worker notices it at its next check (at once during the
  emulated slowdown, after its forward and backward pass otherwise).
* Servers apply updates in zero virtual time; PS-LITE's per-key messages are
  one transfer of the whole model.
* Snapshots of the global model are taken every ``eval_interval`` virtual
  seconds from the servers' copy (a real job's rank 0 snapshots its last pull).
"""
import dataclasses
import hashlib
import logging

import mxnet as mx
import numpy as np
import simpy
from mxnet import autograd, gluon

from ..control import messages as m
from ..control.server import StateService
from ..dataplane import copy_all, nbytes
from ..errors import ConfigError
from ..modes.base import WorkerStats
from ..policy.specs import executor_spec
from ..policy.pacing import Pacing

LOG = logging.getLogger("mxhet.sim")

DEFAULT_LATENCY_MS = 1.0
"""One-way cost of a message between a worker and the State Server or a
parameter server, milliseconds, added to every device's ``--net-delay-ms``:
the real cluster's cost of a blocking State Server query on loopback (how it
was measured: bench/results/discussion.md, "The simulator's link constants")."""
DEFAULT_PER_KEY_MS = 0.08
"""Fixed cost of one key's message in a push or a pull, milliseconds: PS-LITE
sends one message per key and server, and the server calls the Python updater
once per key. With the latency above it reproduces the real cluster's push and
pull of the small CNN (bench/results/discussion.md, "The simulator's link constants")."""
DEFAULT_BANDWIDTH_GBPS = 10.0
"""Bandwidth of a device's link to the servers, Gbit/s."""


# modes without rounds, whose State Server rule cannot tell an --events leave from a worker's end: the
# simulator records it (the others' rules do, at the goodbye)
_LEAVES_RECORDED_HERE = ("async", "gcada", "cada")


@dataclasses.dataclass(frozen=True)
class Network:
    """Per-device link model: one-way latency in seconds, bandwidth in bytes/s,
    and a fixed cost per key of a push or pull in seconds."""
    latency_s: tuple
    bandwidth: float
    per_key_s: float = DEFAULT_PER_KEY_MS / 1000.0

    def message(self, slot):
        """Seconds for a small control message to cross ``slot``'s link one way."""
        return self.latency_s[slot]

    def transfer(self, slot, size, keys=1):
        """Seconds for ``size`` bytes in ``keys`` keys to cross ``slot``'s link one way."""
        return self.latency_s[slot] + size / self.bandwidth + keys * self.per_key_s


@dataclasses.dataclass
class SimJob:
    """What to simulate (the launcher's and the training entry point's settings)."""
    mode: str
    configs: tuple             # one mxhet.config.WorkerConfig per device
    network: Network
    base_iter_s: float
    time_budget: float         # virtual seconds
    max_rounds: int = 0
    seed: int = 0
    jitter: float = 0.0        # sigma of a log-normal factor on every iteration time (0 = none)
    mode_options: dict = dataclasses.field(default_factory=dict)
    epsilon: float = None
    staleness: int = None
    adsp: dict = dataclasses.field(default_factory=dict)
    eval_interval: float = 2.0
    eval_growth: float = 0.0   # snapshot t+1 = t + max(eval_interval, eval_growth x t)
    eval_min_iterations: int = 0  # ... skipped until the devices ran this many real iterations since the last one
    batch_size: int = 64
    max_iterations: int = 0    # compute cap: stop once the devices ran this many real iterations in all (0: none)
    on_nonfinite: str = "stop"  # what a worker does with NaN/Inf it is about to push (mxhet.policy.nonfinite)
    leaves: dict = dataclasses.field(default_factory=dict)   # slot -> virtual s it leaves the job (--events)
    joins: dict = dataclasses.field(default_factory=dict)    # slot -> virtual s it joins again (--events)


class Device:
    """One simulated worker: a real replica, a real shard, virtual time."""

    def __init__(self, slot, config, net, params, trainer, batches, batch_size, rng):
        self.slot = self.rank = slot
        self.config = config
        self.net = net
        self.params = params            # in key order
        self.trainer = trainer          # gluon.Trainer without kvstore: the local optimizer
        self.batches = batches
        self.batch_size = batch_size
        self.rng = rng
        self.stats = WorkerStats(rank=slot, slot=slot, context=config.context, slowdown=config.slowdown)
        self.global_copy = None         # the global model as last pulled (delta modes)
        self.last_loss = None
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()   # the training loss (per sample)
        self.smoothness = 1.0           # gcada, cada: L_g of this device's shard in eq. (9) (1: folded into c)
        self.stopped = False
        self.seq = 0
        self.incarnation = slot + 1
        self.tally = None               # the simulation's shared count of real iterations
        self.pacing = None              # the profile's iteration time, made on the first iteration
        self.answers = None             # esync: the program's State Server answers (protocol.effects.Listen)
        self.wake = None                # ... event: they say abandon the iteration in progress, or stop
        self.answered = None            # ... event: the last non-blocking query was answered
        self.loss_log = []              # every training loss a decision read (read_loss), in order
        self.replay = None              # replaying to a checkpoint: iterator over loss_log's values, else None
        self.reseed = None              # seed of this device's MXNet random stream (models with Dropout), or None
        self.memory_cache = {}          # esync --late-memory, as a round's keeper: rank -> (round, its memory)

    def weights(self):
        return [p.data() for p in self.params]

    def iteration_time(self, since_start, base, jitter):
        """Virtual seconds of the iteration starting ``since_start`` s into training
        (the profile's rule, :class:`mxhet.policy.pacing.Pacing`, with this device's draws)."""
        pacing = self.pacing
        if pacing is None or pacing.base_s != base or pacing.jitter != jitter:
            pacing = self.pacing = Pacing(self.config.slowdown_at, base, self.config.slowdown_dist, jitter, self.rng)
        return pacing.duration(since_start)

    def compute(self, local_step, read_loss=False):
        """One real forward and backward pass (and the local optimizer step); while replaying
        to a checkpoint (:mod:`mxhet.sim.checkpoint`) only the batch is taken and the loss is
        the logged one."""
        if self.replay is not None:
            self.batches.next_indices()
            if read_loss:
                self.last_loss = next(self.replay, None)
                if self.last_loss is None:
                    raise ConfigError("slot %d read more training losses than its checkpoint logged: the "
                                      "checkpoint's run does not replay here" % self.slot)
        else:
            if self.reseed is not None:
                # Dropout's masks from a stream that depends on this iteration only, not on every
                # draw before it, so a run resumed from a checkpoint draws the same masks.
                mx.random.seed((self.reseed * 1000003 + self.stats.iterations) % (2 ** 31 - 1),
                               ctx=self.params[0].list_ctx()[0])
            x, y = next(self.batches)
            with autograd.record():
                loss = self.loss_fn(self.net(x), y)
            loss.backward()
            if local_step:
                self.trainer.step(self.batch_size)
            if read_loss:
                self.last_loss = float(loss.mean().asscalar())
        if read_loss:
            self.loss_log.append(self.last_loss)
        self.stats.iterations += 1
        self.stats.samples += self.batch_size
        if self.tally is not None:
            self.tally[0] += 1

    def skip_batch(self):
        """An abandoned iteration still took its batch from the stream."""
        self.batches.next_indices()

    def message(self, cls, **fields):
        self.seq += 1
        return cls(rank=self.rank, seq=self.seq, incarnation=self.incarnation, **fields)


class Servers:
    """The parameter servers: the global model and MXNet's updater path."""

    def __init__(self, arrays, updater):
        self.weights = arrays
        self.updater = updater   # the rule itself (a second Servers over other keys can share it)
        self._apply = mx.optimizer.get_updater(updater)
        self.replaying = False   # replaying to a checkpoint: no arithmetic, the checkpoint restores the values

    def apply(self, key, value):
        if not self.replaying:
            self._apply(key, value, self.weights[key])

    def pulled(self, keys):
        """What a pull of ``keys`` reads now, for a reader that copies it at once (no snapshot taken)."""
        return [self.weights[k] for k in keys]

    def snapshot(self, keys=None):
        keys = range(len(self.weights)) if keys is None else keys
        if self.replaying:
            return [self.weights[k] for k in keys]
        return [self.weights[k].copy() for k in keys]

    def get_states(self):
        """The updater's state and rule (pickled bytes, as MXNet's ``Updater.get_states``)."""
        return self._apply.get_states(dump_optimizer=True)

    def set_states(self, states):
        self._apply.set_states(states)
        self.updater = self._apply.optimizer


class SyncRound:
    """``dist_sync`` for one round: the servers wait for one push per worker,
    sum them in arrival order, apply the updater once per key, and answer pulls."""

    def __init__(self, env, servers, keys, workers, on_done=None):
        self.env, self.servers, self.keys, self.workers = env, servers, keys, workers
        self.sums = None
        self.count = 0
        self.taken = 0      # workers that took the result (the round is forgotten after the last)
        self.votes = 0.0
        self.done = env.event()
        self.on_done = on_done

    def arrive(self, values, vote=0.0):
        replaying = getattr(self.servers, "replaying", False)   # (to a checkpoint: it restores the values)
        if not replaying:
            if self.sums is None:
                self.sums = [v.copy() for v in values]
            else:
                for s, v in zip(self.sums, values):
                    s += v
        self.votes += vote   # the stop ballots, summed as the PS-LITE servers sum every pushed key
        self.count += 1
        if self.count == self.workers:
            if not replaying:
                for key, value in zip(self.keys, self.sums):
                    self.servers.apply(key, value)
            self.result = self.servers.snapshot(self.keys)
            self.sums = None
            self.done.succeed()


class Simulation:
    """Runs one :class:`SimJob` over prepared devices; see :func:`run`."""

    def __init__(self, job, devices, servers, grad_keys):
        self.job = job
        # (sync with --events: its elastic form, rounds of the members the State Server names)
        self.spec = executor_spec(job.mode, elastic=bool(getattr(job, "leaves", None)))
        self.devices = devices
        self.servers = servers
        self.grad_keys = grad_keys
        self.env = simpy.Environment()
        n = len(devices)
        kwargs = {"now": 0.0}
        if job.epsilon is not None:
            kwargs["epsilon"] = job.epsilon
        if job.staleness is not None:
            kwargs["staleness"] = job.staleness
        kwargs.update({"adsp_" + k: v for k, v in job.adsp.items() if v is not None})
        if job.mode_options.get("round_deadline"):
            kwargs["round_deadline"] = job.mode_options["round_deadline"]
        if job.mode_options.get("round_length"):
            kwargs["round_length"] = job.mode_options["round_length"]
        if job.mode_options.get("late_memory"):
            kwargs["late_memory"] = True
        if job.mode_options.get("wait_needed"):
            kwargs["wait_needed"] = job.mode_options["wait_needed"]
        rules = tuple(self.spec.state_rules)
        if getattr(job, "leaves", None) and "membership" not in rules:   # --events: its record, and the joins (as the launcher's)
            rules += ("membership",)
        self.service = StateService(n, rules=rules, **kwargs)
        members = self.service.rule("membership")
        if members is not None:   # the leave / join record in virtual seconds
            members.wall_clock = lambda: self.env.now
        self._bucket_bytes = self._wire = None   # see wire_keys
        self._deferred = {}   # (rank, seq) -> event of a deferred State Server answer
        self._rounds = {}     # dist_sync rounds by index
        self.snapshots = []   # (virtual time, [arrays] or what keep_snapshot returned) of the global model
        self.keep_snapshot = None  # callable(index, virtual time, arrays) -> handle, e.g. save to disk
        self.decisions = 0
        self.target_check = None   # callable(arrays) -> bool, asked at every snapshot (stop at the target)
        self.target_reached_at = None
        self.tally = [0]           # real iterations of every device so far (the compute cap counts them)
        for dev in devices:
            dev.tally = self.tally
        self.capped_at = None      # virtual time at which the compute cap stopped the run
        self.progress = None       # callable(virtual seconds), called at every snapshot
        self.scores = []           # target_check's accuracy per snapshot (stop at the target)
        self.traces = None         # {} to record each device's worker-program (effect, result) pairs, by slot
        self.members = None        # a mxhet.sim.members.MemberScores: members and global model at every round
        self.deadline_log = []     # --round-deadline: (slot, round, share) of every delta pushed
        self.late_memory = {}      # --late-memory: the servers' memory keys, rank -> (round, arrays)
        self.memory_landed = {}    # rank -> the event a keeper waiting for that rank's next memory push waits on
        if job.mode_options.get("late_memory"):   # each worker's memory pushes and pulls, as on the cluster
            for dev in devices:
                dev.stats.late_memory = {"pushes": 0, "pulls": 0}
        self.memory_log = []       # --late-memory: (slot, round, "push" or "pull", rank, version)
        self.checks = []           # target_check's (accuracy, reached) per snapshot, in order
        self.events = 0            # SimPy events processed so far (where a checkpoint's replay stops)
        self.in_flight = 0         # pushes and pulls under way: model values held by a process between events
        self.replay = None         # mxhet.sim.checkpoint.Replay while replaying to a checkpoint, else None
        self.checkpointer = None   # mxhet.sim.checkpoint.Checkpointer: save the run every few minutes

    @property
    def replaying(self):
        """True while the run replays to a checkpoint: no MXNet work, logged results."""
        return self.replay is not None

    # -- the State Server over the emulated links --------------------------------
    def _answer(self, dev, request):
        reply = self.service.handle(request, self.env.now, sender=dev.slot)
        self.decisions += 1
        released, self.service.released = self.service.released, []
        for rank, deferred in released:
            event = self._deferred.pop((rank, deferred.seq), None)
            if event is not None:
                self.env.process(self._deliver(self.devices[rank], deferred, event))
        return reply

    def _deliver(self, dev, reply, event):
        yield self.env.timeout(self.job.network.message(dev.slot))
        event.succeed(reply)

    def request(self, dev, request):
        """A blocking request: there and back over ``dev``'s link; returns the reply."""
        sent = self.env.now
        yield self.env.timeout(self.job.network.message(dev.slot))
        reply = self._answer(dev, request)
        if reply is None:
            event = self.env.event()
            self._deferred[(dev.rank, request.seq)] = event
            reply = yield event
        else:
            yield self.env.timeout(self.job.network.message(dev.slot))
        if not reply.ok:
            raise ConfigError("State Server refused %s of slot %d: %s" % (request.TYPE, dev.slot, reply.error))
        dev.stats.state_replies += 1
        dev.stats.rtt_s = self.env.now - sent
        return reply

    def send(self, dev, request, on_reply):
        """A delayed-ACK request: returns at once; ``on_reply(reply)`` runs when it arrives."""
        def go():
            sent = self.env.now
            yield self.env.timeout(self.job.network.message(dev.slot))
            reply = self._answer(dev, request)
            yield self.env.timeout(self.job.network.message(dev.slot))
            dev.stats.state_replies += 1
            dev.stats.rtt_s = self.env.now - sent
            on_reply(reply)
        self.env.process(go())

    # -- helpers -------------------------------------------------------------------
    def wants_stop(self, dev):
        if self.job.max_iterations and self.tally[0] >= self.job.max_iterations and self.capped_at is None:
            self.capped_at = self.env.now
        return (self.env.now >= self.job.time_budget or self.target_reached_at is not None
                or self.capped_at is not None
                or bool(self.job.max_rounds and dev.stats.rounds >= self.job.max_rounds))

    def iterate(self, dev):
        """Wait one iteration's virtual time; returns its duration."""
        duration = dev.iteration_time(self.env.now, self.job.base_iter_s, self.job.jitter)
        yield self.env.timeout(duration)
        dev.stats.compute_s += duration
        return duration

    def blocked(self, dev, since, sync=False, query=False):
        spent = self.env.now - since
        dev.stats.wait_s += spent
        if sync:
            dev.stats.sync_s += spent
        if query:
            dev.stats.query_s += spent
        return spent

    def sync_round(self, index, keys):
        if index not in self._rounds:
            self._rounds[index] = SyncRound(self.env, self.servers, keys, len(self.devices))
        return self._rounds[index]

    def wire_keys(self, values, keys):
        """Keys a push or a pull of ``values`` costs on the wire: the data-plane
        channel's flat buckets when the mode buckets and the servers' updater
        is elementwise (:mod:`mxhet.dataplane.channel`), else one per key."""
        if self._bucket_bytes is None:
            from ..modes import get_mode
            try:
                mode = get_mode(self.job.mode, bool(getattr(self.job, "leaves", None)))
                self._bucket_bytes = getattr(mode, "bucket_bytes", 0)
            except ConfigError:  # a mode only the simulator models
                self._bucket_bytes = 0
        if (not self._bucket_bytes or len(keys) < 2 or not getattr(self.servers.updater, "elementwise", False)
                or list(keys) != list(range(len(self.servers.weights)))):
            return len(keys)
        if self._wire is None:
            from ..dataplane.channel import BucketLayout
            self._wire = len(BucketLayout(keys, values, self._bucket_bytes).buckets)
        return self._wire

    def exchange(self, dev, index, values, keys, vote=0.0):
        """``dist_sync``: push ``values`` for ``keys``, wait for the others, pull the result."""
        self.in_flight += 1
        t0 = self.env.now
        size = nbytes(values)
        transfer = self.job.network.transfer(dev.slot, size + 4, self.wire_keys(values, keys) + 1)
        yield self.env.timeout(transfer)
        rnd = self.sync_round(index, keys)
        rnd.arrive(values, vote)
        yield rnd.done
        rnd.taken += 1
        if rnd.taken == rnd.workers:  # every worker has it: free the round's arrays
            self._rounds.pop(index, None)
        yield self.env.timeout(transfer)
        dev.stats.bytes_pushed += size + 4
        dev.stats.bytes_pulled += size + 4
        self.blocked(dev, t0, sync=True)
        self.in_flight -= 1
        return rnd.result, rnd.votes

    def push_async(self, dev, values, keys):
        """``dist_async``: push, applied on arrival; pull the model as it is then into ``dev``'s replica.

        The pulled values go straight into the replica (and its global copy) when the servers answer, not
        into a snapshot first: the device waits here until they are back, and nothing reads its replica
        meanwhile (the snapshots of a distributed mode are the servers'). The snapshot's new arrays cost
        an AlexNet Async run a tenth of its time.
        """
        self.in_flight += 1
        t0 = self.env.now
        size = nbytes(values)
        transfer = self.job.network.transfer(dev.slot, size, self.wire_keys(values, keys))
        yield self.env.timeout(transfer)
        for key, value in zip(keys, values):
            self.servers.apply(key, value)
        self.take_global(dev, self.servers.pulled(keys), keys)
        yield self.env.timeout(transfer)
        dev.stats.bytes_pushed += size
        dev.stats.bytes_pulled += size
        self.blocked(dev, t0, sync=True)
        self.in_flight -= 1

    def deltas(self, dev):
        if self.replaying:   # only their sizes count
            return dev.weights()
        return [w - g for w, g in zip(dev.weights(), dev.global_copy)]

    def take_global(self, dev, arrays, keys=None):
        if self.replaying:
            return
        keys = range(len(dev.params)) if keys is None else keys
        weights = dev.weights()
        copy_all(arrays, [weights[k] for k in keys])
        if dev.global_copy is not None:
            for k, a in zip(keys, arrays):
                dev.global_copy[k] = a.copy()

    def register(self, dev):
        """Register ``dev`` with the State Server; returns the reply (its round: where a device
        that joins again starts)."""
        return (yield from self.request(dev, dev.message(m.Register, slot=dev.slot, signature="sim", round=0)))

    def leave(self, dev):
        """``dev`` says goodbye (``dev.left_loop``: its ``--events`` leave, before the job's end)."""
        dev.stopped = True
        members = self.service.rule("membership")
        if (getattr(dev, "left_loop", False) and members is not None
                and self.job.mode in _LEAVES_RECORDED_HERE):   # the goodbye alone reads as its end there
            members.rendezvous.note_left_loop(dev.rank, self.env.now)
        reply = yield from self.request(dev, dev.message(m.Bye))
        if getattr(reply, "retired", False) and getattr(dev, "left_loop", False):
            # G-CADA: an --events leave left its group without members (mxhet.modes.gcada's on_leave); at the
            # job's end nobody trains on, and the zeroing would only add to the virtual time
            from .program_gcada import zero_group
            yield from zero_group(self, dev)

    def snapshotter(self):
        while True:
            if self.spec.distributed:
                arrays = self.servers.snapshot()
            elif self.replaying:   # written before the checkpoint: kept_snapshot names the file
                arrays = self.devices[0].weights()
            else:
                arrays = [w.copy() for w in self.devices[0].weights()]
            kept = arrays if self.keep_snapshot is None else self.keep_snapshot(len(self.snapshots), self.env.now,
                                                                                  arrays)
            self.snapshots.append((self.env.now, kept))
            if self.progress is not None:
                self.progress(self.env.now)
            if self.target_check is not None:
                accuracy, reached = self.target_check(arrays) if self.replay is None else self.replay.check()
                self.checks.append((accuracy, reached))
                self.scores.append(accuracy)
                if reached and self.target_reached_at is None:
                    self.target_reached_at = self.env.now
            since = self.tally[0]
            yield self.env.timeout(self._snapshot_step())
            while self.tally[0] - since < self.job.eval_min_iterations:
                yield self.env.timeout(self._snapshot_step())

    def _snapshot_step(self):
        """Virtual seconds to the next point of the snapshot grid."""
        return max(self.job.eval_interval, self.job.eval_growth * self.env.now)

    def run(self):
        """Run until every device stopped; returns the virtual seconds of training."""
        from ..modes.registry import get_program
        from .program import run_program
        # every mode's one worker program, as the cluster runs it (--events: sync's elastic one)
        program = get_program(self.job.mode, bool(getattr(self.job, "leaves", None)))
        if program is None:
            raise ConfigError("mode %r has no worker program the simulator could run" % self.job.mode)

        def body(dev):
            trace = None if self.traces is None else self.traces.setdefault(dev.slot, [])
            return run_program(self, dev, program, trace)
        procs = [self.env.process(body(dev)) for dev in self.devices]
        self.env.process(self.snapshotter())
        done = simpy.AllOf(self.env, procs)
        if self.checkpointer is None:
            self.env.run(until=done)
        else:   # event by event (the same events, in the same order), saving between two of them
            self.checkpointer.drive(self, done)
        return self.env.now


def build_devices(job, model, input_size, images, labels, dist, optimizer, optimizer_params, ctx, mode_spec,
                  norm="batch"):
    """One replica per device, all starting from the same initial model (seeded); ``norm`` as
    :func:`mxhet.models.get_model`'s."""
    from .. import data, models
    n = len(job.configs)
    mx.random.seed(job.seed)
    np.random.seed(job.seed)
    devices = []
    reference = None
    for slot, config in enumerate(job.configs):
        net = models.get_model(model, classes=10, input_size=input_size, norm=norm)
        net.initialize(mx.init.Xavier(), ctx=ctx)
        # No static_alloc/static_shape: on MXNet 1.9.1's threaded engine the BatchNorm running
        # statistics a static CachedOp writes in a training pass are not ordered with later reads or
        # writes of those Parameters (even wait_to_read does not wait for them), so deltas, take_global,
        # snapshots and the final model could hold the values from before the pass, depending on timing.
        # Plain hybridize() lets the engine order every access, and a run is bit-identical to a static
        # replica on NaiveEngine. Fencing each pass with mx.nd.waitall() also works and cost the same
        # within noise on 1-thread ResNet-18, but every new read or write point would need its fence.
        # The price: static memory's 3.5-4.4% on ResNet-50 (17dabf8), on NaiveEngine too.
        net.hybridize()
        shard = data.partition(labels, n, slot, dist=dist, seed=job.seed, groups=job.mode_options.get("groups"))
        batches = data.ShardIterator(images, labels, shard, job.batch_size, seed=job.seed + 1000 * slot,
                                     input_size=input_size, ctx=ctx)
        x, _ = next(batches)
        net(x)  # shapes, as a real worker does (its first batch goes to this pass too)
        params = [p for _, p in sorted(net.collect_params().items())]
        if reference is None:
            reference = [p.data().copy() for p in params]
        else:
            for p, value in zip(params, reference):
                p.set_data(value)
        trainer = gluon.Trainer(params, optimizer, dict(optimizer_params), kvstore=None, update_on_kvstore=False)
        dev = Device(slot, config, net, params, trainer, batches, job.batch_size,
                     np.random.RandomState([job.seed, slot, 7]))
        if _has_dropout(net):
            dev.reseed = job.seed * 7919 + slot + 1
        if mode_spec.exchanges_deltas:
            dev.global_copy = [mx.nd.array(v.asnumpy(), ctx=ctx) for v in reference]
        devices.append(dev)
    return devices


def _has_dropout(block):
    """True if ``block`` or one of its descendants is a Dropout layer (draws from MXNet's random stream)."""
    from ..gluon_private import blocks
    return any(isinstance(b, gluon.nn.Dropout) for b in blocks(block))


def model_digest(arrays):
    """sha256 of the arrays' bytes, in order (as :meth:`SyncMode.finish` computes it)."""
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a.asnumpy()).tobytes())
    return digest.hexdigest()
