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
    req, = rule.leave(2)
    assert req.round == 0 and sorted(req.tokens) == [0, 1] and req.members == 2
    with pytest.raises(ProtocolError, match="not a live worker"):
        rule.notify(2, 1)


# -- the master's rule under --elastic: the push barrier, deaths, joins -----------------------
def _requested(rule, ranks, round_):
    """Every rank in ``ranks`` announces ``round_``; returns the request (the last announcement's)."""
    due = [rule.notify(r, round_, token="n%d" % r) for r in ranks]
    assert all(d is None for d in due[:-1]) and due[-1] is not None
    return due[-1]


def test_push_barrier_releases_once_every_member_pushed():
    rule = TransferRule(range(3))
    req = _requested(rule, [0, 1, 2], 0)
    assert req.members == 3
    assert rule.pushed(0, 0, token="p0") is None and rule.pushed(2, 0, token="p2") is None
    release = rule.pushed(1, 0, token="p1")
    assert release.round == 0 and release.complete and release.tokens == {0: "p0", 1: "p1", 2: "p2"}


def test_a_death_releases_the_push_barrier_it_was_waited_for_at_once():
    rule = TransferRule(range(3))
    _requested(rule, [0, 1, 2], 0)
    rule.pushed(0, 0, token="p0")
    rule.pushed(1, 0, token="p1")
    # rank 2 dies between the request and its report: its push may be missing or partial
    release, = rule.leave(2)
    assert release.round == 0 and not release.complete and release.tokens == {0: "p0", 1: "p1"}
    assert rule.incomplete == [0]
    # the merge no longer waits for its arrival either: the next round is requested from the two left
    rule.notify(0, 1), rule.notify(1, 1)
    assert rule.merged(0, 0) is None
    req = rule.merged(1, 0)
    assert req.round == 1 and sorted(req.tokens) == [0, 1] and req.members == 2


def test_a_death_after_its_push_leaves_the_round_complete_and_releases_the_arrival():
    rule = TransferRule(range(3))
    _requested(rule, [0, 1, 2], 0)
    for r in range(2):
        rule.pushed(r, 0)
    release = rule.pushed(2, 0)
    assert release.complete
    rule.merged(0, 0), rule.merged(1, 0)
    rule.notify(0, 1), rule.notify(1, 1)
    # rank 2 dies after its push was counted, before its pull: its push stays applied once, the
    # next transfer goes out without waiting for its arrival
    req, = rule.leave(2)
    assert req.round == 1 and req.members == 2 and rule.incomplete == []


def test_a_death_releases_a_due_announcement():
    rule = TransferRule(range(4))
    for r in (0, 1, 3):
        assert rule.notify(r, 0, token=r) is None
    req, = rule.leave(2)
    assert req.round == 0 and req.tokens == {0: 0, 1: 1, 3: 3}


def test_two_deaths_in_one_transfer_one_computing_one_before_its_report_leave_rounds_of_the_two_left():
    # 4 ranks; rank 2 dies as round 0's model arrives (no Merged, no push of its own in flight), rank 1
    # after its push of round 1, before its report
    rule = TransferRule(range(4), min_workers=2)
    _requested(rule, [0, 1, 2, 3], 0)
    for r in range(3):
        assert rule.pushed(r, 0) is None
    assert rule.pushed(3, 0).complete
    for r in (0, 1, 3):
        assert rule.merged(r, 0) is None and rule.notify(r, 1, token=r) is None
    req, = rule.leave(2)   # the heartbeat watch: the arrival and the announcement stop waiting for it
    assert req.round == 1 and req.tokens == {0: 0, 1: 1, 3: 3}
    assert rule.pushed(0, 1, token="p0") is None and rule.pushed(3, 1, token="p3") is None
    release, = rule.leave(1)   # 2 live: the minimum, the job goes on
    assert release.round == 1 and not release.complete and release.tokens == {0: "p0", 3: "p3"}
    for r in (0, 3):
        rule.merged(r, 1)
    assert rule.notify(0, 2) is None
    assert rule.notify(3, 2).members == 2 and rule.failed is None
    assert rule.stats()["departures"] == [{"rank": 2, "round": 1}, {"rank": 1, "round": 2}]
    assert rule.incomplete == [1]


def test_a_push_is_counted_once_and_only_from_a_member():
    rule = TransferRule(range(3))
    _requested(rule, [0, 1, 2], 0)
    rule.pushed(0, 0)
    with pytest.raises(ProtocolError, match="twice"):
        rule.pushed(0, 0)
    rule.leave(2)
    # the dead rank's process started again: it takes part from the next round, never in the one its
    # predecessor was a member of (whose push is in, or lost, already)
    assert rule.join(2) == 1
    with pytest.raises(ProtocolError, match="no member of round 0"):
        rule.pushed(2, 0)
    release = rule.pushed(1, 0)
    assert not release.complete and sorted(release.tokens) == [0, 1]
    with pytest.raises(ProtocolError, match="twice"):
        rule.pushed(1, 0)
    with pytest.raises(ProtocolError, match="last transfer requested is round 0"):
        rule.pushed(1, 1)


def test_a_joined_rank_takes_part_from_the_next_round_and_is_waited_for():
    rule = TransferRule(range(3))
    _requested(rule, [0, 1, 2], 0)
    rule.leave(2)
    assert rule.join(2) == 1
    # it holds the global model from its start: the merge in flight does not wait for its arrival,
    # the next announcement does wait for it
    for r in range(2):
        rule.pushed(r, 0)
        rule.merged(r, 0)
        assert rule.notify(r, 1) is None
    req = rule.notify(2, 1)
    assert req.round == 1 and req.members == 3
    with pytest.raises(ProtocolError, match="never left"):
        rule.join(0)
    assert rule.stats()["joins"] == [{"rank": 2, "round": 1}]


