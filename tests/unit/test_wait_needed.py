"""ESync's ``--wait-needed R`` (mxhet.policy.needed, the State Server's rule, the wire, the worker program): a device
whose smoothed loss on the global model is above R x the lowest device's is waited for like a device on time."""
import orjson
import pytest

from mxhet.control import messages as m
from mxhet.errors import ConfigError, ProtocolError
from mxhet.policy.needed import LOSS_SMOOTHING, LossBook, check_loss, check_wait_needed
from mxhet.protocol import Session, effects as e, programs
from tests.unit.test_protocol import _EsyncScript, _esync_opts, _esync_stats, _run
from tests.unit.test_round_deadline import _reset, _service


# -- the pure rule ------------------------------------------------------------------------------


def test_a_device_whose_smoothed_loss_is_above_r_times_the_lowest_is_needed():
    book = LossBook(2.0)
    for rank, loss in {0: 1.0, 1: 1.2, 2: 3.0}.items():
        book.observe(rank, loss)
    assert book.needed([0, 1, 2]) == {2}
    book.observe(2, 1.0)   # the average halves the distance to the newest loss: 2.0, not above 2 x 1.0
    assert book.average[2] == pytest.approx((1 - LOSS_SMOOTHING) * 3.0 + LOSS_SMOOTHING * 1.0) == 2.0
    assert book.needed([0, 1, 2]) == frozenset()
    book.observe(0, 0.5)   # the lowest falls to 0.75: 2.0 and 1.2 are above 1.5 ... only 2.0 is
    assert book.needed([0, 1, 2]) == {2}


def test_only_present_devices_with_a_loss_set_the_lowest_and_fewer_than_two_need_nobody():
    book = LossBook(2.0)
    book.observe(0, 0.1)
    book.observe(1, 1.0)
    assert book.needed([0, 1]) == {1}
    assert book.needed([1, 2]) == frozenset()    # rank 0 absent, rank 2 has reported nothing: one loss known
    book.observe(2, 0.4)
    assert book.needed([1, 2]) == {1}            # 1.0 > 2 x 0.4, measured against the present ranks only
    book.forget(1)
    assert 1 not in book.average and book.needed([0, 1, 2]) == {2}
    book.observe(1, 5.0)                         # back after leaving: a new average, not the old one's half
    assert book.average[1] == 5.0


@pytest.mark.parametrize("bad", [0.5, -1, float("nan"), float("inf"), "2", True])
def test_a_factor_that_is_not_off_or_at_least_one_is_refused(bad):
    with pytest.raises(ConfigError, match="wait_needed"):
        check_wait_needed(bad, 4.0)


def test_the_factor_needs_a_deadline_and_zero_is_off():
    assert check_wait_needed(0, 0.0) == 0.0 and check_wait_needed(2, 4.0) == 2.0
    with pytest.raises(ConfigError, match="wait_needed.*round_deadline"):
        check_wait_needed(2.0, 0.0)
    with pytest.raises(ConfigError, match="wait_needed.*round_deadline"):
        _service(0.0, wait_needed=2.0)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), None])
def test_a_loss_the_ratio_cannot_compare_is_refused(bad):
    with pytest.raises(ConfigError, match="loss >= 0"):
        check_loss(bad)


# -- the State Server ---------------------------------------------------------------------------------


def _q(svc, rank, seq, round_, k, c, now, loss=m.NO_LOSS):
    return svc.handle(m.Query(rank=rank, seq=seq, round=round_, k=k, c=c, since_finish=0.0, loss=loss), now,
                      sender=rank)


def _first_late_round(svc):
    """The paper's 117x profile on 3 devices under D = 4: ranks 0 and 1 close round 0 without rank 2
    (losses 1.0 on the global model), rank 2's first delta (loss ``3.0``) enters round 1; all three pull
    round 1's model."""
    for r, c in {0: 0.01, 1: 0.01, 2: 1.17}.items():
        assert not _q(svc, r, 2, 0, 0, c, 0.0).ready
    for r in (0, 1):
        assert _q(svc, r, 3, 0, 1, 0.01, 0.01, loss=1.0).ready
        _reset(svc, r, 4, 1, 0.02)
    assert _q(svc, 2, 3, 0, 1, 1.17, 1.17, loss=3.0) is None    # late: its delta is due in round 1
    for r in (0, 1):
        assert _q(svc, r, 5, 1, 1, 0.01, 1.18).ready
    (rank, late), = svc.released
    assert rank == 2 and late.ready and late.round == 1
    svc.released.clear()
    for r in (0, 1, 2):
        _reset(svc, r, 6, 2, 1.19)


def test_a_late_device_whose_loss_is_high_is_waited_for_until_it_falls_within_r():
    svc = _service(4.0, wait_needed=2.0)
    _first_late_round(svc)
    # round 2: rank 2's average 3.0 is above 2 x 1.0, so the rounds wait for it as for a device on time
    wait = _q(svc, 0, 7, 2, 1, 0.01, 1.2, loss=1.0)
    assert not wait.ready and wait.slowest == 2
    assert not _q(svc, 1, 7, 2, 1, 0.01, 1.2, loss=1.0).ready
    slow = _q(svc, 2, 7, 2, 1, 1.17, 2.36, loss=2.6)     # average 2.8: still needed, READY as the slowest
    assert slow.ready and slow.target == 3 and slow.weight == pytest.approx(1 / 3)
    fast = _q(svc, 0, 8, 2, 2, 0.01, 2.37)
    assert fast.ready and fast.target == 3 and fast.weight == pytest.approx(1 / 3)   # no staleness discount
    rounds = {r["round"]: r for r in svc.rule("esync").stats()}
    assert rounds[2]["needed"] == [2] and rounds[2]["late"] == {} and rounds[1]["needed"] == []
    assert _q(svc, 1, 8, 2, 2, 0.01, 2.37).ready
    for r in (0, 1, 2):
        _reset(svc, r, 9, 3, 2.38)
    # round 3: the global model now serves rank 2's data (average (2.8 + 0.6) / 2 = 1.7 <= 2.0): late again
    assert _q(svc, 2, 10, 3, 1, 1.17, 3.55, loss=0.6) is None
    assert _q(svc, 0, 10, 3, 1, 0.01, 3.56, loss=1.0).ready
    (rank, late), = svc.released
    assert rank == 2 and late.round == 3


