"""Partial Reduce under ``--elastic``: the controller's rules for a death and a return, the State Server's
rule around them (answers, --min-workers), and the servers' slot sums when a member dies mid-push."""
import mxnet as mx
import numpy as np

from kvstore_ext import keys as ps_keys
from kvstore_ext.updaters import PartialReduceSum
from mxhet.control import messages as m
from mxhet.control.preduce import PartialReduceController, default_slots
from mxhet.control.server import StateService
from mxhet.sim.engine import Servers

JOIN = dict(group_size=2, dynamic=False, alpha=0.5, avoid_frozen=False, window=0)


def _pair(ctl, a, b, k=1):
    assert ctl.ready(a, k) == []
    (group,) = ctl.ready(b, k)
    return group


def test_a_death_before_its_push_releases_the_group_and_retires_its_slot():
    ctl = PartialReduceController(4, 2, avoid_frozen=False, spare_slots=4)
    assert ctl.num_slots == default_slots(4, 2) + 4
    g = _pair(ctl, 0, 1)
    assert ctl.push_done(0, g.id) == []
    formed, released = ctl.depart(1)
    assert formed == [] and released == g and ctl.was_released(g.id)
    assert g.slot in ctl.retired and g.slot not in ctl.free_slots and g.slot not in ctl.slot_holders
    # the survivor holds nothing and pushes nothing more into it: its next READY queues it again
    assert 0 not in ctl.pushing and 0 not in ctl.holding
    assert ctl.ready(0, 2) == []
    (h,) = ctl.ready(2, 2)
    assert h.members == (0, 2) and h.slot != g.slot
    # every later group avoids the retired slot (the lowest, which the free list would give first)
    assert g.slot == 0
    slots = set()
    for k in range(3, 30):
        for r in h.members:
            ctl.push_done(r, h.id)
        assert ctl.ready(0, k) == []
        (h,) = ctl.ready(2, k)
        slots.add(h.slot)
    assert g.slot not in slots
    record = ctl.stats()
    assert record["released"] == [g.id] and record["retired_slots"] == [g.slot]
    assert record["deaths"] == [{"rank": 1, "group": g.id, "released": True}]


def test_a_death_after_its_push_keeps_the_group_and_the_others_pull_its_share_once():
    ctl = PartialReduceController(3, 2, avoid_frozen=False, spare_slots=3)
    g = _pair(ctl, 0, 1)
    assert ctl.push_done(1, g.id) == []
    formed, released = ctl.depart(1)
    assert released is None and not ctl.was_released(g.id) and not ctl.retired
    # the group completes with the survivor's push: its members are named, the dead one among them
    assert sorted(ctl.push_done(0, g.id)) == [0, 1]
    assert ctl.complete[g.slot] == g
    assert ctl.stats()["deaths"] == [{"rank": 1, "group": g.id, "released": False}]
    # the dead member's hold is gone: once the survivor pulled (its next READY) the slot is free again
    ctl.ready(0, 2)
    assert g.slot in ctl.free_slots


def test_groups_have_min_p_live_members_and_the_stop_counts_the_live():
    ctl = PartialReduceController(3, 3, avoid_frozen=False, spare_slots=3)
    assert ctl.ready(0, 1) == [] and ctl.ready(2, 1) == []
    formed, released = ctl.depart(1)   # died while the others waited for it
    assert released is None
    (g,) = formed
    assert g.members == (0, 2) and g.fill == 1 and g.weights == (0.5, 0.5)
    # a stop wish needs only the live workers to have been in a group
    ctl.push_done(0, g.id)
    ctl.push_done(2, g.id)
    assert sorted(ctl.want_stop()) == [] and ctl.stopping


