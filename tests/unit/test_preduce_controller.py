"""Partial Reduce's controller: groups, slots, weights and group-frozen avoidance (no MXNet)."""
import heapq
import itertools

import pytest

from mxhet.control.preduce import (PartialReduceController, constant_weights, default_slots, dynamic_weights,
                                   min_window)

from .test_window_graph import brute_labels


def test_groups_form_fifo_as_soon_as_p_are_ready():
    ctl = PartialReduceController(5, 2, avoid_frozen=False)
    assert ctl.ready(3, 1) == []
    (g,) = ctl.ready(1, 1)
    assert g.members == (3, 1) and g.weights == (0.5, 0.5) and g.k == 1
    assert ctl.ready(0, 1) == []
    assert ctl.ready(4, 1)[0].members == (0, 4)
    assert list(ctl.queue) == []


def test_several_groups_at_once_members_distinct_no_worker_in_two_live_groups():
    ctl = PartialReduceController(6, 3, avoid_frozen=False)
    formed = []
    for r in range(6):
        formed += ctl.ready(r, 5)
    assert [g.members for g in formed] == [(0, 1, 2), (3, 4, 5)]
    assert formed[0].slot != formed[1].slot and ctl.stats()["max_concurrent"] == 2
    with pytest.raises(ValueError, match="before its group's pushes"):
        ctl.ready(0, 6)
    assert ctl.push_done(0, formed[0].id) == []
    assert ctl.push_done(1, formed[0].id) == []
    assert sorted(ctl.push_done(2, formed[0].id)) == [0, 1, 2]
    with pytest.raises(ValueError):
        ctl.push_done(3, formed[0].id)   # not its group (and that one is complete)
    ctl.ready(0, 6)
    with pytest.raises(ValueError, match="already waiting"):
        ctl.ready(0, 6)


def test_no_slot_is_reused_before_every_member_pulled():
    ctl = PartialReduceController(4, 2, avoid_frozen=False, num_slots=1)
    (a,) = ctl.ready(0, 1) or ctl.ready(1, 1)
    assert a.slot == 0
    assert ctl.ready(2, 1) == [] and ctl.ready(3, 1) == []   # two queued, no free slot
    ctl.push_done(0, a.id)
    ctl.push_done(1, a.id)
    assert ctl.ready(0, 2) == []        # rank 1 has not pulled yet (no READY since)
    (b,) = ctl.ready(1, 2)              # now it has: slot 0 is free for ranks 2 and 3
    assert b.members == (2, 3) and b.slot == 0
    ctl.push_done(2, b.id)
    ctl.push_done(3, b.id)
    assert ctl.leave(2) == []           # leaving counts as pulled; rank 3 still holds slot 0
    (c,) = ctl.ready(3, 2)
    assert c.members == (0, 1) and c.slot == 0


def test_default_slots_never_make_a_group_wait():
    ctl = PartialReduceController(5, 2, avoid_frozen=False)
    assert ctl.num_slots == default_slots(5, 2) == 4
    groups = ctl.ready(0, 1) + ctl.ready(1, 1) + ctl.ready(2, 1) + ctl.ready(3, 1)
    for g in groups:   # pushed, but nobody pulled yet
        for r in g.members:
            ctl.push_done(r, g.id)
    assert ctl.ready(4, 1) == []
    assert len(ctl.ready(0, 2)) == 1    # ranks 4 and 0: a third slot, at once


def test_dynamic_weights_worked_example():
    # k = (10, 7), α = 0.5: k̂ = (1, 4), K = 4, positions (1-α)α^(h-1)/(1-α^4) = (8, 4, 2, 1)/15;
    # positions 2 and 3 are empty and go to the stalest: β = (8/15, 7/15).
    assert dynamic_weights([10, 7], 0.5) == pytest.approx([8 / 15, 7 / 15])
    # ties split a position equally: (10, 10, 7) -> 8/15 shared by the two newest
    assert dynamic_weights([10, 10, 7], 0.5) == pytest.approx([4 / 15, 4 / 15, 7 / 15])
    # every position occupied: (3, 2, 1) -> (4, 2, 1)/7
    assert dynamic_weights([3, 2, 1], 0.5) == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    assert dynamic_weights([4, 4, 4], 0.3) == pytest.approx(constant_weights([4, 4, 4]))
    assert dynamic_weights([10, 7], 0.0) == pytest.approx([1.0, 0.0])   # α = 0: the newest model only
    for ks in ([5, 1, 3, 3], [100, 2], [7, 7, 6, 1, 0]):
        assert sum(dynamic_weights(ks, 0.7)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="alpha"):
        dynamic_weights([1, 2], 1.0)


