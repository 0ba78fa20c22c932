"""Parity of the two interpreters where the decisions depend on arrival order:
G-CADA with groups of 2 (the first finisher of a group uploads, a slower
member's work is dropped) and nodelay with tau = 2 (the master's requests for
a transfer arrive during iterations, merged models through the data-plane
thread). The cluster's executors run in virtual time
with the simulator's iteration times (the stand-ins of
:mod:`tests.unit.test_protocol_parity`), the simulator with messages and
transfers that take no virtual time (the paper's model, eqs. 10, 14).
"""
import pytest

from mxhet.config import WorkerConfig
from mxhet.modes import get_mode
from tests.unit import test_protocol_parity as parity

pytestmark = pytest.mark.timeout(300)

GCADA_WORKERS = 4   # two groups of two (the groups must divide the workers)
# The simulator's --base-iter 0.02 --slowdown 1,2,1.5,3, in seconds: slot 0 finishes first in group 0
# ({0, 1}), slot 2 in group 1 ({2, 3}); no two finishes at the same moment.
GCADA_ITER_S = (0.02, 0.04, 0.03, 0.06)
GCADA_ARGV = ["--groups", "2", "--max-delay", "1", "--slowdown", "1,2,1.5,3",
              "--latency-ms", "0", "--per-key-ms", "0", "--bandwidth-gbps", "1e6"]


# -- the cluster's workers listening during an iteration, in virtual time ------------------------------

class _Pacing:
    """The profile's iteration time as the emulated slowdown: the executor's own
    ``emulate_slowdown`` listens to the State Server during it (G-CADA's watch,
    nodelay's requests for a transfer), its polls virtual waits (:class:`_ListeningClient`)."""
    base_s = 0.0

    def __init__(self, seconds):
        self.seconds = seconds

    def padding(self, since_start, since_last):
        return self.seconds


class _ListeningServer(parity._VirtualServer):
    """:class:`~tests.unit.test_protocol_parity._VirtualServer` whose answers also end the timed
    poll of a worker listening during its iteration (it waits for its turn, in ``time.turns``) at the
    sender's time: a teammate's claim ends a G-CADA member's computation, a request for a transfer
    reaches a nodelay worker mid-iteration, at that moment, as in the simulator."""

    def handle(self, request):
        with self.cond:
            reply = self.service.handle(request, 0.0, sender=request.rank)
            released, self.service.released = self.service.released, []
            time = self.time
            for rank, deferred in released:
                self.inbox[rank].append(deferred)
                if rank == request.rank:
                    continue
                if rank in time.turns:
                    time.clocks[rank] = min(time.clocks[rank], time.clocks[request.rank])
                else:
                    time.clocks[rank] = max(time.clocks[rank], time.clocks[request.rank])
                    time.turns.add(rank)
            if reply is not None:
                self.inbox[request.rank].append(reply)
            self.cond.notify_all()


class _ListeningClient(parity._VirtualClient):
    """A StateClient in virtual time: G-CADA's requests, polls that wait (virtually).
    The answers a worker's own ``send`` released come back once it waits (a timed
    poll), not to a poll at the same moment: the simulator's link delivers them at
    that moment too, but after the sender's next effect began (the master's request
    for a transfer then reaches the last worker to announce during its next
    iteration on both engines)."""

    def __init__(self, server, rank):
        self.held = []
        super().__init__(server, rank)

    def ask(self, cls, **fields):
        return self._ask(cls, **fields)

    def send_request(self, cls, **fields):
        message = self._message(cls, **fields)
        self.server.handle(message)
        return message.seq

    def send(self, cls, **fields):
        with self.server.cond:
            before = len(self.server.inbox[self.rank])
            super().send(cls, **fields)
            inbox = self.server.inbox[self.rank]
            self.held += inbox[before:]
            del inbox[before:]

    def poll(self, timeout=0.0):
        """Timed: a virtual wait of ``timeout`` s that an answer ends (:class:`_ListeningServer`)."""
        time = self.server.time
        if timeout > 0 and not self.server.inbox[self.rank] and not self.held:
            time.turn(self.rank, timeout)
        with self.server.cond:
            replies, self.server.inbox[self.rank] = self.server.inbox[self.rank], []
            if timeout > 0:
                replies, self.held = self.held + replies, []
        self.replies += len(replies)
        return replies


# -- G-CADA with groups of 2 -----------------------------------------------------------------------

