"""ADSP's scheduler: reward fitting, the commit-rate search, commit targets (injected clock)."""
import json
import math

import pytest

from mxhet.control import messages as m
from mxhet.control import wire
from mxhet.control.adsp import (ADSPScheduler, CommitRateSearch, fit_curve, fit_reward, loss_curve, reward_at,
                                search_level)
from mxhet.control.server import StateService


def _samples(a1, a2=1.0, a3=0.2, n=8, span=4.0):
    return [(span * i / (n - 1), loss_curve(span * i / (n - 1), a1, a2, a3)) for i in range(n)]


def test_reward_grows_with_loss_decrease_speed():
    # One threshold for both (the paper's ℓ, fixed for the configurations compared).
    slow, fast = fit_reward(_samples(0.5), 0.5), fit_reward(_samples(1.5), 0.5)
    assert slow is not None and fast is not None and fast > slow > 0


def test_reward_is_the_papers_formula():
    a1, a2, a3 = 0.8, 1.3, 0.2
    params = fit_curve(_samples(a1, a2, a3))
    assert params[0] ** 2 == pytest.approx(a1 ** 2, rel=1e-3) and params[1:] == pytest.approx((a2, a3), rel=1e-3)
    level = 0.4
    assert reward_at((a1, a2, a3), level) == pytest.approx(a1 ** 2 / (1 / (level - a3) - a2))
    # the time at which the curve reaches ℓ, on the search's clock
    assert loss_curve(1 / reward_at((a1, a2, a3), level), a1, a2, a3) == pytest.approx(level)
    assert reward_at((a1, a2, a3), 0.1) == 0.0                    # below the asymptote: never


def test_reward_guards():
    assert fit_reward([(0, 1.0), (1, 0.9)], 0.5) is None           # too few samples
    assert fit_reward([(0, 1.0)] * 6, 0.5) is None                  # no time spread
    assert fit_reward([(t, 1.0) for t in range(6)], 0.9) < 1e-6      # a flat loss (practically) never gets there
    assert fit_reward([(0, 1.0), (1, math.nan), (2, 0.8), (3, 0.7), (4, 0.65)], 0.5) is not None


def test_one_curve_gets_one_reward_whatever_the_window():
    # Two consecutive windows on the same loss curve (the same configuration):
    # on the search's clock with one ℓ they get the same reward. The previous
    # rule (the time to drop 5% below each window's own start) rated the later,
    # flatter window lower: the climb to rate + 1 was biased to stop.
    a1, a2, a3, span = 1.0, 1.0, 0.2, 4.0
    first = [(t, loss_curve(t, a1, a2, a3)) for t in (0.5 * i for i in range(9))]
    second = [(t, loss_curve(span + t, a1, a2, a3)) for t in (0.5 * i for i in range(9))]
    level = search_level(first)
    assert level == pytest.approx(0.9 * first[-1][1])
    r1, r2 = fit_reward(first, level), fit_reward(second, level, offset=span)
    assert r1 == pytest.approx(r2, rel=1e-3)

    def old_reward(samples, drop=0.05):   # the rule this replaced
        b1, b2, b3 = fit_curve(samples)
        target = loss_curve(0.0, b1, b2, b3) * (1.0 - drop)
        return 1.0 / ((1.0 / (target - b3) - b2) / (b1 * b1))
    assert old_reward(second) < 0.8 * old_reward(first)


def test_a_steeper_second_window_wins_on_the_common_clock():
    span = 4.0
    first = [(t, loss_curve(t, 1.0, 1.0, 0.2)) for t in (0.5 * i for i in range(9))]
    start = first[-1][1]
    # from the same loss on, the next configuration descends faster
    a2 = 1.0 / (start - 0.2)
    second = [(t, loss_curve(t, 2.0, a2, 0.2)) for t in (0.5 * i for i in range(9))]
    level = search_level(first)
    assert fit_reward(second, level, offset=span) > fit_reward(first, level)


def _search(rewards_by_rate):
    search = CommitRateSearch()
    while search.searching:
        search.window_done(rewards_by_rate(search.rate))
    return search


