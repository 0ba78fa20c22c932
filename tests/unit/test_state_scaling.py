"""The State Server's O(log N) structures against the brute-force code they replaced.

Random event sequences drive a fast and a reference implementation side by
side; every answer, every released SSP reply, every silence check and every
slowest-device pick must be the same. The reference functions below are the
State Server's code before the indexes (O(N) per request), kept as the
definition of the decisions.
"""
import math
import random

import pytest

from mxhet.control import messages as m
from mxhet.control.server import StateService
from mxhet.control.state_rule import LazyHeap, SlowestIndex, StateTable, find_slowest
from mxhet.errors import ProtocolError

SEEDS = range(40)


# --- reference (brute-force) implementations ----------------------------------


class BruteTable(StateTable):
    """StateTable whose slowest device is searched for over every record."""

    def slowest_rank(self):
        return find_slowest(self.records.values()).rank


class BruteService(StateService):
    """StateService as it was: a scan of every worker for each decision."""

    def __init__(self, num_workers, **kwargs):
        super().__init__(num_workers, **kwargs)
        self.table = BruteTable(range(num_workers), epsilon=self.table.epsilon, now=kwargs.get("now", 0.0))

    @property
    def finished(self):
        return bool(self.slots) and self.left >= set(self.slots)

    def _slot_holder(self, slot, rank):
        return next((r for r, s in self.slots.items() if s == slot and r != rank and r not in self.left), None)

    def _on_query(self, req, now):
        record = self._registered(req.rank)
        if req.round != record.round:
            raise ProtocolError("query for round %d, rank %d is in round %d" % (req.round, req.rank, record.round))
        if self.stop_decisions.get(req.round):  # protocol v2: the stop comes with the next query's answer
            return m.QueryReply(seq=req.seq, round=req.round, stop=True)
        present = set(self.slots) - self.left
        ready = self.table.query(req.rank, req.k, req.c, now - req.since_finish, now, among=present)
        # the device decided against is the slowest still training (one that left is never named)
        training = [r for rank, r in self.table.records.items() if rank in present]
        slowest = find_slowest(training).rank if training else self.table.slowest_rank()
        if ready:
            info = self.rounds.setdefault(req.round, {"slowest": slowest, "local_iters": {}})
            info["local_iters"].setdefault(req.rank, req.k)
        return m.QueryReply(seq=req.seq, ready=ready, round=req.round, slowest=slowest)

    def silent(self, now, timeout):
        return sorted(r for r, t in self.last_seen.items() if r not in self.left and now - t > timeout)

    def _ssp_allows(self, rank):
        live = [c for r, c in self.clocks.items() if r not in self.left]
        return not live or self.clocks[rank] - min(live) <= self.staleness

    def _on_clock(self, req, now):
        self._registered(req.rank)
        if req.clock < self.clocks.get(req.rank, 0):
            raise ProtocolError("rank %d clock went back from %d to %d"
                                % (req.rank, self.clocks[req.rank], req.clock))
        self.clocks[req.rank] = req.clock
        self.waiting.pop(req.rank, None)
        self._release_clocks()
        if self._ssp_allows(req.rank):
            return m.Reply(seq=req.seq)
        self.waiting[req.rank] = req.seq
        return None

    def _release_clocks(self):
        for rank, seq in list(self.waiting.items()):
            if self._ssp_allows(rank):
                del self.waiting[rank]
                self.released.append((rank, m.Reply(seq=seq)))


# --- the index structures -----------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_slowest_index_matches_find_slowest(seed):
    rng = random.Random(seed)
    caps = [0.0, 0.5, 1.0, 1.0, 2.0, math.inf]        # few values: many ties
    ranks = range(rng.randrange(1, 30))
    index, truth = SlowestIndex(), {}
    for _ in range(600):
        rank = rng.choice(ranks)
        if rng.random() < 0.15:
            index.discard(rank)
            truth.pop(rank, None)
        else:
            c = rng.choice(caps) if rng.random() < 0.7 else rng.uniform(0, 3)
            index.set(rank, c)
            truth[rank] = c
        expected = max(truth.items(), key=lambda rc: (rc[1], -rc[0]))[0] if truth else None
        assert index.top() == expected
        assert len(index) == len(truth)
        assert len(index._heap) <= 2 * len(truth) + 17       # stale entries stay bounded


@pytest.mark.parametrize("seed", SEEDS)
def test_lazy_heap_pops_in_key_order(seed):
    rng = random.Random(seed)
    heap, truth = LazyHeap(), {}
    for _ in range(400):
        item = rng.randrange(20)
        action = rng.random()
        if action < 0.6:
            key = rng.randrange(10)
            heap.set(item, key)
            truth[item] = key
        elif action < 0.8:
            heap.discard(item)
            truth.pop(item, None)
        else:
            expected = min((k, i) for i, k in truth.items()) if truth else None
            assert heap.pop() == expected
            if expected is not None:
                del truth[expected[1]]
        assert heap.peek() == (min((k, i) for i, k in truth.items()) if truth else None)


@pytest.mark.parametrize("seed", SEEDS)
def test_table_present_only_decides_as_among_the_present(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 12)
    fast, ref = StateTable(range(n), epsilon=0.05), BruteTable(range(n), epsilon=0.05)
    present = set()
    now = 0.0
    for _ in range(400):
        now += rng.choice([0.0, 0.001, 0.1, 0.5])
        rank = rng.randrange(n)
        event = rng.random()
        if event < 0.15:
            flag = rng.random() < 0.6
            fast.set_present(rank, flag)
            (present.add if flag else present.discard)(rank)
        elif event < 0.3:
            round_ = fast.record(rank).round + rng.randrange(2)
            fast.reset(rank, round_, now)
            ref.reset(rank, round_, now)
        else:
            k, c = rng.randrange(3), rng.choice([0.05, 0.1, 1.0, 1.0, rng.uniform(0, 2)])
            last = now - rng.choice([0.0, 0.01, 0.3])
            assert (fast.query(rank, k, c, last, now, present_only=True)
                    == ref.query(rank, k, c, last, now, among=present))
        assert fast.slowest_rank() == ref.slowest_rank()
        assert fast.records == ref.records


