"""nodelay without MXNet: the worker policy, the master's transfer rule, and
both driven together through the State Server by a fake executor with random
timing (numpy vectors for models)."""
import collections

import numpy as np
import pytest

from mxhet.control import messages as m
from mxhet.control.nodelay import TransferRule
from mxhet.control.server import StateService
from mxhet.errors import ConfigError, ProtocolError
from mxhet.policy.nodelay import NoDelayPolicy
from mxhet.policy.worker import Action


# -- the worker policy --------------------------------------------------------------
def test_policy_waits_for_the_initial_model_and_blocks_exactly_at_tau():
    p = NoDelayPolicy(3)
    assert p.blocked and p.s == 3            # line 3: s = tau until the first model arrives
    p.arrived(-1)
    assert not p.blocked and p.s == 0
    assert p.completed() is Action.QUERY     # the first gradient since the last transfer: notify
    assert p.completed() is Action.CONTINUE  # announced once per round
    assert not p.blocked
    assert p.completed() is Action.CONTINUE
    assert p.blocked and p.s == 3 and p.blocks == 1
    with pytest.raises(ConfigError, match="staleness 3 = tau"):
        p.completed()


def test_policy_transfer_keeps_staleness_until_the_merged_model_arrives():
    p = NoDelayPolicy(4)
    p.arrived(-1)
    p.completed(), p.completed()
    p.requested(0)
    assert p.transfer_due
    assert p.transferred() == (0, 2, False)
    assert p.pending == 0 and p.s == 2      # the handed-over gradients are not in the global model yet
    assert p.completed() is Action.QUERY    # announces round 1
    assert p.s == 3
    p.arrived(0)
    assert p.s == 1 and p.pending == 1     # line 11: s = i - i_init
    assert p.round == 1 and p.received == 0


@pytest.mark.parametrize("call, message", [
    (lambda p: p.requested(1), "requested; the worker announced round 0"),
    (lambda p: p.transferred(), "no transfer was requested"),
    (lambda p: p.arrived(0), "expected round -1"),
])
def test_policy_refuses_out_of_order_events(call, message):
    p = NoDelayPolicy(2)
    with pytest.raises(ConfigError, match=message):
        call(p)


def test_policy_refuses_a_transfer_before_the_previous_model_arrived():
    p = NoDelayPolicy(8)
    p.arrived(-1)
    p.completed()
    p.requested(0)
    p.transferred()
    p.completed()
    p.requested(1)
    with pytest.raises(ConfigError, match="before round 0's global model arrived"):
        p.transferred()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "16", None])
def test_policy_refuses_a_bad_staleness(bad):
    with pytest.raises(ConfigError, match="staleness"):
        NoDelayPolicy(bad)


# -- the master's rule ---------------------------------------------------------------
def test_rule_requests_when_everyone_announced_and_the_previous_merge_is_done():
    rule = TransferRule(range(3))
    assert rule.notify(0, 0, token="a") is None
    assert rule.notify(2, 0, token="c") is None
    req = rule.notify(1, 0, token="b")
    assert req.round == 0 and not req.stop and req.tokens == {0: "a", 1: "b", 2: "c"}
    # round 1 announced by all before the merge of round 0 reached everyone: not yet
    for r in range(3):
        assert rule.notify(r, 1, token=r) is None
    assert rule.merged(0, 0) is None and rule.merged(1, 0) is None
    assert rule.merging
    req = rule.merged(2, 0)
    assert req.round == 1 and sorted(req.tokens) == [0, 1, 2]


def test_rule_stop_wish_of_any_worker_ends_the_round_for_all():
    rule = TransferRule([0, 1])
    rule.notify(0, 0, want_stop=True)
    req = rule.notify(1, 0)
    assert req.stop and rule.stopped
    with pytest.raises(ProtocolError, match="after the job's last round"):
        rule.notify(0, 1)


