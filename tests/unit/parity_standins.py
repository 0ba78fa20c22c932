"""Stand-ins for the parity tests (tests/unit/test_protocol_parity*.py): the
cluster's executors run their real ``step()`` against in-process fakes of the
trainer, the parameter servers and the State Server (the real
:class:`~mxhet.control.server.StateService` behind a lock, or a virtual-time
version of it), one thread per worker; :func:`sim_traces` runs the same job in
the simulator. Both record every effect with its result, per worker.
"""
import threading

from mxhet.config import WorkerConfig
from mxhet.control import messages as m
from mxhet.protocol.effects import Now, Poll
from mxhet.sim import cli, engine

ROUNDS = 3
WORKERS = 3

# The simulator's --base-iter 0.02 --slowdown 1,1,2.5, in seconds: no two arrivals within the
# simulator's round trips and transfers (which the cluster side does not model) of each other.
ITER_S = (0.02, 0.02, 0.05)
SLOWDOWN = ["--slowdown", "1,1,2.5"]


# -- the data plane and the trainer ---------------------------------------------------------------

class Servers:
    """``dist_sync`` for the stop ballot: sum every worker's, hand the sum to all."""

    def __init__(self, n):
        self.barrier = threading.Barrier(n, timeout=60)
        self.lock = threading.Lock()
        self.sums = {}

    def exchange(self, round_index, vote):
        with self.lock:
            self.sums[round_index] = self.sums.get(round_index, 0.0) + vote
        self.barrier.wait()
        return self.sums[round_index]


class Trainer:
    _params = []   # no parameters: the decisions do not depend on the model

    def local_step(self, batch_size, ignore_stale_grad=False):
        pass


class OneParamTrainer(Trainer):
    """One parameter: G-CADA's group keys need a shape."""

    def __init__(self):
        import mxnet as mx
        param = mx.gluon.Parameter("w", shape=(2,))
        param.initialize(ctx=mx.cpu())
        self._params = [param]


class Channel:
    def init(self, keys, values):
        pass


class GroupChannel(Channel):
    """G-CADA's and CADA's channel: pulls and push-pulls of no arrays."""

    def __init__(self, num_workers):
        self.num_workers = num_workers

    def pull(self, keys, outs):
        pass

    def push_pull(self, keys, values, outs):
        pass


class KV:
    def push(self, keys, values):
        pass

    def pull(self, keys, out):
        pass


def new_mode(cls, slot, clock, trainer=None, channel=None, workers=WORKERS, rounds=ROUNDS, config=None, **options):
    """A cluster executor of mode class ``cls`` as a parity test drives it without ``setup()``:
    for ``slot`` of ``workers``, reading ``clock``, with no slowdown sleep, its ``trace`` recorded,
    on ``channel`` (a :class:`Channel` by default), stopping after ``rounds`` (mxhet.train's
    --max-rounds, on its stop protocol); ``config``: more WorkerConfig fields."""
    mode = cls(trainer or Trainer(), WorkerConfig(slot=slot, num_slots=workers, **(config or {})), clock=clock,
               sleep=lambda s: None, **options)
    mode.trace = []
    mode.channel = channel or Channel()
    mode.stopping.condition = lambda stats: stats.rounds >= rounds
    return mode


def started(mode, t0=0.0):
    """What ``setup()`` leaves besides the connections: the mode is ready, its timer started at ``t0``."""
    mode._ready = True
    mode.timer.t_last = mode.timer.t_start = t0


# -- running the workers ---------------------------------------------------------------------------

def traces(modes):
    """Each worker's trace, rounds and local steps per round, by slot."""
    return {mode.config.slot: (mode.trace, mode.stats.rounds, mode.stats.local_iters) for mode in modes}


def until_stopped(mode, **kwargs):
    """The training loop: step() until the mode stops."""
    while not mode.stopped:
        mode.step(64, **kwargs)


