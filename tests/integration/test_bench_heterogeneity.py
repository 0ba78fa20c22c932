"""``mxhet-bench heterogeneity`` with one real simulator run: the recommended ESync (its flags on
``python -m mxhet.sim``'s command line) on the small CNN at the 10x profile, a virtual second, through
the bench's runner, records, report and figure (the confirmation on all test images is
tests/unit/test_bench_confirm.py's; here every candidate is taken as it scored)."""
import json
import os

import pytest

from bench import confirm, heterogeneity as het, presets

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_recommended_run_in_the_simulator_goes_through_the_whole_bench(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)   # the simulator's process imports this checkout
    out = str(tmp_path / "het")
    doc = het.run_bench(["smallcnn"], [10], ["recommended"], ["iid"], [0], out, budget=1.0, sweep=None,
                        command=["mxhet-bench", "heterogeneity", "--models", "smallcnn"], checkpoint_every_min=0,
                        confirm_fn=lambda d, s: confirm.confirm(s, lambda i: s["curve"][i][1]), log=lambda *_: None)
    assert not doc["failures"], doc["failures"]
    run, = doc["runs"]
    assert run["profile"] == 10 and run["variant"] == "recommended" and run["slowdown"] == [10.0, 10.0, 1.0, 1.0]
    i = run["command"].index("--round-deadline")
    assert run["command"][i:i + 2] == list(presets.RECOMMENDED_ARGS)
    with open(os.path.join(out, "runs", run["run"], "summary.json")) as f:
        summary = json.load(f)
    # the fast devices aggregate without waiting for a slow device's iteration (10 fast ones long)
    assert min(run["rounds"][2:]) > 2 * max(run["rounds"][:2]), run["rounds"]
    assert "deadline_pushes" in summary["sim"]
    assert not os.path.exists(os.path.join(out, "runs", run["run"], "snapshots"))   # confirmed, then removed
    text = open(os.path.join(out, "heterogeneity.md")).read()
    assert "## smallcnn, 10x, iid" in text and "no alternative measured" in text   # none ran
    assert os.path.exists(os.path.join(out, "heterogeneity.png"))
