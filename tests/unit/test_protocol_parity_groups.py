"""Parity of the two interpreters where the decisions depend on arrival order:
G-CADA with groups of 2 (the first finisher of a group uploads, a slower
member's work is dropped) and nodelay with tau = 2 (the master's requests for
a transfer arrive during iterations, merged models through the data-plane
thread). The cluster's executors run in virtual time
with the simulator's iteration times (the stand-ins of
:mod:`tests.unit.parity_standins`), the simulator with messages and
transfers that take no virtual time (the paper's model, eqs. 10, 14).
"""
import pytest

from mxhet.modes import get_mode
from mxhet.protocol import Now
from tests.unit.parity_standins import (ITER_S, KV, ROUNDS, SLOWDOWN, WORKERS, GroupChannel, OneParamTrainer,
                                        VirtualClient, VirtualServer, VirtualTime, decisions, new_mode,
                                        run_in_virtual_time, sim_traces)

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
    nodelay's requests for a transfer), its polls virtual waits (:class:`_ListeningClient`).
    Set as the mode's ``timer.pacing``."""
    base_s = 0.0

    def __init__(self, seconds):
        self.seconds = seconds

    def padding(self, since_start, since_last):
        return self.seconds


class _ListeningServer(VirtualServer):
    """:class:`~tests.unit.parity_standins.VirtualServer` whose answers also end the timed
    poll of a worker listening during its iteration (it waits for its turn, in ``time.turns``) at the
    sender's time: a teammate's claim ends a G-CADA member's computation, a request for a transfer
    reaches a nodelay worker mid-iteration, at that moment, as in the simulator."""

    def on_release(self, rank, sender):
        time = self.time
        if rank == sender:
            return
        if rank in time.turns:
            time.clocks[rank] = min(time.clocks[rank], time.clocks[sender])
        else:
            time.clocks[rank] = max(time.clocks[rank], time.clocks[sender])
            time.turns.add(rank)


class _ListeningClient(VirtualClient):
    """A StateClient in virtual time: G-CADA's requests, polls that wait (virtually).
    The answers a worker's own ``send`` released come back once it waits (a timed
    poll), not to a poll at the same moment: the simulator's link delivers them at
    that moment too, but after the sender's next effect began (the master's request
    for a transfer then reaches the last worker to announce during its next
    iteration on both engines)."""

    def __init__(self, server, rank):
        self.held = []
        super().__init__(server, rank)

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

def _gcada_cluster_traces(options):
    import mxnet as mx
    server = _ListeningServer(GCADA_WORKERS)
    time = server.time = VirtualTime(server, GCADA_WORKERS)
    modes = []
    for slot in range(GCADA_WORKERS):
        mode = new_mode(get_mode("gcada"), slot, clock=lambda slot=slot: time.clocks[slot], trainer=OneParamTrainer(),
                        channel=GroupChannel(GCADA_WORKERS), workers=GCADA_WORKERS, config={"num_servers": 1},
                        **options)
        mode.keys, mode.wbufs = [0], [mx.nd.zeros((2,))]
        mode.timer.pacing = _Pacing(GCADA_ITER_S[slot])
        modes.append(mode)

    def start(mode):
        mode.client = _ListeningClient(server, mode.config.slot)
        mode.on_setup(64)   # its first request waits for the others'
    # the iteration's time is the emulated slowdown (_Pacing); no backward ran: the fake gradients are not fresh
    return run_in_virtual_time(modes, time, start, ignore_stale_grad=True)


def _gcada_decisions(trace):
    """The decisions but who has the servers step (the iteration's last upload) and the clock readings."""
    from mxhet.protocol.effects import StepServers, Upload
    return [(e, None if isinstance(e, Upload) else r) for e, r in trace
            if not isinstance(e, (StepServers, Now))]


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
    cluster = _gcada_cluster_traces({"groups": 2, "max_delay": 1})
    sim = sim_traces(tmp_path, "gcada", GCADA_ARGV, monkeypatch, workers=GCADA_WORKERS)
    assert sorted(sim) == sorted(cluster) == list(range(GCADA_WORKERS))
    for slot in range(GCADA_WORKERS):
        assert _gcada_decisions(sim[slot][0]) == _gcada_decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:], slot
    iterations = ROUNDS + 1   # the wish to stop goes with the next request (as for CADA)
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
        return self.shared.get(round_, 0) == WORKERS

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
    server = _ListeningServer(WORKERS)
    time = server.time = VirtualTime(server)
    shared = {}
    modes = []
    for slot in range(WORKERS):
        mode = new_mode(get_mode("nodelay"), slot, clock=lambda slot=slot: time.clocks[slot], **options)
        mode.channel.num_workers, mode.channel.kv = WORKERS, KV()
        mode.keys, mode.wbufs = [], []
        mode.timer.pacing = _Pacing(ITER_S[slot])
        modes.append(mode)

    def start(mode):
        mode.client = _ListeningClient(server, mode.config.slot)
        mode.on_setup(64)
        mode.courier.close()
        mode.courier = _VirtualCourier(server, mode.config.slot, shared)
    return run_in_virtual_time(modes, time, start)   # the iteration's time is the emulated slowdown (_Pacing)


def test_nodelay_with_staleness_two_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch):
    # tau = 2: a worker goes on computing while its last transfer is merged, and the master's requests
    # arrive during iterations, so the decisions depend on timing: the cluster's workers run in virtual
    # time with the simulator's iteration times, links that take no time on both.
    cluster = _nodelay_cluster_traces({"staleness": 2})
    sim = sim_traces(tmp_path, "nodelay", ["--max-staleness", "2", *SLOWDOWN, "--latency-ms", "0",
                                           "--per-key-ms", "0", "--bandwidth-gbps", "1e6"], monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert decisions(sim[slot][0]) == decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:], slot
    # By hand: the fast workers (0.02 s) compute 2 iterations per transfer; the slow one (0.05 s) is the
    # last to announce each round, so each request reaches it during its next iteration, 1 iteration
    # after the previous transfer (2 for the last, kept for the end of the iteration).
    from mxhet.protocol.effects import ListeningCompute, TransferAsked
    for traces in (sim, cluster):
        assert [traces[slot][1:] for slot in range(WORKERS)] == [(3, [2, 2, 2]), (3, [2, 2, 2]), (3, [1, 1, 2])]
        asked = [r for e, r in traces[2][0] if isinstance(e, ListeningCompute) and r]
        assert asked == [(TransferAsked(r, r == ROUNDS - 1),) for r in range(ROUNDS)]