def run_threads(modes, body=until_stopped, on_error=lambda: None):
    """``body(mode)`` for every worker, one thread each; an error fails the test (after ``on_error``,
    which releases the others), so does a worker still running after 120 s. Returns :func:`traces`."""
    errors = []

    def script(mode):
        try:
            body(mode)
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)
            on_error()
    threads = [threading.Thread(target=script, args=(mode,), daemon=True) for mode in modes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads), errors
    return traces(modes)


def sim_traces(tmp_path, mode_name, argv, monkeypatch, workers=WORKERS):
    """The simulator's run of the job: {slot: (trace, rounds, local steps per round)}."""
    made = []
    init = engine.Simulation.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.traces = {}
        made.append(self)
    monkeypatch.setattr(engine.Simulation, "__init__", recording_init)
    out = tmp_path / mode_name
    args = cli.build_parser().parse_args([
        "-n", str(workers), "--sync", mode_name, "--slowdown", "1,1,3", "--base-iter", "0.02", "--seed", "0",
        "--max-rounds", str(ROUNDS), "--time-budget", "100", "--model", "smallcnn", "--eval-samples", "50",
        "--final-eval-samples", "50", "--eval-interval", "10", "--no-progress", "--metrics-out", str(out), *argv])
    args.argv = []
    summary = cli.run(args)
    sim = made[0]
    by_slot = {w["slot"]: w for w in summary["workers"]}
    return {slot: (sim.traces[slot], by_slot[slot]["rounds"], by_slot[slot]["local_iters"]) for slot in by_slot}


def decisions(trace):
    """The decisions in a trace: without the polls (how the events of one moment
    are batched depends on each engine's timing, not on the protocol) and the
    clock readings."""
    return [(e, r) for e, r in trace if not isinstance(e, (Poll, Now))]


# -- the State Server --------------------------------------------------------------------------------

class Client:
    def clock(self, iterations):
        pass

    def bye(self):
        pass

    def close(self):
        pass


class StateServer:
    """The real :class:`~mxhet.control.server.StateService` behind a lock, its
    deferred answers handed to the waiting worker's queue."""

    def __init__(self, n):
        from mxhet.control.server import StateService
        self.service = StateService(n)
        self.cond = threading.Condition()
        self.inbox = {rank: [] for rank in range(n)}

    def handle(self, request):
        with self.cond:
            reply = self.service.handle(request, 0.0, sender=request.rank)
            released, self.service.released = self.service.released, []
            for rank, deferred in released:
                self.inbox[rank].append(deferred)
                self.on_release(rank, request.rank)
            if reply is not None:
                self.inbox[request.rank].append(reply)
            self.cond.notify_all()

    def on_release(self, rank, sender):
        """``sender``'s request released a deferred answer to ``rank`` (called with the lock held)."""


class RuleClient(Client):
    """A StateClient over :class:`StateServer`: ``send`` and ``poll``
    (nodelay), blocking requests (Partial Reduce, G-CADA's ``ask``)."""
    timeout = 60.0
    rtt = 0.0

    def __init__(self, server, rank):
        self.server, self.rank, self.seq = server, rank, 0
        self.queries = self.replies = 0
        self._ask(m.Register, slot=rank, signature="", round=0)

    def _message(self, cls, **fields):
        self.seq += 1
        return cls(rank=self.rank, seq=self.seq, **fields)

    def send(self, cls, **fields):
        self.server.handle(self._message(cls, **fields))

    def send_request(self, cls, **fields):
        message = self._message(cls, **fields)
        self.server.handle(message)
        return message.seq

    def poll(self, timeout=0.0):
        with self.server.cond:
            self.server.cond.wait_for(lambda: self.server.inbox[self.rank], timeout=timeout)
            replies, self.server.inbox[self.rank] = self.server.inbox[self.rank], []
        self.replies += len(replies)
        return replies

    def _ask(self, cls, **fields):
        message = self._message(cls, **fields)
        self.server.handle(message)
        with self.server.cond:
            inbox = self.server.inbox[self.rank]
            self.server.cond.wait_for(lambda: any(r.seq == message.seq for r in inbox), timeout=60)
            reply = next(r for r in inbox if r.seq == message.seq)
            inbox.remove(reply)
        return reply

    def ask(self, cls, **fields):
        return self._ask(cls, **fields)

    def reduce_join(self, **fields):
        self._ask(m.ReduceJoin, **fields)

    def reduce_ready(self, k, want_stop=False):
        return self._ask(m.ReduceReady, k=k, want_stop=want_stop)

    def reduce_pushed(self, group):
        self._ask(m.ReducePushed, group=group)