# --- the whole service -------------------------------------------------------


def _random_request(rng, n, seqs, svc):
    """A plausible request from a random rank, sometimes out of order or invalid."""
    rank = rng.randrange(n)
    seqs[rank] += 1
    seq = seqs[rank]
    record = svc.table.record(rank)
    kind = rng.choices(["register", "query", "reset", "clock", "bye", "heartbeat"],
                       weights=[2, 10, 3, 6, 1, 3])[0]
    if kind == "register":   # now and then for another rank's slot: a swap after a restart, or refused
        return m.Register(rank=rank, seq=seq, slot=rank if rng.random() < 0.7 else rng.randrange(n))
    if kind == "query":
        return m.Query(rank=rank, seq=seq, round=record.round, k=rng.randrange(4),
                       c=rng.choice([0.01, 0.1, 0.5, 0.5, rng.uniform(0, 1)]),
                       since_finish=rng.choice([0.0, 0.002, 0.2]))
    if kind == "reset":
        return m.Reset(rank=rank, seq=seq, round=record.round + rng.randrange(0, 2) or 1,
                       want_stop=rng.random() < 0.1)
    if kind == "clock":
        return m.Clock(rank=rank, seq=seq, clock=svc.clocks.get(rank, 0) + rng.choice([0, 1, 1, 2]))
    if kind == "bye":
        return m.Bye(rank=rank, seq=seq)
    return m.Heartbeat(rank=rank, seq=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_service_answers_as_the_brute_force_service(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 10)
    staleness = rng.randrange(0, 3)
    fast, ref = StateService(n, staleness=staleness, epsilon=0.02), BruteService(n, staleness=staleness,
                                                                                epsilon=0.02)
    for svc in (fast, ref):   # the membership record's leave / join times: one fixed clock for both
        svc.rule("membership").wall_clock = lambda: 0.0
    seqs = [0] * n
    now = 0.0
    for _ in range(500):
        now += rng.choice([0.0, 0.001, 0.05, 0.7])
        request = _random_request(rng, n, seqs, fast)
        assert fast.handle(request, now, sender=b"x") == ref.handle(request, now, sender=b"x")
        assert fast.take_released() == ref.take_released()
        assert fast.finished == ref.finished
        for timeout in (0.0, 0.5, 2.0):
            assert fast.silent(now, timeout) == ref.silent(now, timeout)
        assert fast.table.slowest_rank() == ref.table.slowest_rank()
    assert fast.stats() == ref.stats()


def test_a_query_does_not_scan_every_worker():
    """With 2,000 workers a query touches a handful of heap entries, not the table (a scan would call
    find_slowest at any size, so the size does not matter to what is checked)."""
    n = 2000
    svc = StateService(n)
    for r in range(n):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0)
    calls = []
    original = find_slowest
    import mxhet.control.state_rule as rule
    rule.find_slowest = lambda records: calls.append(1) or original(records)
    try:
        for r in range(200):
            reply = svc.handle(m.Query(rank=r, seq=2, round=0, k=1, c=0.1, since_finish=0.0), 1.0)
            assert reply.ok and reply.slowest == r + 1    # the next one has not reported a capability
        assert svc.silent(1.0, 30.0) == []
    finally:
        rule.find_slowest = original
    assert calls == []
    assert len(svc.table._slowest._heap) <= 2 * n + 17


class _ScanCountingDict(dict):
    """A dict that counts the entries its iterations visit (a scan of it shows as N visits)."""

    visited = 0

    def _count(self, it):
        for x in it:
            _ScanCountingDict.visited += 1
            yield x

    def __iter__(self):
        return self._count(super().__iter__())

    def keys(self):
        return self._count(super().keys())

    def values(self):
        return self._count(super().values())

    def items(self):
        return self._count(super().items())


def test_registration_does_not_scan_the_registered_ranks():
    """Registering N workers visits no rank's slot entry (the slot's holder is indexed); a scan
    per registration would visit N^2 / 2 entries."""
    n = 500
    svc = StateService(n)
    svc.slots = _ScanCountingDict()
    _ScanCountingDict.visited = 0
    for r in range(n):
        assert svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=b"a").ok
    assert _ScanCountingDict.visited == 0
    # the index still refuses a slot held by a live rank, and frees a slot when its holder leaves
    assert svc.handle(m.Bye(rank=0, seq=2), 0.0, sender=b"a").ok
    refused = svc.handle(m.Register(rank=0, seq=3, slot=7), 0.0, sender=b"a")
    assert not refused.ok and "slot 7 is already held by live rank 7" in refused.error
    assert svc.handle(m.Bye(rank=7, seq=2), 0.0, sender=b"a").ok
    assert svc.handle(m.Register(rank=0, seq=4, slot=7), 0.0, sender=b"a").ok
    refused = svc.handle(m.Register(rank=7, seq=3, slot=7), 0.0, sender=b"a")
    assert not refused.ok and "slot 7 is already held by live rank 0" in refused.error
    assert svc.handle(m.Register(rank=7, seq=4, slot=0), 0.0, sender=b"a").ok
    assert svc.slots[0] == 7 and svc.slots[7] == 0
    assert _ScanCountingDict.visited == 0
