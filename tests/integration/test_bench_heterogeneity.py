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


def _as_scored(run_dir, summary):
    return confirm.confirm(summary, lambda i: summary["curve"][i][1])


def test_a_recommended_run_in_the_simulator_goes_through_the_whole_bench(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)   # the simulator's process imports this checkout
    out = str(tmp_path / "het")
    doc = het.run_bench(["smallcnn"], [10], ["recommended"], ["iid"], [0], out, budget=2.0, sweep=None,
                        command=["mxhet-bench", "heterogeneity", "--models", "smallcnn"], checkpoint_every_min=0,
                        confirm_fn=het.confirm_and_trim(ensure=_as_scored),
                        log=lambda *_: None)
    assert not doc["failures"], doc["failures"]
    run, = doc["runs"]
    assert run["profile"] == 10 and run["variant"] == "recommended" and run["slowdown"] == [10.0, 10.0, 1.0, 1.0]
    i = run["command"].index("--round-deadline")
    assert run["command"][i:i + len(presets.RECOMMENDED_ARGS)] == list(presets.RECOMMENDED_ARGS)
    with open(os.path.join(out, "runs", run["run"], "summary.json")) as f:
        summary = json.load(f)
    # the fast devices (slots 2, 3) do about 8 local steps a round (the round length), where the paper's
    # rounds would each wait for a slow device's iteration of 10; the slow ones are late, their deltas still
    # enter rounds
    steps = [w["iterations"] / w["rounds"] for w in summary["workers"][2:]]
    assert all(7 <= s <= 9 for s in steps) and min(w["rounds"] for w in summary["workers"][2:]) >= 3, steps
    assert {slot for slot, _, _ in summary["sim"]["deadline_pushes"]} == {0, 1, 2, 3}
    assert not os.path.exists(os.path.join(out, "runs", run["run"], "snapshots"))   # confirmed, then removed
    text = open(os.path.join(out, "heterogeneity.md")).read()
    assert "## smallcnn, 10x, iid" in text and "no alternative measured" in text   # none ran
    assert os.path.exists(os.path.join(out, "heterogeneity.png"))
