"""``python -m mxhet.sim --score-members N`` under ``--round-deadline``: every push scored, late ones
included with their staleness, without changing the run."""
import pytest

from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)

# The third device is 10x slower than the bound of 4 fast iterations: it is late every time it pushes.
# Snapshots every 0.05 virtual s, so every round's global model is also a snapshot of the run's curve.
ARGV = ("-n", "3", "--sync", "esync", "--slowdown", "1,1,10", "--base-iter", "0.05", "--time-budget", "3",
        "--round-deadline", "4", "--round-length", "4", "--model", "smallcnn", "--eval-samples", "100",
        "--final-eval-samples", "100", "--eval-interval", "0.05")


def _sim(tmp_path, name, *argv):
    args = cli.build_parser().parse_args([*ARGV, *argv, "--metrics-out", str(tmp_path / name), "--no-progress"])
    args.argv = list(argv)
    return cli.run(args)


def test_deadline_members_are_scored_late_ones_included_without_changing_the_run(tmp_path):
    off = _sim(tmp_path, "off")
    on = _sim(tmp_path, "on", "--score-members", "100")
    assert off["members"] is None
    digest = {w["final_model_sha256"] for w in on["workers"]}
    assert digest == {w["final_model_sha256"] for w in off["workers"]} and len(digest) == 1
    assert on["curve"] == off["curve"]
    pushes = on["sim"]["deadline_pushes"]
    assert pushes == off["sim"]["deadline_pushes"]

    rounds = on["members"]["rounds"]
    assert len(rounds) >= 5
    # Every push of a completed round is scored once, with the share the State Server gave it.
    done = {r["round"] for r in rounds}
    scored = sorted((m["slot"], r["round"], m["share"]) for r in rounds for m in r["members"])
    assert scored == sorted((s, i, pytest.approx(w, abs=1e-6)) for s, i, w in pushes if i in done)
    late = [(r, m) for r in rounds for m in r["members"] if m["slot"] == 2]
    assert late and all(m["staleness"] >= 1 for _, m in late)
    assert all(m["staleness"] == 0 for r in rounds for m in r["members"] if m["slot"] != 2)
    for rec in rounds:
        assert sum(m["share"] for m in rec["members"]) == pytest.approx(1.0, abs=1e-5)
        assert rec["late"] == sum(m["slot"] == 2 for m in rec["members"])
        fast = [m["accuracy"] for m in rec["members"] if m["slot"] != 2]
        assert rec["on_time_mean"] == pytest.approx(sum(fast) / len(fast), abs=1e-4)
        assert rec["members_mean"] == pytest.approx(
            sum(m["accuracy"] for m in rec["members"]) / len(rec["members"]), abs=1e-4)
    # The staleness recorded is the one the round's weights were computed from: a(s) = 1 / (1 + s)
    # against an on-time member's a = 1 (mxhet.policy.deadline).
    for rec, m in late:
        on_time = next(o for o in rec["members"] if o["staleness"] == 0)
        assert m["share"] / on_time["share"] == pytest.approx(1.0 / (1 + m["staleness"]), rel=1e-3)
    # One iteration of the late device spans several rounds: it is a member of only some of them.
    assert len(late) < len(rounds)

    # The global score is the servers' model of that round: the first snapshot after the round,
    # taken before the next one ends, holds it, and the run's curve scores it on the same 100 images.
    ends = [r["t_s"] for r in rounds] + [float("inf")]
    for rec, nxt in zip(rounds, ends[1:]):
        later = [(t, acc) for t, acc in on["curve"] if rec["t_s"] <= t < nxt - 0.05]
        assert later, (rec, on["curve"])
        assert rec["global_accuracy"] == later[0][1]


def _record(late):
    return {"members": {"samples": 100, "cpu_s": 1.0, "rounds": [
        {"round": r, "t_s": 0.5 * (r + 1), "global_accuracy": 0.3 + 0.1 * r, "members_mean": 0.25 + 0.1 * r,
         "members": [{"slot": s, "n": 1 if s == 3 else 8, "t_s": 0.5 * (r + 1) - 0.01, "share": 0.25,
                      "staleness": 2 if (late and s == 3) else 0, "accuracy": 0.2 + 0.1 * r + 0.03 * s}
                     for s in range(4) if s < 3 or r % 2]} for r in range(5)]},
        "mode": "esync", "model": "smallcnn", "num_workers": 4}


def test_members_plot_marks_late_members(tmp_path):
    import json

    import numpy as np
    from PIL import Image

    from bench.plots import members_plot
    images = []
    for late in (False, True):
        src = tmp_path / ("late" if late else "on-time")
        src.mkdir()
        (src / "summary.json").write_text(json.dumps(_record(late)))
        path = members_plot(str(src / "summary.json"), str(src / "members.png"))
        images.append(np.asarray(Image.open(path).convert("L"), dtype=float))
    assert images[0].shape == images[1].shape and images[1].std() > 10
    # the late member's points (crosses) and its legend entry differ from the on-time rendering
    assert np.abs(images[0] - images[1]).sum() > 1000