def test_dynamic_group_carries_weights_and_everyone_takes_the_max_k():
    ctl = PartialReduceController(3, 2, dynamic=True, alpha=0.5, avoid_frozen=False)
    ctl.ready(2, 10)
    (g,) = ctl.ready(0, 7)
    assert g.members == (2, 0) and g.k == 10
    assert g.weights == pytest.approx((8 / 15, 7 / 15))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="group_size"):
        PartialReduceController(4, 5)
    with pytest.raises(ValueError, match="group_size"):
        PartialReduceController(4, 1)
    with pytest.raises(ValueError, match="window"):
        PartialReduceController(8, 2, window=min_window(8, 2) - 1)
    with pytest.raises(ValueError, match="alpha"):
        PartialReduceController(4, 2, alpha=-0.1)
    ctl = PartialReduceController(4, 2)
    with pytest.raises(ValueError, match="rank"):
        ctl.ready(4, 0)


def _connected(groups, n):
    parent = list(range(n))

    def find(r):
        while parent[r] != r:
            r = parent[r]
        return r
    for g in groups:
        for r in g[1:]:
            parent[find(r)] = find(g[0])
    return len({find(r) for r in range(n)}) == 1


def _pairs_arrive_together(avoid_frozen, groups_wanted=120, window=0):
    """Four workers of equal speed, P = 2: a group's members finish their next
    step together and are READY back to back, so FIFO pairs (0,1) and (2,3) forever.
    Returns the groups formed and the longest wait (iterations) of any READY."""
    n, p = 4, 2
    ctl = PartialReduceController(n, p, avoid_frozen=avoid_frozen, window=window)
    order = itertools.count()
    events = [(1.0, next(order), r) for r in range(n)]
    heapq.heapify(events)
    since, longest, groups = {}, 0.0, []
    k = {r: 0 for r in range(n)}
    while len(groups) < groups_wanted:
        t, _, rank = heapq.heappop(events)
        k[rank] += 1
        since[rank] = t
        for g in ctl.ready(rank, k[rank]):
            groups.append(g.members)
            for r in g.members:
                longest = max(longest, t - since[r])
                ctl.push_done(r, g.id)
            for r in g.members:  # reduce, one local step, READY again, together
                k[r] = g.k
                heapq.heappush(events, (t + 1.0, next(order), r))
    return ctl, groups, longest


def test_without_the_filter_two_pairs_stay_split():
    ctl, groups, _ = _pairs_arrive_together(avoid_frozen=False)
    assert set(groups) == {(0, 1), (2, 3)}
    assert ctl.interventions == 0
    assert not _connected(groups, 4)


@pytest.mark.parametrize("window", [0, 3])
def test_with_the_filter_every_window_is_connected_and_nobody_waits_forever(window):
    ctl, groups, longest = _pairs_arrive_together(avoid_frozen=True, window=window)
    t = ctl.window
    assert t >= min_window(4, 2)
    for start in range(t - 1, len(groups) - t + 1):   # every window after the first T-1 groups
        assert _connected(groups[start:start + t], 4), (start, groups[start:start + t])
    assert ctl.interventions > 0
    assert longest <= 1.0     # nobody waited even one iteration for a group
    counts = {r: sum(r in g for g in groups) for r in range(4)}
    assert min(counts.values()) >= len(groups) * 2 // 4 - 2    # everyone keeps reducing


def test_a_stop_waits_until_every_live_worker_has_been_in_a_group():
    ctl = PartialReduceController(4, 2, avoid_frozen=False)
    ctl.ready(0, 1)
    (first,) = ctl.ready(1, 1)
    ctl.push_done(0, first.id)
    ctl.push_done(1, first.id)
    assert ctl.want_stop() == [] and not ctl.stopping     # ranks 2 and 3 never reduced
    assert ctl.ready(2, 1) == []
    (g,) = ctl.ready(3, 1)
    assert ctl.check_stop() == [] and ctl.stopping        # now everyone has; nobody was waiting
    for r in g.members:
        ctl.push_done(r, g.id)
    assert ctl.ready(0, 2) == []                          # no group forms after the stop


def brute_choice(ctl):
    """The group filter's rule with the sync-graph rebuilt from the last T-1
    groups on every call (what the incremental graph must reproduce)."""
    queue = list(ctl.queue)
    fifo = queue[:ctl.group_size]
    previous = [members for _, members in ctl.recent]
    if len(previous) < ctl.window - 1:
        return fifo

    if len(set(brute_labels(ctl.live, previous + [fifo]).values())) == 1:
        return fifo
    label = brute_labels(ctl.live, previous)
    group, seen = [queue[0]], {label[queue[0]]}
    for r in queue[1:]:
        if len(group) < ctl.group_size and label[r] not in seen:
            group.append(r)
            seen.add(label[r])
    if len(seen) == 1:
        return None
    group += [r for r in queue[1:] if r not in group][:ctl.group_size - len(group)]
    return group