class _GroupChannel(parity._Channel):
    num_workers = GCADA_WORKERS

    def pull(self, keys, outs):
        pass

    def push_pull(self, keys, values, outs):
        pass


def _gcada_cluster_traces(options):
    import mxnet as mx
    server = _ListeningServer(GCADA_WORKERS)
    time = server.time = parity._VirtualTime(server)

    class Trainer(parity._Trainer):
        def __init__(self):   # one parameter: the group keys need a shape
            param = mx.gluon.Parameter("w", shape=(2,))
            param.initialize(ctx=mx.cpu())
            self._params = [param]

    modes = []
    for slot in range(GCADA_WORKERS):
        mode = get_mode("gcada")(Trainer(), WorkerConfig(slot=slot, num_slots=GCADA_WORKERS, num_servers=1),
                                 clock=lambda slot=slot: time.clocks[slot], sleep=lambda s: None, **options)
        mode.trace = []
        mode.channel = _GroupChannel()
        mode.keys, mode.wbufs = [0], [mx.nd.zeros((2,))]
        mode.pacing = _Pacing(GCADA_ITER_S[slot])
        mode.stop_condition = lambda stats: stats.rounds >= parity.ROUNDS
        modes.append(mode)

    def script(mode):
        slot = mode.config.slot
        try:
            time.turn(slot)
            mode.client = _ListeningClient(server, slot)
            mode.on_setup(64)   # its first request waits for the others'
            mode._ready = True
            mode._t_last = mode._t_start = 0.0
            while not mode.stopped:
                # the iteration's time is the emulated slowdown (_Pacing); no backward ran: the
                # fake gradients are not fresh
                mode.step(64, ignore_stale_grad=True)
        finally:
            time.leave(slot)
    return parity._run_threads(modes, script)


def _gcada_decisions(trace):
    """The decisions but who has the servers step (the iteration's last upload) and the clock readings."""
    from mxhet.protocol.effects import StepServers, Upload
    return [(e, None if isinstance(e, Upload) else r) for e, r in trace
            if not isinstance(e, (StepServers, parity.Now))]


def _first_finishers(traces):
    """{iteration: sorted slots that claimed the upload first}, {iteration: sorted slots whose work was dropped}."""
    from mxhet.protocol.effects import ClaimUpload, Download, WatchedCompute
    first, dropped = {}, {}
    for slot in sorted(traces):
        k = None
        for effect, result in traces[slot][0]:
            if isinstance(effect, Download):
                k = effect.iteration
            elif isinstance(effect, WatchedCompute) and result is False:
                dropped.setdefault(k, []).append(slot)
            elif isinstance(effect, ClaimUpload):
                (first if result else dropped).setdefault(effect.iteration, []).append(slot)
    return first, dropped


def test_gcada_with_groups_of_two_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch):
    # D = 1: both groups are selected in every iteration (the selection does not depend on the gradients'
    # norms, which differ between the fake and the real model); who uploads depends on arrival order.
    from mxhet.protocol.effects import BeginIteration, Selection
    monkeypatch.setattr(parity, "WORKERS", GCADA_WORKERS)   # the stand-ins' and the simulator's worker count
    cluster = _gcada_cluster_traces({"groups": 2, "max_delay": 1})
    sim = parity._sim_traces(tmp_path, "gcada", GCADA_ARGV, monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(GCADA_WORKERS))
    for slot in range(GCADA_WORKERS):
        assert _gcada_decisions(sim[slot][0]) == _gcada_decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:], slot
    iterations = parity.ROUNDS + 1   # the wish to stop goes with the next request (as for CADA)
    begins = [r for e, r in _gcada_decisions(sim[0][0]) if isinstance(e, BeginIteration)]
    assert begins == [Selection(k, ready=True) for k in range(iterations)] + [Selection(iterations, stop=True)]
    # By hand: in every iteration both groups start together; slot 0 (0.02 s) beats slot 1 (0.04 s),
    # slot 2 (0.03 s) beats slot 3 (0.06 s); the slower member's work is dropped.
    expected = ({k: [0, 2] for k in range(iterations)}, {k: [1, 3] for k in range(iterations)})
    assert _first_finishers(sim) == _first_finishers(cluster) == expected


# -- nodelay with tau >= 2: transfers asked for during an iteration, merged models through the courier ----