def test_without_the_rule_the_same_losses_leave_the_late_device_late():
    svc = _service(4.0)
    _first_late_round(svc)
    assert _q(svc, 0, 7, 2, 1, 0.01, 1.2, loss=1.0).ready
    assert "needed" not in svc.rule("esync").stats()[0]


def test_a_departed_device_is_no_longer_needed():
    svc = _service(4.0, wait_needed=2.0)
    _first_late_round(svc)
    svc.depart(2, "died")
    assert _q(svc, 0, 7, 2, 1, 0.01, 1.2, loss=1.0).ready
    assert 2 not in svc.rule("esync").losses.average


# -- the wire ---------------------------------------------------------------------------------------------


def _query_body(**changes):
    body = orjson.loads(m.encode(m.Query(rank=1, seq=2, round=3, k=1, c=0.5, since_finish=0.0, loss=0.25)))
    body.update(changes)
    return orjson.dumps(body)


def test_a_query_carries_its_loss_and_an_older_workers_query_none():
    assert m.decode(_query_body()).loss == 0.25
    assert m.decode(_query_body(loss=1)).loss == 1        # an integer takes the validated path
    old = orjson.loads(_query_body(v=4))
    del old["loss"]
    assert m.decode(orjson.dumps(old)).loss == m.NO_LOSS
    with pytest.raises(ProtocolError, match="missing fields \\['loss'\\]"):
        m.decode(orjson.dumps(dict(old, v=m.VERSION)))


@pytest.mark.parametrize("bad", [-0.5, -2, True, "0.3", None])
def test_a_loss_that_is_not_a_finite_number_at_least_zero_is_refused_naming_the_field(bad):
    with pytest.raises(ProtocolError, match="'loss'"):
        m.decode(_query_body(loss=bad))


# -- the worker program (both engines run it) ---------------------------------------------------------------


def test_the_first_iteration_from_each_global_model_reads_its_loss_and_the_next_query_carries_it():
    class Losses(_EsyncScript):
        def __call__(self, effect):
            if isinstance(effect, e.Iterate) and not effect.test:
                super().__call__(effect)
                return e.Iterated(0.1, loss=0.7 if effect.read_loss else None)
            return super().__call__(effect)

    stats = _esync_stats()
    trace = _run(programs.esync(_esync_opts(round_deadline=4.0, wait_needed=2.0), stats),
                 Losses(stats, ready_at=3, rounds=2))
    steps = [a for a, _ in trace if isinstance(a, e.Iterate) and not a.test]
    # three iterations a round: the first of each reads the loss (the initial model's, then each pulled one)
    assert [a.read_loss for a in steps] == [True, False, False, True, False, False, True]
    queries = [(q.round, q.k, q.loss) for q, _ in trace if isinstance(q, e.StateQuery)]
    assert queries == [(0, 0, None), (0, 1, 0.7), (0, 2, None), (0, 3, None), (1, 1, 0.7), (1, 2, None),
                       (1, 3, None)]
    plain = _run(programs.esync(_esync_opts(round_deadline=4.0), _esync_stats()),
                 _EsyncScript(_esync_stats(), ready_at=3))
    assert not any(a.read_loss for a, _ in plain if isinstance(a, e.Iterate))
    assert all(q.loss is None for q, _ in plain if isinstance(q, e.StateQuery))


def test_the_program_refuses_the_rule_without_a_deadline():
    with pytest.raises(ConfigError, match="wait_needed.*round_deadline"):
        Session(programs.esync(_esync_opts(wait_needed=2.0), _esync_stats())).advance()
    with pytest.raises(ConfigError, match="wait_needed"):
        _esync_opts(round_deadline=4.0, wait_needed=0.5)


# -- the cluster's worker: the loss the training loop observed -----------------------------------------------


def test_the_cluster_worker_sends_the_observed_loss_and_tells_a_loop_that_reports_none_how():
    import types

    import mxnet as mx

    from mxhet.modes.esync import ESync
    asked, plain = e.Iterate(local_step=True, read_loss=True), e.Iterate(local_step=True)
    worker = types.SimpleNamespace(_batch_loss=mx.nd.array([0.5]))
    assert ESync._read_loss(worker, asked) == 0.5 and worker._batch_loss is None   # used once
    worker._batch_loss = 0.25
    assert ESync._read_loss(worker, plain) is None and worker._batch_loss is None  # not asked: dropped
    with pytest.raises(ConfigError, match="observe_loss.*before every trainer.step"):
        ESync._read_loss(worker, asked)
    worker._batch_loss = float("nan")   # the non-finite guard's business: no measure this time
    assert ESync._read_loss(worker, asked) is None
    worker._batch_loss = -0.3
    with pytest.raises(ConfigError, match="loss >= 0"):
        ESync._read_loss(worker, asked)