def test_two_ranks_dead_while_computing_leave_groups_of_the_two_live_ones_recorded_as_small():
    # 4 workers, P = 3: ranks 1 and 2 die in no group (their last group's pushes all in, no READY since);
    # the two ready ones wait for a third until the second death leaves only them, then form a group of 2
    ctl = PartialReduceController(4, 3, avoid_frozen=False, spare_slots=4)
    assert ctl.ready(0, 1) == [] and ctl.ready(1, 1) == []
    (g,) = ctl.ready(3, 1)
    for r in g.members:
        ctl.push_done(r, g.id)
    assert ctl.ready(0, 2) == [] and ctl.ready(3, 2) == []
    assert ctl.depart(2) == ([], None)      # 3 live: still a group of P to wait for
    (formed,), released = ctl.depart(1)
    assert released is None and formed.members == (0, 3) and formed.fill == 1
    record = ctl.stats()
    assert record["deaths"] == [{"rank": 2, "group": None, "released": False},
                                {"rank": 1, "group": None, "released": False}]
    # the record names each group of fewer than P, and only those
    assert record["small_groups"] == [{"group": formed.id, "ranks": [0, 3]}] and record["released"] == []


def test_a_dead_rank_that_comes_back_takes_the_latest_complete_groups_slot_held_for_it():
    ctl = PartialReduceController(3, 2, avoid_frozen=False, spare_slots=3)
    first = _pair(ctl, 0, 1, k=4)
    for r in (0, 1):
        ctl.push_done(r, first.id)
    ctl.depart(2)
    assert ctl.ready(0, 5) == []          # rank 0 pulled; rank 1 still holds the slot
    slot = ctl.join(2)
    assert slot == first.slot and ctl.model_k(slot) == 4 and ctl.slot_holders[slot] == {1, 2}
    (second,) = ctl.ready(1, 5)           # rank 1 pulled too: the slot stays held for rank 2
    assert second.slot != first.slot and first.slot not in ctl.free_slots
    assert ctl.ready(2, 4) == []          # rank 2's READY: it pulled, the slot is free again
    assert first.slot in ctl.free_slots and 2 in ctl.live
    assert ctl.stats()["joins"] == [{"rank": 2, "model_slot": first.slot}]
    assert ctl.join(0) is None            # a live rank is left as it is


def test_a_returning_rank_takes_a_free_slot_with_a_complete_sum_off_the_free_list():
    ctl = PartialReduceController(4, 2, avoid_frozen=False, spare_slots=4)
    first = _pair(ctl, 0, 1, k=3)
    for r in (0, 1):
        ctl.push_done(r, first.id)
    assert ctl.ready(0, 4) == []
    ctl.depart(1)                         # its hold goes: the slot is free and still holds the sum
    assert first.slot in ctl.free_slots
    assert ctl.join(1) == first.slot and first.slot not in ctl.free_slots
    (g,) = ctl.ready(2, 1)
    assert g.members == (0, 2) and g.slot != first.slot


def test_the_newest_complete_sum_is_not_overwritten_while_another_slot_is_free():
    # two survivors grouping again and again would take the lowest free slot -- the one they just pulled
    # from -- and leave no complete sum for a rank that comes back while their next group reduces
    ctl = PartialReduceController(3, 2, avoid_frozen=False, spare_slots=3)
    ctl.depart(2)
    g = _pair(ctl, 0, 1, k=1)
    for k in range(2, 12):
        for r in g.members:
            ctl.push_done(r, g.id)
        assert ctl.ready(0, k) == []
        (h,) = ctl.ready(1, k)
        assert h.slot != g.slot and ctl.complete[g.slot] == g   # the newest sum stays readable
        g = h
    assert ctl.join(2) is not None
    # without spare slots (not --elastic) slots are taken lowest first, as before
    plain = PartialReduceController(2, 2, avoid_frozen=False)
    g = _pair(plain, 0, 1)
    for r in g.members:
        plain.push_done(r, g.id)
    plain.ready(0, 2)
    (h,) = plain.ready(1, 2)
    assert h.slot == g.slot


def test_no_group_completed_a_returning_rank_keeps_its_model():
    ctl = PartialReduceController(3, 2, avoid_frozen=False, spare_slots=3)
    ctl.depart(2)
    assert ctl.join(2) is None and 2 in ctl.live