# -- rules whose decisions depend on arrival order: the cluster's workers in virtual time ---------------

class VirtualTime:
    """One worker thread runs at a time: the one with the earliest virtual clock
    (ties: the lowest slot) among those not waiting for the State Server. A
    worker an answer releases goes on at the releasing worker's time."""

    def __init__(self, server, workers=WORKERS):
        self.cond = server.cond
        self.clocks = [0.0] * workers
        self.turns = set(range(workers))   # the workers waiting for their turn (at first all: none runs early)
        self.running = None

    def _runnable(self, slot):
        return self.running is None and slot == min(self.turns, key=lambda s: (self.clocks[s], s))

    def turn(self, slot, advance=0.0):
        """Hand the turn on, take it back once ``slot`` is the earliest, ``advance`` s later."""
        with self.cond:
            self.clocks[slot] += advance
            self.turns.add(slot)
            if self.running == slot:
                self.running = None
            self.cond.notify_all()
            self.cond.wait_for(lambda: self._runnable(slot), timeout=60)
            self.turns.discard(slot)
            self.running = slot

    def leave(self, slot):
        with self.cond:
            self.running = None
            self.clocks[slot] = float("inf")
            self.cond.notify_all()


class VirtualServer(StateServer):
    """:class:`StateServer` whose deferred answers bring the released workers up to the sender's time."""

    def __init__(self, n):
        super().__init__(n)
        self.time = None

    def on_release(self, rank, sender):
        if rank != sender:   # it waits off the turn (VirtualClient._ask): it may have it again
            self.time.clocks[rank] = max(self.time.clocks[rank], self.time.clocks[sender])
            self.time.turns.add(rank)


class VirtualClient(RuleClient):
    def _ask(self, cls, **fields):
        message = self._message(cls, **fields)
        self.server.handle(message)
        time = self.server.time
        with self.server.cond:
            inbox = self.server.inbox[self.rank]
            if not any(r.seq == message.seq for r in inbox):   # wait off the turn until the answer releases it
                time.running = None
                self.server.cond.notify_all()
                self.server.cond.wait_for(lambda: any(r.seq == message.seq for r in inbox)
                                          and time._runnable(self.rank), timeout=60)
                time.turns.discard(self.rank)
                time.running = self.rank
            reply = next(r for r in inbox if r.seq == message.seq)
            inbox.remove(reply)
        return reply


def run_in_virtual_time(modes, time, start, iteration_s=None, **step_kwargs):
    """Every worker's training loop in its own thread, one at a time in ``time``
    (:class:`VirtualTime`): ``start(mode)`` connects it and runs its ``on_setup``
    (on its turn), then it steps until it stops, each iteration's forward and
    backward ``iteration_s[slot]`` virtual seconds (None: the iteration's time is
    the mode's emulated slowdown, its ``timer.pacing``). Returns :func:`traces`."""
    def script(mode):
        slot = mode.config.slot
        try:
            time.turn(slot)
            start(mode)
            started(mode)
            while not mode.stopped:
                if iteration_s is not None:
                    time.turn(slot, iteration_s[slot])
                mode.step(64, **step_kwargs)
        finally:
            time.leave(slot)
    return run_threads(modes, script)