class _VirtualCourier:
    """``dist_sync`` over no arrays, in virtual time with links that take none: round r's merged
    model is there at the moment the last worker hands r over; a worker waiting for it waits off
    the turn (or until the State Server answers it)."""

    def __init__(self, server, rank, shared):
        self.server, self.rank, self.shared = server, rank, shared
        self.rounds, self.busy, self.live = [], False, None

    def _there(self, round_):
        return self.shared.get(round_, 0) == parity.WORKERS

    def submit(self, round_, sends, recvs, training=True):
        time = self.server.time
        with self.server.cond:
            self.shared[round_] = self.shared.get(round_, 0) + 1
            if self._there(round_):   # the waiting workers go on at this moment
                for slot in self.shared.setdefault("waiting", set()):
                    time.clocks[slot] = max(time.clocks[slot], time.clocks[self.rank])
                    time.turns.add(slot)
            self.server.cond.notify_all()
        self.rounds.append(round_)
        self.busy = True

    def take(self, timeout=0.0):
        time, cond = self.server.time, self.server.cond
        round_ = self.rounds[0]
        with cond:
            if not self._there(round_) and timeout > 0 and not self.server.inbox[self.rank]:
                waiting = self.shared.setdefault("waiting", set())
                waiting.add(self.rank)
                time.running = None
                cond.notify_all()
                cond.wait_for(lambda: (self._there(round_) or self.server.inbox[self.rank])
                              and time._runnable(self.rank), timeout=60)
                waiting.discard(self.rank)
                time.turns.discard(self.rank)
                time.running = self.rank
            if not self._there(round_):
                return None
        self.rounds.pop(0)
        self.busy = bool(self.rounds)
        return round_, 0.0

    def close(self, timeout=0.0):
        pass


def _nodelay_cluster_traces(options):
    server = _ListeningServer(parity.WORKERS)
    time = server.time = parity._VirtualTime(server)
    shared = {}
    modes = []
    for slot in range(parity.WORKERS):
        mode = get_mode("nodelay")(parity._Trainer(), WorkerConfig(slot=slot, num_slots=parity.WORKERS),
                                   clock=lambda slot=slot: time.clocks[slot], sleep=lambda s: None, **options)
        mode.trace = []
        mode.channel = parity._Channel()
        mode.channel.num_workers, mode.channel.kv = parity.WORKERS, parity._KV()
        mode.keys, mode.wbufs = [], []
        mode.pacing = _Pacing(parity.ITER_S[slot])
        mode.stop_condition = lambda stats: stats.rounds >= parity.ROUNDS
        modes.append(mode)

    def script(mode):
        slot = mode.config.slot
        try:
            time.turn(slot)
            mode.client = _ListeningClient(server, slot)
            mode.on_setup(64)
            mode.courier.close()
            mode.courier = _VirtualCourier(server, slot, shared)
            mode._ready = True
            mode._t_last = mode._t_start = 0.0
            while not mode.stopped:
                mode.step(64)   # the iteration's time is the emulated slowdown (_Pacing)
        finally:
            time.leave(slot)
    return parity._run_threads(modes, script)


def test_nodelay_with_staleness_two_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch):
    # tau = 2: a worker goes on computing while its last transfer is merged, and the master's requests
    # arrive during iterations, so the decisions depend on timing: the cluster's workers run in virtual
    # time with the simulator's iteration times, links that take no time on both.
    cluster = _nodelay_cluster_traces({"staleness": 2})
    sim = parity._sim_traces(tmp_path, "nodelay", ["--max-staleness", "2", *parity.SLOWDOWN, "--latency-ms", "0",
                                                   "--per-key-ms", "0", "--bandwidth-gbps", "1e6"], monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(parity.WORKERS))
    for slot in range(parity.WORKERS):
        assert parity._decisions(sim[slot][0]) == parity._decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:], slot
    # By hand: the fast workers (0.02 s) compute 2 iterations per transfer; the slow one (0.05 s) is the
    # last to announce each round, so each request reaches it during its next iteration, 1 iteration
    # after the previous transfer (2 for the last, kept for the end of the iteration).
    from mxhet.protocol.effects import ListeningCompute, TransferAsked
    for traces in (sim, cluster):
        assert [traces[slot][1:] for slot in range(parity.WORKERS)] == [(3, [2, 2, 2]), (3, [2, 2, 2]),
                                                                         (3, [1, 1, 2])]
        asked = [r for e, r in traces[2][0] if isinstance(e, ListeningCompute) and r]
        assert asked == [(TransferAsked(r, r == parity.ROUNDS - 1),) for r in range(parity.ROUNDS)]