def test_the_servers_slot_sum_after_a_partial_push_is_never_read_and_the_next_group_is_exact():
    # 3 workers, P = 2, one key per slot; rank 1 dies having pushed half of its model (key 0 of 2)
    n, p, params = 3, 2, 2
    keys = [ps_keys.preduce_keys(s, params) for s in range(default_slots(n, p) + n)]
    store = Servers({k: mx.nd.zeros((4,)) for ks in keys for k in ks}, PartialReduceSum(n, p))
    x = {r: [mx.nd.full((4,), 10.0 * r + i + 1) for i in range(params)] for r in range(n)}
    ctl = PartialReduceController(n, p, avoid_frozen=False, spare_slots=n)
    g = _pair(ctl, 0, 1)
    for key, value in zip(keys[g.slot], x[0]):
        store.apply(key, value * 0.5)
    ctl.push_done(0, g.id)
    store.apply(keys[g.slot][0], x[1][0] * 0.5)   # killed mid-push
    _, released = ctl.depart(1)
    assert released == g   # the survivor keeps x[0]; the slot is retired
    ctl.ready(0, 2)
    (h,) = ctl.ready(2, 2)
    assert h.slot != g.slot
    for r in h.members:
        for key, value in zip(keys[h.slot], x[r]):
            store.apply(key, value * 0.5)
        ctl.push_done(r, h.id)
    result = store.snapshot(keys[h.slot])
    for i in range(params):
        np.testing.assert_array_equal(result[i].asnumpy(), ((x[0][i] + x[2][i]) * 0.5).asnumpy())


class Worker:
    def __init__(self, service, rank):
        self.service, self.rank, self.seq = service, rank, 0

    def send(self, cls, **fields):
        self.seq += 1
        return self.service.handle(cls(rank=self.rank, seq=self.seq, incarnation=1, **fields), 0.0, sender=self.rank)


def _job(n=3, min_workers=1):
    service = StateService(n, rules=("preduce", "membership"), min_workers=min_workers)
    workers = [Worker(service, r) for r in range(n)]
    for w in workers:
        assert w.send(m.Register, slot=w.rank).ok
        assert type(w.send(m.ReduceJoin, **JOIN, spare_slots=n)) is m.JoinedReply
    return service, workers


def test_the_state_server_tells_a_released_groups_members_and_groups_them_again():
    service, (w0, w1, w2) = _job()
    assert w0.send(m.ReduceReady, k=1, want_stop=False) is None
    g = w1.send(m.ReduceReady, k=1, want_stop=False)
    service.take_released()
    assert w0.send(m.ReducePushed, group=g.round) is None          # waits for rank 1's push
    service.depart(1, "died (silent for over 3 s)")
    [(rank, answer)] = service.take_released()
    assert rank == 0 and type(answer) is m.PushedReply and answer.released
    assert w0.send(m.ReducePushed, group=g.round).released        # a late PUSHED of the group: released too
    assert w0.send(m.ReduceReady, k=2, want_stop=False) is None
    h = w2.send(m.ReduceReady, k=2, want_stop=False)
    assert h.group_slot != g.group_slot
    assert service.stats()["preduce"]["released"] == [g.round]


def test_a_death_below_min_workers_refuses_the_waiting_and_every_later_request():
    service, (w0, w1, w2) = _job(min_workers=3)
    assert w0.send(m.ReduceReady, k=1, want_stop=False) is None
    service.depart(2, "died (silent for over 3 s)")
    [(rank, answer)] = service.take_released()
    assert rank == 0 and not answer.ok and answer.code == "too_few_workers"
    assert "fewer than the job's minimum of 3" in answer.error
    later = w1.send(m.ReduceReady, k=1, want_stop=False)
    assert not later.ok and later.code == "too_few_workers"