def test_search_climbs_while_the_reward_grows_and_stops_when_it_falls():
    speeds = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.25, 5: 0.4}
    search = _search(lambda rate: fit_reward(_samples(speeds[rate]), 0.5))
    assert search.rate == 3
    assert [r for r, _ in search.history] == [1, 2, 2, 3, 3, 4]


def test_search_stops_on_a_failed_fit():
    search = _search(lambda rate: None if rate == 2 else 1.0)
    assert search.rate == 1


def test_targets_equalize_commits_at_checkpoints():
    sched = ADSPScheduler([0, 1], period=2.0, epoch=100.0, window_periods=2, now=0.0)
    assert sched.report(0, 0, -1, 0.0, now=0.0) == (1, 2.0)
    target, left = sched.report(1, 3, 0.5, 0.01, now=1.0)
    assert (target, left) == (1, 1.0)
    # checkpoint at 2 s: C_target = max(c) + rate = 3 + 1; worker 0 is told to catch up
    target, left = sched.report(0, 0, 0.5, 0.01, now=2.5)
    assert target == 4 and left == pytest.approx(1.5)
    assert sched.log[0]["commits"] == {"0": 0, "1": 3}


def test_search_runs_online_over_checkpoints():
    sched = ADSPScheduler([0], period=1.0, epoch=100.0, window_periods=1, now=0.0)
    t = 0.0
    while t < 4.0:  # loss falls steadily: the search tries 1, then 2, ...
        sched.report(0, int(t * 3), loss_curve(t, 1.0, 1.0, 0.1), 0.0, now=t)
        t += 0.1
    assert [h["rate"] for h in sched.stats()["search"]][:2] == [1, 2]
    assert all(c["c_target"] >= c["rate"] for c in sched.log)
    # one threshold for the whole search, below the first window's losses
    assert len(sched.stats()["loss_thresholds"]) == 1
    assert sched.stats()["loss_thresholds"][0] < loss_curve(1.0, 1.0, 1.0, 0.1)
    # the loss follows one curve whatever the rate: no rate is better, the climb stops at once
    assert sched.search.rate == 1 and not sched.search.searching


def test_bad_scheduler_arguments():
    with pytest.raises(ValueError):
        ADSPScheduler([], now=0.0)
    with pytest.raises(ValueError):
        ADSPScheduler([0], period=0)
    with pytest.raises(ValueError):
        ADSPScheduler([0], window_periods=0)
    with pytest.raises(KeyError):
        ADSPScheduler([0]).report(3, 0, 1.0, 0.0, now=0.0)


def _registered(n, staleness):
    svc = StateService(n, staleness=staleness)
    for r in range(n):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0)
    return svc


def test_ssp_gate_defers_the_fast_worker_until_the_slow_one_advances():
    svc = _registered(2, staleness=2)
    for clock in (1, 2):
        assert svc.handle(m.Clock(rank=0, seq=10 + clock, clock=clock), 0.0).ok
    assert svc.handle(m.Clock(rank=0, seq=13, clock=3), 0.0) is None     # 3 ahead of rank 1
    assert svc.take_released() == []
    assert svc.handle(m.Clock(rank=1, seq=2, clock=1), 0.0).ok           # the slow one advances
    assert svc.take_released() == [(0, m.Reply(seq=13))]


def test_ssp_gate_releases_when_the_slow_worker_leaves():
    svc = _registered(2, staleness=0)
    assert svc.handle(m.Clock(rank=0, seq=2, clock=1), 0.0) is None
    svc.handle(m.Bye(rank=1, seq=2), 0.0)
    assert svc.take_released() == [(0, m.Reply(seq=2))]


def test_commit_reports_through_the_service():
    svc = _registered(2, staleness=0)
    reply = svc.handle(m.Commit(rank=0, seq=2, commits=0, loss=-1.0, commit_cost=0.0), 5.0)
    assert reply.ok and reply.target == 1 and reply.period_left > 0
    assert svc.stats()["adsp"]["period"] > 0


def _drive(sched, speeds, until, step=0.05):
    """Commit reports from one worker whose loss runs down one curve at a speed set by the current rate
    (``speeds[rate]``): rate 2 is better than 1, 3 worse than 2. Returns the scheduler."""
    t = tau = 0.0
    while t < until:
        sched.report(0, int(t * 5), loss_curve(tau, 0.1, 1.0, 0.1), 0.0, now=t)
        tau += step * speeds[sched.search.rate]
        t += step
    return sched


