"""The rule that sizes each context's part of a batch by its speed (pure)."""
import pytest

from mxhet.policy.batch_split import split_sizes


@pytest.mark.parametrize("total, speeds, expected", [
    (64, [1.0, 1.0], [32, 32]),            # equal speeds: split_and_load's equal parts
    (64, [3.0, 1.0], [48, 16]),            # a context 3x faster takes 3x the samples
    (10, [1, 1, 1], [4, 3, 3]),            # the remainder goes to the earlier context on a tie
    (7, [2.0, 1.0], [5, 2]),               # 4.67 and 2.33: the larger remainder rounds up
    (100, [50.0, 30.0, 20.0], [50, 30, 20]),
    (3, [100.0, 1.0, 1.0], [1, 1, 1]),     # every context computes a gradient: at least one sample
    (5, [1000.0, 1.0, 1.0, 1.0], [2, 1, 1, 1]),
    (9, [7.0], [9]),
])
def test_parts_are_proportional_to_speed(total, speeds, expected):
    assert split_sizes(total, speeds) == expected


@pytest.mark.parametrize("total", [6, 17, 64, 255])
def test_parts_sum_to_the_batch_and_stay_within_one_sample_of_their_share(total):
    speeds = [5.0, 0.7, 2.2, 1.1]
    sizes = split_sizes(total, speeds)
    assert sum(sizes) == total and min(sizes) >= 1
    for size, s in zip(sizes, speeds):
        share = total * s / sum(speeds)
        assert abs(size - share) < 1 or (size == 1 and share < 1), (sizes, share)


@pytest.mark.parametrize("total, speeds", [
    (8, []), (8, [1.0, 0.0]), (8, [1.0, -2.0]), (8, [float("nan")]), (8, [float("inf"), 1.0]), (8, [True]),
    (1, [1.0, 1.0]), (8.0, [1.0]), (True, [1.0]),
])
def test_bad_speeds_or_batches_are_refused(total, speeds):
    with pytest.raises(ValueError):
        split_sizes(total, speeds)