def test_a_restarted_rank_registers_and_its_join_names_the_model_slot():
    service, (w0, w1, w2) = _job()
    assert w0.send(m.ReduceReady, k=1, want_stop=False) is None
    g = w1.send(m.ReduceReady, k=5, want_stop=False)
    service.take_released()
    w0.send(m.ReducePushed, group=g.round)
    assert w1.send(m.ReducePushed, group=g.round).ok
    service.depart(2, "died (silent for over 3 s)")
    back = Worker(service, 2)
    back.seq = 100
    back.service.handle(m.Register(rank=2, seq=101, incarnation=2, slot=2), 9.0, sender="new")
    back.send = lambda cls, **f: service.handle(cls(rank=2, seq=200, incarnation=2, **f), 9.0, sender="new")
    joined = back.send(m.ReduceJoin, **JOIN, spare_slots=3)
    assert joined.model_slot == g.group_slot and joined.k == 5
    # the others join normally: no model slot
    assert w0.send(m.ReduceJoin, **JOIN, spare_slots=3).model_slot == -1


def test_leaving_under_elastic_counts_the_final_models():
    service, (w0, w1, w2) = _job()
    service.depart(2, "died (silent for over 3 s)")
    assert w0.send(m.ReduceLeave, final=True).finals == 1
    assert w1.send(m.ReduceLeave, final=True).finals == 2
    assert w0.send(m.ReduceLeave, final=False).finals == 2


def test_the_simulator_a_device_that_leaves_and_joins_again_is_grouped_again_and_ends_on_the_same_model(tmp_path):
    from tests.unit.test_sim import _sim
    summary, workers = _sim(tmp_path, "rejoin", "-n", "3", "--sync", "preduce", "--group-size", "2",
                            "--base-iter", "0.05", "--time-budget", "1.5", "--slowdown", "1,1,1",
                            "--events", "2:leave@0.3,2:join@0.8")
    elastic = summary["elastic"]
    assert 0.3 <= elastic["left_at_s"]["2"] < 0.8 <= elastic["joined_at_s"]["2"] < 0.9
    [join] = summary["sim"]["preduce"]["joins"]
    assert join["rank"] == 2 and join["model_slot"] is not None   # it took a complete group's model
    back = workers[2]
    assert back["rejoined_at_round"] > 0 and back["rounds"] >= 2   # grouped again (counted from its join)
    assert workers[0]["rejoined_at_round"] is None
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1


def test_both_members_of_a_group_die_one_release_and_the_others_go_on():
    ctl = PartialReduceController(4, 2, avoid_frozen=False, spare_slots=4)
    g = _pair(ctl, 0, 1)
    _, released = ctl.depart(0)
    assert released == g
    formed, again = ctl.depart(1)        # its group is already released: nothing more to settle
    assert again is None and formed == [] and ctl.retired == {g.slot}
    assert [d["released"] for d in ctl.stats()["deaths"]] == [True, False]
    assert ctl.ready(2, 1) == []
    (h,) = ctl.ready(3, 1)
    assert h.members == (2, 3) and h.fill == 0 and h.slot != g.slot


def test_a_rank_dead_before_the_controller_exists_is_never_waited_for():
    service = StateService(2, rules=("preduce", "membership"))
    w0, w1 = Worker(service, 0), Worker(service, 1)
    for w in (w0, w1):
        assert w.send(m.Register, slot=w.rank).ok
    service.depart(1, "died (silent for over 3 s)")   # in its start-up, before any REDUCE_JOIN
    assert w0.send(m.ReduceJoin, **JOIN, spare_slots=2).ok
    alone = w0.send(m.ReduceReady, k=1, want_stop=False)   # a group of the one live worker, at once
    assert alone.ok and alone.round == 0 and alone.target == 1


def test_a_death_before_any_reduce_join_still_counts_against_min_workers():
    """The controller is made at the first REDUCE_JOIN; a worker found dead before it (in the others'
    start-up) was grouped out but never counted, so the survivors went on below --min-workers."""
    service = StateService(3, rules=("preduce", "membership"), min_workers=3)
    workers = [Worker(service, r) for r in range(3)]
    for w in workers:
        assert w.send(m.Register, slot=w.rank).ok
    service.depart(2, "died (silent for over 3 s)")
    joined = workers[0].send(m.ReduceJoin, **JOIN, spare_slots=3)
    assert not joined.ok and joined.code == "too_few_workers"
    assert "worker rank 2 died (silent for over 3 s); 2 worker(s) still train" in joined.error