def test_rule_a_departed_worker_no_longer_holds_up_the_others():
    rule = TransferRule([0, 1, 2])
    rule.notify(0, 0)
    rule.notify(1, 0)
    req = rule.leave(2)
    assert req.round == 0 and sorted(req.tokens) == [0, 1]
    with pytest.raises(ProtocolError, match="not a live worker"):
        rule.notify(2, 1)


@pytest.mark.parametrize("call, message", [
    (lambda r: r.notify(0, 1), "the next transfer is round 0"),
    (lambda r: (r.notify(0, 0), r.notify(0, 0)), "twice"),
    (lambda r: r.merged(0, 0), "the last merge requested is round -1"),
    (lambda r: r.notify(5, 0), "not a live worker"),
])
def test_rule_refuses_protocol_errors(call, message):
    with pytest.raises(ProtocolError, match=message):
        call(TransferRule([0, 1]))


def test_rule_needs_workers():
    with pytest.raises(ValueError, match="at least one"):
        TransferRule([])


# -- the State Server's handlers ----------------------------------------------------------
def _service(n):
    service = StateService(n)
    for r in range(n):
        assert service.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    return service


def test_state_service_defers_notifies_and_releases_them_together():
    service = _service(2)
    assert service.handle(m.Notify(rank=0, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=0) is None
    own = service.handle(m.Notify(rank=1, seq=2, round=0, pending=3, want_stop=False), 0.2, sender=1)
    assert own.ok and own.ready and own.round == 0 and own.seq == 2
    (rank, late), = service.take_released()
    assert rank == 0 and late.ready and late.seq == 2 and late.round == 0
    bad = service.handle(m.Notify(rank=0, seq=3, round=5, pending=1, want_stop=False), 0.3, sender=0)
    assert not bad.ok and "next transfer is round 1" in bad.error
    assert service.stats()["nodelay"]["rounds"] == 1


def test_state_service_bye_releases_the_others():
    service = _service(2)
    assert service.handle(m.Notify(rank=0, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=0) is None
    assert service.handle(m.Bye(rank=1, seq=2), 0.2, sender=1).ok
    (rank, late), = service.take_released()
    assert rank == 0 and late.ready


def test_messages_round_trip_and_validate():
    for msg in (m.Notify(rank=1, seq=2, round=3, pending=4, want_stop=True), m.Merged(rank=1, seq=3, round=3)):
        assert m.decode(m.encode(msg), m.REQUEST_TYPES) == msg
    with pytest.raises(ProtocolError, match="pending"):
        m.decode(m.encode(m.Notify(rank=1, seq=2, round=3, pending=0, want_stop=False)), m.REQUEST_TYPES)


# -- everything together: a fake executor with random timing -----------------------------
class FakeWorker:
    def __init__(self, rank, tau, x0):
        self.rank, self.policy = rank, NoDelayPolicy(tau)
        self.x, self.x_init = x0.copy(), x0.copy()
        self.steps = []          # [step vector, round it was handed over in (None: not yet)]
        self.inbox = collections.deque()   # (due time, kind, payload)
        self.seq = 1
        self.policy.arrived(-1)
        self.stopped = False
        self.idle = False

    def next_seq(self):
        self.seq += 1
        return self.seq


def _unmerged(w):
    """Gradients of ``w`` missing from the last global model it received (counted from the steps)."""
    received = w.policy.received
    return sum(1 for _, r in w.steps if r is None or r > received)


@pytest.mark.parametrize("tau, n, seed", [(1, 3, 0), (2, 3, 1), (4, 2, 2), (16, 4, 3), (3, 5, 4)])
def test_fake_cluster_keeps_conservation_staleness_and_fifo(tau, n, seed):
    rng = np.random.RandomState(seed)
    x0 = rng.normal(size=5)
    service = _service(n)
    workers = [FakeWorker(r, tau, x0) for r in range(n)]
    speeds = rng.uniform(0.5, 3.0, size=n)
    clock = 0.0
    global_model = x0.copy()
    transferred_sum = np.zeros_like(x0)
    rounds = {}          # round -> {rank: w.x}
    merges = 0
    stop_after = 40
    events = []          # (time, seq, rank, kind, payload) kept sorted
    order = 0

    def post(t, rank, kind, payload=None):
        nonlocal order
        order += 1
        events.append((t, order, rank, kind, payload))

    def answer(reply_pairs, t):
        for rank, reply in reply_pairs:
            post(t + rng.uniform(0.01, 0.3), rank, "request", reply)

    for w in workers:
        post(rng.uniform(0, 1) * speeds[w.rank], w.rank, "step")
    while events:
        events.sort()
        clock, _, rank, kind, payload = events.pop(0)
        w = workers[rank]
        if w.stopped:
            continue
        if kind == "step":
            if w.policy.blocked or w.policy.stopping:
                w.idle = True  # resumed by the arrival of a model (a stopping worker computes no more)
                continue
            g = rng.normal(size=x0.shape) * 0.1
            w.x -= g
            w.steps.append([-g, None])
            if w.policy.completed() is Action.QUERY:
                want_stop = merges >= stop_after
                reply = service.handle(m.Notify(rank=rank, seq=w.next_seq(), round=w.policy.round,
                                                pending=w.policy.pending, want_stop=want_stop), clock, sender=rank)
                if reply is not None:
                    assert reply.ok, reply.error
                    answer([(rank, reply)], clock)
                answer(service.take_released(), clock)
            # invariant: x - x_init is the sum of the local steps since the last transfer
            since = [s for s, r in w.steps if r is None]
            assert np.allclose(w.x - w.x_init, np.sum(since, axis=0) if since else 0.0)
            # staleness bound, counted independently of the policy
            assert _unmerged(w) == w.policy.s <= tau
            assert w.policy.blocked == (w.policy.s == tau)
            if w.policy.blocked:
                w.idle = True
            else:
                post(clock + speeds[rank], rank, "step")
        elif kind == "request":
            w.policy.requested(payload.round, payload.stop)
            post(clock + rng.uniform(0, 0.05), rank, "transfer")
        elif kind == "transfer":
            wx = w.x - w.x_init
            round_, k, stop = w.policy.transferred()          # raises if not FIFO
            assert k >= 1
            w.x_init = w.x.copy()                             # line 23: x_init = x (w.x = 0)
            for step in w.steps:
                if step[1] is None:
                    step[1] = round_
            rounds.setdefault(round_, {})[rank] = wx
            if len(rounds[round_]) == n:                      # dist_sync: the last push completes the merge
                mean = sum(rounds[round_].values()) / n
                global_model = global_model + mean
                transferred_sum += sum(rounds[round_].values())
                merges += 1
                assert np.allclose(global_model, x0 + transferred_sum / n)   # conservation
                for r in range(n):
                    post(clock + rng.uniform(0.05, 2.5), r, "arrive", (round_, global_model.copy(), stop))
        elif kind == "arrive":
            round_, model, stop = payload
            wx = w.x - w.x_init
            w.x_init = model
            w.x = model + wx                                  # line 10: x = x_init + w.x
            w.policy.arrived(round_)
            assert _unmerged(w) == w.policy.s <= tau
            reply = service.handle(m.Merged(rank=rank, seq=w.next_seq(), round=round_), clock, sender=rank)
            assert reply.ok, reply.error
            answer(service.take_released(), clock)
            if w.policy.done:
                assert stop
                w.stopped = True
                service.handle(m.Bye(rank=rank, seq=w.next_seq()), clock, sender=rank)
                answer(service.take_released(), clock)
            elif w.idle:
                w.idle = False
                post(clock + speeds[rank], rank, "step")
    assert all(w.stopped for w in workers), "a worker never stopped"
    assert merges > stop_after
    for w in workers:                                          # the last round left nothing local
        assert np.allclose(w.x, global_model)
    if tau <= 4:
        assert any(w.policy.blocks for w in workers), "the staleness bound was never reached"
    if tau == 1:
        assert all(len(v) == n for v in rounds.values())
        assert all(w.policy.max_s == 1 for w in workers)
