"""bench.stats: intervals over seeds on fixed inputs, against hand-computed values and scipy."""
import math

import numpy as np
import pytest
from scipy import stats as sp

from bench import stats


def test_mean_interval_matches_hand_computation():
    # [1, 2, 3]: mean 2, sd 1, t(0.975, 2) = 4.302653 -> half-width 4.302653 / sqrt(3) = 2.484138
    got = stats.mean_interval([1.0, 2.0, 3.0])
    assert got["n"] == 3 and got["mean"] == pytest.approx(2.0) and got["sd"] == pytest.approx(1.0)
    assert got["low"] == pytest.approx(2.0 - 2.484138, abs=1e-6)
    assert got["high"] == pytest.approx(2.0 + 2.484138, abs=1e-6)
    low, high = sp.t.interval(0.95, 2, loc=2.0, scale=sp.sem([1.0, 2.0, 3.0]))
    assert (got["low"], got["high"]) == pytest.approx((low, high))


def test_one_value_has_no_interval_and_none_has_no_mean():
    assert stats.mean_interval([5.0])["mean"] == 5.0 and stats.mean_interval([5.0])["low"] is None
    assert stats.mean_interval([])["mean"] is None
    with pytest.raises(ValueError, match="confidence"):
        stats.mean_interval([1.0, 2.0], confidence=95)


def test_speedup_on_log_times_matches_hand_computation_and_welch():
    # log times differ by exactly ln 10 with equal spreads (sd ln 2 each): Welch's df = 4,
    # half-width t(0.975, 4) * ln2 * sqrt(2/3) = 2.776445 * 0.693147 * 0.816497 = 1.571336
    got = stats.speedup([100, 200, 400], [9e9] * 3, [10, 20, 40], [9e9] * 3)
    assert got["kind"] == "measured" and got["value"] == pytest.approx(10.0)
    assert got["low"] == pytest.approx(10.0 * math.exp(-1.571336), rel=1e-5)
    assert got["high"] == pytest.approx(10.0 * math.exp(1.571336), rel=1e-5)
    # unequal spreads and seed counts: the same as scipy's Welch interval, exponentiated
    slow, fast = [100.0, 250.0, 400.0], [10.0, 20.0, 45.0, 30.0]
    got = stats.speedup(slow, [0] * 3, fast, [0] * 4)
    ci = sp.ttest_ind(np.log(slow), np.log(fast), equal_var=False).confidence_interval(0.95)
    assert (got["low"], got["high"]) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))
    # symmetric: B over A is 1 / (A over B), interval included
    back = stats.speedup(fast, [0] * 4, slow, [0] * 3)
    assert back["value"] == pytest.approx(1 / got["value"]) and back["low"] == pytest.approx(1 / got["high"])


def test_censored_runs_are_counted_and_make_bounds():
    ttt = stats.time_to_target([10.0, None, 30.0], [50.0, 60.0, 50.0])
    assert ttt["kind"] == "lower_bound" and ttt["reached"] == 2 and ttt["n"] == 3
    assert ttt["censored_at"] == [60.0] and ttt["mean"] == pytest.approx(100.0 / 3)
    assert stats.format_interval(ttt).startswith("> ") and "2/3 reached" in stats.format_interval(ttt)
    none = stats.time_to_target([None, None], [70.0, 80.0])
    assert none["kind"] == "none_reached" and none["mean"] is None and none["bound"] == 80.0
    assert stats.format_interval(none) == "not reached (0/2; > 80)"
    assert stats.speedup([None, 100.0], [500.0, 900.0], [10.0, 20.0], [50.0, 50.0])["kind"] == "lower_bound"
    assert stats.speedup([100.0, 200.0], [900.0] * 2, [10.0, None], [50.0] * 2)["kind"] == "upper_bound"
    both = stats.speedup([None, 1.0], [9.0, 9.0], [None, 1.0], [9.0, 9.0])
    assert both["kind"] == "unknown" and both["value"] is None
    assert stats.format_speedup(stats.speedup([], [], [1.0], [2.0])) == "not yet measured"
    with pytest.raises(ValueError, match="one training time per run"):
        stats.time_to_target([1.0], [])


def test_a_zero_width_interval_says_the_seeds_tied_on_the_snapshot_grid():
    # the closed division's Sync and ESync ResNet-18 seeds each crossed at one snapshot (2516.4 s, 74.0 s): an
    # interval of zero width there is the grid's, and the text must not read as agreement to the second
    tied = stats.time_to_target([2516.4] * 3, [21608.0] * 3)
    assert tied["low"] == tied["high"] == pytest.approx(2516.4)
    assert stats.format_interval(tied) == "2516 [2516, 2516]" + stats.SAME_SNAPSHOT
    ratio = stats.speedup([2516.4] * 3, [21608.0] * 3, [74.0] * 2, [1096.0] * 2)
    assert stats.format_speedup(ratio) == "34.01× [34.01, 34.01]" + stats.SAME_RATIO
    assert stats.format_interval(stats.mean_interval([0.9, 0.9])) == "1 [1, 1] (no spread over seeds)"
    spread = stats.time_to_target([26.0, 38.0, 38.0], [1080.0] * 3)     # the standalone seeds: a real interval
    assert "snapshot" not in stats.format_interval(spread) and "snapshot" not in stats.format_speedup(
        stats.speedup([26.0, 38.0, 38.0], [1080.0] * 3, [74.0] * 2, [1096.0] * 2))
