"""The checks the elastic integration tests share (tests/integration/jobs.py) fail on the outcomes they
exist to catch: a dead member's push in a round's model move never or twice, members that pulled
different models, workers on different models, a missing digest."""
import numpy as np
import pytest

from tests.integration.jobs import assert_one_model, assert_round_moved, ranks_logged

BEFORE = [np.array([1.0, 2.0]), np.array([[0.5]])]


def _dump(path, deltas, after, before=BEFORE):
    """A ``--dump-rounds`` file: the member's start model, the delta it pushed and the model it pulled."""
    arrays = {}
    for i, (b, d, a) in enumerate(zip(before, deltas, after)):
        arrays.update({"before_%d" % i: b, "delta_%d" % i: d, "after_%d" % i: a})
    np.savez(path, **arrays)
    return np.load(path)


def _round(tmp_path, victim_times, members=3):
    """Two survivors' dumps of a round whose move holds their deltas / members and ``victim_times`` times
    the victim's push; returns ``(dumps, pushed)``."""
    deltas = [[np.array([0.3, -0.6]), np.array([[0.9]])], [np.array([0.6, 0.3]), np.array([[-0.3]])]]
    pushed = [np.array([0.1, 0.2]), np.array([[0.0]])]   # the second key the victim left as it was
    np.savez(tmp_path / "push.npz", *pushed)
    after = [b + sum(d[i] for d in deltas) / members + victim_times * pushed[i] for i, b in enumerate(BEFORE)]
    return [_dump(tmp_path / ("s%d.npz" % s), deltas[s], after) for s in range(2)], np.load(tmp_path / "push.npz")


def test_a_round_with_the_dead_members_push_once_passes(tmp_path):
    dumps, pushed = _round(tmp_path, 1)
    assert_round_moved(dumps, 3, pushed)


@pytest.mark.parametrize("times", [0, 2])
def test_a_round_without_the_dead_members_push_or_with_it_twice_fails(tmp_path, times):
    dumps, pushed = _round(tmp_path, times)
    with pytest.raises(AssertionError):
        assert_round_moved(dumps, 3, pushed)


def test_a_round_of_the_survivors_alone_passes_and_fails_with_the_wrong_member_count(tmp_path):
    dumps, _ = _round(tmp_path, 0, members=2)
    assert_round_moved(dumps, 2)
    with pytest.raises(AssertionError):
        assert_round_moved(dumps, 3)


def test_members_that_started_from_or_pulled_different_models_fail(tmp_path):
    dumps, pushed = _round(tmp_path, 1)
    other = [a + 1.0 for a in BEFORE]
    moved = [dumps[1]["after_%d" % i] for i in range(2)]
    deltas = [dumps[1]["delta_%d" % i] for i in range(2)]
    for odd in (_dump(tmp_path / "odd-start.npz", deltas, moved, before=other),
                _dump(tmp_path / "odd-pull.npz", deltas, other)):
        with pytest.raises(AssertionError):
            assert_round_moved([dumps[0], odd], 3, pushed)


def test_one_model_needs_equal_digests_and_no_empty_one():
    assert_one_model([{"final_model_sha256": "ab"}, {"final_model_sha256": "ab"}])
    assert_one_model([{"digest": "ab"}], key="digest")
    for digests in (["ab", "cd"], ["", ""]):
        with pytest.raises(AssertionError):
            assert_one_model([{"final_model_sha256": d} for d in digests])


def test_the_ranks_are_read_from_the_workers_log_lines_in_order():
    log = "x slot 2 is PS-LITE rank 0\nslot 0 is PS-LITE rank 1 y\nslot 2 is PS-LITE rank 12\n"
    assert ranks_logged(log) == [(2, 0), (0, 1), (2, 12)]