@pytest.mark.parametrize("n, p, seed", [(6, 2, 0), (9, 3, 1), (12, 2, 2), (16, 4, 3), (20, 2, 4)])
def test_the_incremental_sync_graph_decides_as_a_rebuilt_one(n, p, seed):
    """Random arrivals in which a clique of fast workers keeps meeting (the
    freeze the filter exists for), with a departure: before every READY the
    next group the controller would form is the one the rule computes over a
    sync-graph rebuilt from scratch."""
    import random
    rng = random.Random(seed)
    ctl = PartialReduceController(n, p, dynamic=True, window=min_window(n, p))
    fast = list(range(p + 1))
    pending, interventions, formed = [], 0, 0
    waiting = set(range(n))
    for step in range(40 * n):
        if step == 20 * n:
            gone = n - 1
            if gone in waiting:
                waiting.discard(gone)
            ctl.leave(gone)
        for group in pending:
            for r in group.members:
                ctl.push_done(r, group.id)
            waiting.update(group.members)
        pending = []
        choices = sorted(waiting - set(ctl.queue) - {n - 1} if step >= 20 * n else waiting - set(ctl.queue))
        if not choices:
            continue
        fast_ready = [r for r in choices if r in fast]
        r = rng.choice(fast_ready) if fast_ready and rng.random() < 0.8 else rng.choice(choices)
        queued = list(ctl.queue) + [r]
        before = dict(ctl.queue)
        ctl.queue = dict.fromkeys(queued)
        expected = brute_choice(ctl) if len(queued) >= p else None
        ctl.queue = before
        groups = ctl.ready(r, step)
        waiting.discard(r)
        if expected is None:
            assert groups == []
        else:
            assert groups and list(groups[0].members) == expected
            interventions += groups[0].intervened
        formed += len(groups)
        for group in groups:
            waiting.difference_update(group.members)
        pending = groups
    assert formed > 5 * n and interventions > 0


def _reduced(ctl, group):
    for r in group.members:
        ctl.push_done(r, group.id)


def test_a_departed_worker_is_never_grouped_and_fewer_than_p_left_form_groups_of_all_of_them():
    ctl = PartialReduceController(3, 2, avoid_frozen=False)
    assert ctl.leave(0) == []
    assert ctl.ready(1, 3) == []
    (g,) = ctl.ready(2, 5)
    assert g.members == (1, 2) and g.fill == 0 and g.k == 5   # P still fit: a full group
    _reduced(ctl, g)
    assert ctl.leave(1) == []
    (alone,) = ctl.ready(2, 6)                # fewer than P live: a group of the one left
    assert alone.members == (2,) and alone.weights == (1.0,) and alone.k == 6
    assert alone.fill == 1 and alone.fill_of(2) == 1   # its filler push makes the slot count P
    _reduced(ctl, alone)
    with pytest.raises(ValueError, match="has left"):
        ctl.ready(1, 7)


def test_a_departure_releases_the_workers_that_waited_for_a_full_group():
    ctl = PartialReduceController(4, 3, dynamic=True, avoid_frozen=False)
    ctl.leave(0)
    assert ctl.ready(1, 2) == [] and ctl.ready(2, 4) == []   # 3 live: still waiting for a third
    (g,) = ctl.leave(3)
    assert g.members == (1, 2) and g.fill == 1
    assert [g.fill_of(r) for r in g.members] == [1, 0]        # the first member fills alone
    assert abs(sum(g.weights) - 1.0) < 1e-12 and g.k == 4


def test_a_departure_releases_a_head_held_for_the_departed_component():
    # Pairs (0, 1) and (2, 3) keep meeting: the filter holds a head until the other pair's
    # worker is queued; once that pair has left, the head must not wait for it.
    ctl = PartialReduceController(4, 2, avoid_frozen=True, window=3)
    for pair in ((0, 1), (2, 3)):
        ctl.ready(pair[0], 1)
        _reduced(ctl, ctl.ready(pair[1], 1)[0])
    ctl.ready(0, 2)
    assert ctl.ready(1, 2) == [] and ctl.holds == 1      # (0, 1) again would not connect the window
    ctl.leave(2)
    (g,) = ctl.leave(3)
    assert g.members == (0, 1)