def test_the_search_record_holds_every_comparison_and_every_period():
    sched = _drive(ADSPScheduler([0], period=1.0, epoch=100.0, window_periods=1, now=0.0),
                   {1: 1.0, 2: 2.0, 3: 0.3}, until=8.0)
    record = sched.search_record(origin=10.0)
    comparisons = record["comparisons"]
    # windows of one period: rate 1, rate 2 (compared: 2 wins), rate 2 again, rate 3 (compared: 3 loses)
    assert [c["rates"] for c in comparisons] == [[1, 2], [2, 3]]
    assert [c["decision"] for c in comparisons] == ["climb", "keep"]
    assert [c["time"] for c in comparisons] == [12.0, 14.0]                # checkpoints 2 and 4, from origin 10
    assert comparisons[0]["rewards"][1] > comparisons[0]["rewards"][0] > 0
    assert comparisons[1]["rewards"][1] < comparisons[1]["rewards"][0]
    assert [c["rate_after"] for c in comparisons] == [2, 2]
    assert all(c["level"] == sched.levels[0] and min(c["samples"]) >= 19 for c in comparisons)
    first = comparisons[0]["losses"][0]
    assert first[0] == pytest.approx(loss_curve(0.0, 0.1, 1.0, 0.1)) and first[1] < first[0]
    assert record["counts"] == {"searches": 1, "comparisons": 2, "climbs": 1, "windows": 4,
                                "periods": len(sched.log), "final_rate": 2}
    assert [(w["rate"], w["start"], w["end"]) for w in record["windows"]] == [
        (1, 10.0, 11.0), (2, 11.0, 12.0), (2, 12.0, 13.0), (3, 13.0, 14.0)]
    # every period's commit target is the most commits so far plus the rate the search was at
    periods = record["periods"]
    assert [p["rate"] for p in periods[:6]] == [2, 2, 3, 2, 2, 2]
    assert [p["phase"] for p in periods[:6]] == ["next", "base", "next", "fixed", "fixed", "fixed"]
    assert all(p["c_target"] == max(p["commits"].values()) + p["rate"] for p in periods)
    assert periods[0]["time"] == 11.0


def test_a_new_epoch_starts_a_new_search_and_a_failed_fit_is_recorded_as_such():
    sched = ADSPScheduler([0], period=1.0, epoch=3.0, window_periods=1, now=0.0)
    for t in (0.2, 0.5, 0.8, 1.2, 1.5, 1.8, 3.5):   # 3 samples in the first window: no fit
        sched.report(0, 0, 1.0 - 0.1 * t, 0.0, now=t)
    record = sched.search_record()
    assert record["comparisons"][0]["rewards"][0] is None
    assert record["comparisons"][0]["decision"] == "keep (no reward)"
    assert record["counts"]["searches"] == 2 and [p["search"] for p in record["periods"]] == [0, 0, 1]
    assert record["periods"][-1]["rate"] == 1 and record["periods"][-1]["phase"] == "base"


def test_the_record_travels_in_pages(monkeypatch):
    import itertools

    from mxhet.control.client import StateClient
    monkeypatch.setattr(wire, "RECORD_PAGE", 100)
    svc = _registered(1, staleness=0)
    client = object.__new__(StateClient)
    seqs = itertools.count(10)
    client._message = lambda cls, **fields: cls(rank=0, seq=next(seqs), **fields)
    client.request = lambda msg: m.decode(m.encode(svc.handle(m.decode(m.encode(msg)), 0.0)))
    assert client.adsp_record() is None                          # no commit report yet
    t = 0.0
    while t < 20.0:   # the service's default period (2 s) and windows (2 periods): two comparisons
        svc.handle(m.Commit(rank=0, seq=next(seqs), commits=int(t * 5), loss=loss_curve(t, 1.0, 1.0, 0.1),
                            commit_cost=0.0), t)
        t += 0.05
    record = client.adsp_record()
    assert len(json.dumps(record)) > 5 * 100                      # several pages
    assert record == json.loads(json.dumps(svc.adsp.search_record()))
    assert record["counts"]["comparisons"] >= 1 and record["origin"] == 0.0
