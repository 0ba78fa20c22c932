"""``bench.round_cost.breakdown``: a fast device's blocked time per round, split by the workers' exchange times."""
import pytest

from bench import round_cost


def _worker(slot, slowdown, start_clock, starts, issued, ends, query_s, blocked):
    return {"slot": slot, "slowdown": slowdown, "start_clock_s": start_clock,
            "round_exchange_start_s": starts, "round_exchange_issued_s": issued, "round_exchange_end_s": ends,
            "query_s": query_s, "round_blocked_s": blocked}


def test_breakdown_lines_up_workers_by_their_start_clock():
    # worker 1 started training 5 s after worker 0: its round times are 5 s smaller for the same instants
    fast = _worker(0, 1.0, 100.0, [1.0, 3.0], [1.01, 3.01], [1.5, 3.4], query_s=0.02, blocked=[0.6, 0.5])
    slow = _worker(1, 10.0, 105.0, [-3.8, -2.0], [-3.79, -1.99], [-3.5, -1.6], query_s=0.0, blocked=[0.3, 0.4])
    b = round_cost.breakdown({"workers": [slow, fast]})
    f = b["fast"]
    # round 0: fast pushed at 101.0, the slow one at 101.2, the fast pull ended at 101.5
    # round 1: fast at 103.0, slow at 103.0 (same instant), ended at 103.4
    assert f["wait_last_push_s"] == pytest.approx((0.2 + 0.0) / 2)
    assert f["after_last_push_s"] == pytest.approx((0.3 + 0.4) / 2)
    assert f["exchange_s"] == pytest.approx((0.5 + 0.4) / 2)
    assert f["issue_s"] == pytest.approx(0.01)
    assert f["query_s"] == pytest.approx(0.01) and f["blocked_s"] == pytest.approx(0.55)
    (slow_row,) = [d for d in b["devices"] if d["slowdown"] == 10.0]
    assert slow_row["wait_last_push_s"] == 0.0 and slow_row["last_to_push"] == 2


def test_breakdown_is_none_without_exchange_times():
    assert round_cost.breakdown({"workers": [{"slot": 0, "slowdown": 1.0, "round_blocked_s": [0.1],
                                              "query_s": 0.0}]}) is None
