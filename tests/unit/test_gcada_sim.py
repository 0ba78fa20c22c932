"""G-CADA and CADA in virtual time: the same rule as the cluster, the paper's timing model."""
import json

import numpy as np
import pytest

from mxhet.sim import cli
from tests.gcada_checks import check_first_finishers

pytestmark = pytest.mark.timeout(300)


def _sim(tmp_path, *argv):
    args = cli.build_parser().parse_args([*argv, "--model", "linear", "--eval-samples", "100",
                                          "--final-eval-samples", "300", "--metrics-out", str(tmp_path),
                                          "--no-progress"])
    args.argv = list(argv)
    cli.run(args)
    return json.loads((tmp_path / "summary.json").read_text())


def test_one_upload_per_selected_group_and_a_straggler_is_dropped(tmp_path):
    summary = _sim(tmp_path, "-n", "4", "--sync", "gcada", "--groups", "2", "--dist", "group",
                   "--slowdown", "1,20,1,1", "--base-iter", "0.05", "--time-budget", "3")
    assert len(summary["gcada"]["iterations"]) >= 5   # virtual time: as many whatever the machine's load
    check_first_finishers(summary["gcada"]["iterations"], summary["workers"], slow_slot=1, group_size=2)
    assert summary["loads"]["downloads"] == summary["gcada"]["totals"]["downloads"]


def test_d_one_is_distributed_amsgrad_and_times_follow_the_order_statistics(tmp_path):
    """CADA with D = 1 selects every worker every iteration; with free messages an
    iteration lasts the slowest of M exponential computing times: η·H_M on average."""
    summary = _sim(tmp_path, "-n", "3", "--sync", "cada", "--max-delay", "1", "--base-iter", "0.01",
                   "--slowdown-dist", "exp", "--latency-ms", "0", "--per-key-ms", "0", "--bandwidth-gbps", "1e6",
                   "--time-budget", "2", "--eval-interval", "1")
    iterations = summary["gcada"]["iterations"]
    assert all(r["selected"] == [0, 1, 2] and r["downloads"] == 3 and r["uploads"] == 3 for r in iterations)
    times = np.diff([r["t"] for r in iterations])
    assert len(times) > 50
    assert times.mean() == pytest.approx(0.01 * (1 + 1 / 2 + 1 / 3), rel=0.15)   # H_3 x η, 100+ samples
