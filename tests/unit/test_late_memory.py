"""ESync's ``--late-memory`` (mxhet.policy.deadline's RoundBook, the State Server's READY, the wire): which
rounds add which remembered late delta, at which share, and who adds it."""
import pytest

from mxhet.control import messages as m
from mxhet.control import wire
from mxhet.errors import ConfigError, ProtocolError
from mxhet.policy.deadline import RoundBook
from tests.unit.test_round_deadline import _q, _reset, _service


# -- the pure rule ------------------------------------------------------------------------------


def test_a_late_delta_is_remembered_and_added_to_the_rounds_its_device_misses_at_one_nth():
    book = RoundBook(memory=True)
    assert book.arrive(2, base_round=0, open_round=3) == 3
    entered = book.close(3, on_time=[0, 1])
    # the round it enters: a member with its share, nothing remembered to add yet
    assert entered.late == {2: 3} and entered.remembered == {} and entered.memory_share == 0.0
    assert book.remembered() == {2: 3}
    for t in (4, 5):
        missed = book.close(t, on_time=[0, 1])
        assert missed.members == {0: 0.5, 1: 0.5}        # the members keep their shares
        assert missed.remembered == {2: 3} and missed.keeper == 0
        assert missed.memory_share == pytest.approx(1 / 3)   # N = 2 members + 1 remembered
        assert missed.memory_for(0) == ((2, 3), pytest.approx(1 / 3))
        assert missed.memory_for(1) == ((), 0.0)          # only the keeper adds it


def test_a_devices_next_late_delta_replaces_its_memory():
    book = RoundBook(memory=True)
    book.arrive(2, base_round=0, open_round=3)
    book.close(3, on_time=[0, 1])
    book.arrive(2, base_round=4, open_round=7)
    assert book.close(7, on_time=[0, 1]).remembered == {}    # a member again: its own delta, not the memory
    assert book.close(8, on_time=[0, 1]).remembered == {2: 7}


def test_every_absent_device_is_added_with_n_counting_them_all():
    book = RoundBook(memory=True)
    book.arrive(2, base_round=0, open_round=3)
    book.arrive(3, base_round=0, open_round=3)
    book.close(3, on_time=[1, 4])
    book.arrive(3, base_round=4, open_round=5)
    fifth = book.close(5, on_time=[1, 4])
    assert fifth.remembered == {2: 3} and fifth.keeper == 1
    assert fifth.memory_share == pytest.approx(1 / 4)    # members 1, 3, 4 and the absent 2
    sixth = book.close(6, on_time=[1, 4])
    assert sixth.remembered == {2: 3, 3: 5} and sixth.memory_share == pytest.approx(1 / 4)
    assert sixth.memory_for(1)[0] == (2, 3, 3, 5)


def test_a_delta_on_time_again_or_a_departure_forgets_the_memory():
    book = RoundBook(memory=True)
    for r in (2, 3):
        book.arrive(r, base_round=0, open_round=1)
    book.close(1, on_time=[0])
    book.close(2, on_time=[0, 2])   # rank 2 on time again: its own delta every round from now on
    book.forget(3)                  # rank 3 left the job
    assert book.remembered() == {}
    assert book.close(3, on_time=[0]).remembered == {}


def test_a_round_without_a_device_on_time_has_no_keeper_and_adds_nothing():
    book = RoundBook(memory=True)
    book.arrive(2, base_round=0, open_round=1)
    book.close(1, on_time=[0])
    book.arrive(3, base_round=0, open_round=2)
    alone = book.close(2, on_time=[])   # the device on time left: rank 3 closes its round alone
    assert alone.keeper == -1 and alone.memory_share == 0.0 and alone.memory_for(3) == ((), 0.0)


def test_without_the_memory_nothing_is_remembered():
    book = RoundBook()
    book.arrive(2, base_round=0, open_round=1)
    book.close(1, on_time=[0, 1])
    closed = book.close(2, on_time=[0, 1])
    assert closed.remembered == {} and closed.keeper == -1 and not closed.memory
    assert book.remembered() == {}


# -- the State Server's READY -----------------------------------------------------------------------


def test_the_late_devices_ready_says_remember_and_the_keepers_names_the_memory_later():
    svc = _service(4.0, late_memory=True)
    for r, c in {0: 0.01, 1: 0.01, 2: 1.17}.items():
        assert not _q(svc, r, 2, 0, 0, c, 0.0).ready
    for r in (0, 1):
        a = _q(svc, r, 3, 0, 1, 0.01, 0.01)
        assert a.ready and not a.remember and a.memory == () and a.memory_share == 0.0
        _reset(svc, r, 4, 1, 0.02)
    assert _q(svc, 2, 3, 0, 1, 1.17, 1.17) is None    # its delta is due in round 1
    a = _q(svc, 0, 5, 1, 1, 0.01, 1.18)
    (rank, late), = svc.released
    assert rank == 2 and late.remember and late.memory == ()
    assert a.ready and not a.remember and a.memory == ()   # round 1 holds rank 2's own delta
    svc.released.clear()
    assert _q(svc, 1, 5, 1, 1, 0.01, 1.18).ready
    for r in (0, 1):
        _reset(svc, r, 6, 2, 1.19)
    keeper, other = _q(svc, 0, 7, 2, 1, 0.01, 1.2), _q(svc, 1, 7, 2, 1, 0.01, 1.2)
    assert keeper.ready and keeper.memory == (2, 1) and keeper.memory_share == pytest.approx(1 / 3)
    assert keeper.weight == other.weight == 0.5 and keeper.target == 2
    assert other.ready and other.memory == () and other.memory_share == 0.0
    # the answer crosses the wire unchanged
    assert wire.decode(wire.encode(keeper), {m.QueryReply.TYPE: m.QueryReply}) == keeper