def test_a_join_after_the_last_round_was_requested_gets_nothing():
    rule = TransferRule(range(2))
    rule.notify(0, 0, want_stop=True)
    rule.leave(1)
    assert rule.stopped and rule.join(1) is None


def test_the_stop_rule_counts_live_workers_only():
    rule = TransferRule(range(3))
    rule.notify(2, 0, want_stop=True)
    rule.notify(0, 0)
    assert rule.leave(2) == []    # its wish leaves with it
    req = rule.notify(1, 0)
    assert req.tokens.keys() == {0, 1} and not req.stop
    rule = TransferRule(range(3))
    rule.notify(0, 0, want_stop=True)
    rule.notify(1, 0)
    req, = rule.leave(2)
    assert req.stop


def test_below_min_workers_the_job_fails_with_a_clear_error():
    rule = TransferRule(range(3), min_workers=2)
    rule.notify(0, 0)
    assert rule.leave(1) == []
    failed, = rule.leave(2)
    assert "1 worker(s) still train, fewer than the job's minimum of 2 (--min-workers)" in failed.message
    with pytest.raises(ProtocolError, match="--min-workers"):
        rule.notify(0, 1)
    with pytest.raises(ValueError, match="min_workers"):
        TransferRule(range(2), min_workers=0)


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


def test_state_service_a_death_answers_the_waiting_push_and_the_job_fails_below_min_workers():
    service = StateService(3, rules=("nodelay",), min_workers=2)
    for r in range(3):
        assert service.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    for r in range(3):
        service.handle(m.Notify(rank=r, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=r)
    asked = service.take_released()
    assert len(asked) == 2 and all(reply.members == 3 for _, reply in asked)
    assert service.handle(m.TransferPushed(rank=0, seq=3, round=0), 0.2, sender=0) is None
    assert service.handle(m.TransferPushed(rank=1, seq=3, round=0), 0.2, sender=1) is None
    service.depart(2, "died (silent for over 5 s)")      # the heartbeat watch: the goodbye's path
    released = dict(service.take_released())
    assert sorted(released) == [0, 1] and all(not r.complete and r.round == 0 for r in released.values())
    # a second push report of the round is refused (a replay with the same seq gets the first answer)
    again = service.handle(m.TransferPushed(rank=0, seq=4, round=0), 0.3, sender=0)
    assert not again.ok and "twice" in again.error
    assert service.handle(m.Merged(rank=0, seq=5, round=0), 0.3, sender=0).ok
    assert service.handle(m.Notify(rank=0, seq=6, round=1, pending=1, want_stop=False), 0.3, sender=0) is None
    service.depart(1, "died (silent for over 5 s)")
    (rank, failed), = service.take_released()
    assert rank == 0 and not failed.ok and failed.code == "too_few_workers" and "--min-workers" in failed.error
    assert service.stats()["nodelay"]["incomplete_rounds"] == [0]


def test_state_service_a_restarted_rank_registers_for_the_next_transfer_round():
    service = StateService(2, rules=("nodelay", "membership"))
    for r in range(2):
        assert service.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
        service.handle(m.Notify(rank=r, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=r)
    service.take_released()
    service.handle(m.TransferPushed(rank=0, seq=3, round=0), 0.2, sender=0)
    service.depart(1, "died (silent for over 5 s)")
    service.take_released()
    back = service.handle(m.Register(rank=1, seq=1, slot=1, incarnation=7), 0.3, sender="again")
    assert back.ok and back.round == 1 and not back.over
    # the membership record (the chief's summary) names nodelay's transfer rounds
    events = service.stats()["membership"]["events"]
    assert [(e["event"], e["rank"], e["round"]) for e in events] == [("leave", 1, 1), ("join", 1, 1)]


def test_messages_round_trip_and_validate():
    for msg in (m.Notify(rank=1, seq=2, round=3, pending=4, want_stop=True), m.Merged(rank=1, seq=3, round=3),
                m.TransferPushed(rank=1, seq=4, round=3), m.TransferPushedReply(seq=4, round=3, complete=False),
                m.TransferReply(seq=2, ready=True, round=3, members=2)):
        assert m.decode(m.encode(msg)) == msg
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


def test_a_death_before_the_first_announcement_still_counts_against_min_workers():
    """The rule is made at the first transfer request; a worker found dead before any (a kill in the others'
    start-up, clean51's hang) was forgotten, so the two survivors trained on below --min-workers 3."""
    service = StateService(3, rules=("nodelay",), min_workers=3)
    for r in range(3):
        assert service.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    service.depart(1, "died (silent for over 3 s)")
    refused = service.handle(m.Notify(rank=0, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=0)
    assert not refused.ok and "rank 1 left at transfer round 0: 2 worker(s) still train" in refused.error
    assert service.stats()["nodelay"]["departures"] == [{"rank": 1, "round": 0}]


def test_a_death_before_the_first_announcement_above_min_workers_leaves_the_rule():
    service = StateService(3, rules=("nodelay",), min_workers=2)
    for r in range(3):
        assert service.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    service.depart(2, "died (silent for over 3 s)")
    assert service.handle(m.Notify(rank=0, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=0) is None
    asked = service.handle(m.Notify(rank=1, seq=2, round=0, pending=1, want_stop=False), 0.1, sender=1)
    assert asked.ready and asked.members == 2
