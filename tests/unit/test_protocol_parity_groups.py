"""Parity of the two interpreters where a group's decisions depend on arrival
order: G-CADA with groups of 2 (the first finisher of a group uploads, a
slower member's work is dropped). The cluster's executors run in virtual time
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


class _GroupVirtualClient(parity._VirtualClient):
    def ask(self, cls, **fields):
        return self._ask(cls, **fields)

    def send_request(self, cls, **fields):
        message = self._message(cls, **fields)
        self.server.handle(message)
        return message.seq


class _DropServer(parity._VirtualServer):
    """:class:`~tests.unit.test_protocol_parity._VirtualServer` whose answer that a teammate claimed
    the upload ends the watched computation at the claimer's time: the cluster's
    :meth:`~mxhet.modes.gcada.GCADA.emulate_slowdown` polls the watch and returns at once, as the
    simulator's compute ends when the answer arrives (a worker computing waits for its turn, in
    ``time.turns``; one waiting for an answer does not)."""

    def handle(self, request):
        with self.cond:
            reply = self.service.handle(request, 0.0, sender=request.rank)
            released, self.service.released = self.service.released, []
            time = self.time
            for rank, deferred in released:
                self.inbox[rank].append(deferred)
                if rank == request.rank:
                    continue
                if rank in time.turns and not deferred.ready:   # computing: the drop ends it now
                    time.clocks[rank] = min(time.clocks[rank], time.clocks[request.rank])
                else:   # it waits off the turn (_VirtualClient._ask): it goes on at the sender's time
                    time.clocks[rank] = max(time.clocks[rank], time.clocks[request.rank])
                    time.turns.add(rank)
            if reply is not None:
                self.inbox[request.rank].append(reply)
            self.cond.notify_all()


class _GroupChannel(parity._Channel):
    num_workers = GCADA_WORKERS

    def pull(self, keys, outs):
        pass

    def push_pull(self, keys, values, outs):
        pass


def _gcada_cluster_traces(options):
    import mxnet as mx
    server = _DropServer(GCADA_WORKERS)
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
        mode.stop_condition = lambda stats: stats.rounds >= parity.ROUNDS
        modes.append(mode)

    def script(mode):
        slot = mode.config.slot
        try:
            time.turn(slot)
            mode.client = _GroupVirtualClient(server, slot)
            mode.on_setup(64)   # its first request waits for the others'
            mode._ready = True
            mode._t_last = mode._t_start = 0.0
            while not mode.stopped:
                time.turn(slot, GCADA_ITER_S[slot])   # the iteration's forward and backward
                mode.step(64, ignore_stale_grad=True)   # no backward ran: the fake gradients are not fresh
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