def test_a_departed_late_device_is_no_longer_added():
    svc = _service(4.0, late_memory=True)
    for r, c in {0: 0.01, 1: 0.01, 2: 1.17}.items():
        _q(svc, r, 2, 0, 0, c, 0.0)
    for r in (0, 1):
        _q(svc, r, 3, 0, 1, 0.01, 0.01)
        _reset(svc, r, 4, 1, 0.02)
    _q(svc, 2, 3, 0, 1, 1.17, 1.17)
    for r in (0, 1):
        assert _q(svc, r, 5, 1, 1, 0.01, 1.18).ready
        _reset(svc, r, 6, 2, 1.19)
    svc.depart(2, "died")
    assert _q(svc, 0, 7, 2, 1, 0.01, 1.2).memory == ()


def test_the_memory_needs_a_deadline():
    with pytest.raises(ConfigError, match="late_memory.*round_deadline"):
        _service(0.0, late_memory=True)


@pytest.mark.parametrize("bad", [[1], [1, -2], [1, 2.0], [True, 1], "12", [0, 1] * 513])
def test_a_memory_list_that_is_not_integer_pairs_is_refused_naming_the_field(bad):
    with pytest.raises(ProtocolError, match="memory"):
        wire.check_pairs("memory", bad)


def test_a_pair_list_decodes_as_the_tuple_it_was():
    assert wire.check_pairs("memory", [2, 7, 3, 5]) == (2, 7, 3, 5)


# -- the keeper's pull, on both engines ----------------------------------------------------------------

def _cluster_keeper(rounds_over, calls):
    """An ESync worker as the round's keeper, with a channel and a State Server client that record their calls."""
    from types import SimpleNamespace

    import mxnet as mx
    from mxhet.modes.esync import ESync

    class Channel:
        def pull(self, keys, outs):
            calls.append(("pull", list(keys)))
            for out in outs:
                out[:] = 2.0

    class Client:
        def round_wait(self, round_, timeout=None):
            calls.append(("wait", round_))
            return True

    keeper = object.__new__(ESync)
    keeper.channel, keeper.client, keeper.clock = Channel(), Client(), lambda: 0.0
    keeper.memory_keys = [[100, 101], [200, 201]]
    keeper._memory_cache, keeper._rounds_over = {}, set(rounds_over)
    keeper._sends = [mx.nd.zeros((2,)), mx.nd.zeros((3,))]
    keeper.stats = SimpleNamespace(late_memory={"pushes": 0, "pulls": 0}, sync_s=0.0)
    return keeper


def _memory_effect(rank, version):
    from types import SimpleNamespace
    return SimpleNamespace(memory=(rank, version), memory_share=0.25, members=2)


def test_a_keeper_that_was_no_member_of_the_memorys_round_waits_for_it_before_the_pull():
    calls = []
    keeper = _cluster_keeper(rounds_over={3, 4}, calls=calls)
    keeper._add_memories(_memory_effect(1, 5))   # rank 1's delta entered round 5, which this keeper missed
    assert calls == [("wait", 5), ("pull", [200, 201])]
    assert [d.asnumpy().tolist() for d in keeper._sends] == [[1.0, 1.0], [1.0, 1.0, 1.0]]   # 2 x 0.25 x 2
    calls.clear()
    keeper._add_memories(_memory_effect(1, 5))   # the same version: its copy, no pull and no wait
    assert calls == [] and keeper.stats.late_memory["pulls"] == 1


def test_a_keeper_that_was_a_member_of_the_memorys_round_pulls_at_once():
    calls = []
    keeper = _cluster_keeper(rounds_over={5}, calls=calls)
    keeper._add_memories(_memory_effect(1, 5))
    assert calls == [("pull", [200, 201])]


def test_the_simulated_keeper_waits_for_a_memory_named_before_its_push_landed():
    """The simulator's keeper, named rank 1's memory of round 5 while rank 1's push of it is still on
    its link (an older memory, of round 2, on the servers), pulls the one of round 5 once it landed."""
    from types import SimpleNamespace

    import numpy as np
    import simpy

    from mxhet.sim import program

    env = simpy.Environment()
    net = SimpleNamespace(message=lambda slot: 0.001, transfer=lambda slot, size, keys=1: 0.01)
    sim = SimpleNamespace(env=env, job=SimpleNamespace(network=net), replaying=False, memory_log=[],
                          late_memory={1: (2, [np.full(2, 2.0)])}, memory_landed={},
                          blocked=lambda dev, since, sync=False, query=False: None)
    stats = SimpleNamespace(late_memory=None, bytes_pulled=0, bytes_pushed=0)
    keeper = SimpleNamespace(slot=0, rank=0, memory_cache={}, stats=stats, weights=lambda: [np.zeros(2)])
    late = SimpleNamespace(slot=1, rank=1, stats=SimpleNamespace(late_memory=None, bytes_pushed=0))
    got = []

    def keeper_run():
        got.append((yield from program._recall(sim, keeper, 6, (1, 5))))
        got.append(env.now)

    def late_run():
        yield env.timeout(0.5)
        yield from program._remember(sim, late, 5, [np.full(2, 5.0)])

    env.process(keeper_run())
    env.process(late_run())
    env.run()
    (arrays,), when = got
    assert arrays[0].tolist() == [5.0, 5.0] and when > 0.5
    assert keeper.memory_cache[1][0] == 5 and sim.memory_log[-1] == (0, 6, "pull", 1, 5)
