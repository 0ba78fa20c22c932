"""ADSP's commit-rate search in virtual time: it runs, and the run's summary records it (``adsp_search``).

A small CNN job at pinned iteration times (--base-iter), so every checkpoint and comparison falls at a
virtual time fixed by the schedule, whatever the machine's load.
"""
import json

import pytest

from mxhet.control.adsp import MIN_GAIN
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)


def test_the_search_runs_and_its_record_follows_the_decisions(tmp_path):
    out = tmp_path / "adsp"
    # Γ = 1 s, windows of one period, a new search every 3 s: rate 1 vs 2 is compared at the 2nd checkpoint
    # after the first commit report and again at the 5th; a 6 s run holds both.
    argv = ["-n", "3", "--sync", "adsp", "--slowdown", "1,1,4", "--base-iter", "0.05", "--time-budget", "6",
            "--adsp-period", "1", "--adsp-window", "1", "--adsp-epoch", "3", "--lr", "0.1"]
    args = cli.build_parser().parse_args([*argv, "--model", "smallcnn", "--eval-samples", "100",
                                          "--final-eval-samples", "100", "--eval-interval", "3",
                                          "--metrics-out", str(out)])
    args.argv = argv
    summary = cli.run(args)
    record = json.loads((out / "summary.json").read_text())["adsp_search"]
    assert record == json.loads(json.dumps(summary["adsp_search"]))
    assert record["period"] == 1.0 and record["epoch"] == 3.0 and record["window_periods"] == 1
    origin = record["origin"]
    assert 0.0 <= origin < 0.1                       # the first commit report, right after registering
    comparisons = record["comparisons"]
    assert record["counts"]["comparisons"] == len(comparisons) >= 2
    assert record["counts"]["searches"] >= 2
    assert [c["time"] for c in comparisons[:2]] == pytest.approx([origin + 2.0, origin + 5.0])
    # the second search's first window has commit reports enough for a fit: two measured rewards
    assert any(None not in c["rewards"] for c in comparisons), comparisons
    for c in comparisons:
        measured = None not in c["rewards"]
        assert c["decision"] == ("keep (no reward)" if not measured else
                                 "climb" if c["rewards"][1] > c["rewards"][0] * (1 + MIN_GAIN) else "keep")
        assert c["rates"] == [1, 2] and c["decision"] in ("climb", "keep", "keep (no reward)")
        assert c["rate_after"] == (2 if c["decision"] == "climb" else 1)
        assert all(n > 0 for n in c["samples"]) and all(l is not None for pair in c["losses"] for l in pair)
        # the period that begins at the comparison's checkpoint runs the rate it decided
        period = next(p for p in record["periods"] if p["checkpoint"] == c["checkpoint"])
        assert period["rate"] == c["rate_after"]
        assert period["phase"] == ("base" if c["decision"] == "climb" else "fixed")
    for p in record["periods"]:
        assert p["c_target"] == max(p["commits"].values()) + p["rate"]
        assert p["time"] == pytest.approx(origin + p["checkpoint"])
    # the workers committed toward those targets: every worker's count stays within one of the others'
    for p in record["periods"][:-1]:
        counts = list(p["commits"].values())
        assert max(counts) - min(counts) <= 1, record["periods"]
