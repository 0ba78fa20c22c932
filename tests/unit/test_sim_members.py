"""``python -m mxhet.sim --score-members N``: members and global model at every round, without
changing the run; and its figure."""
import json

import pytest

from mxhet.errors import ConfigError
from mxhet.sim import cli

pytestmark = pytest.mark.timeout(300)

# Pinned times: base 0.05 s, the third device 3x slower; snapshots every 0.05 virtual s so that
# every round's global model is also a snapshot, scored after the run on the same 100 test images.
ARGV = ("-n", "3", "--slowdown", "1,1,3", "--base-iter", "0.05", "--max-rounds", "3", "--time-budget", "30",
        "--model", "smallcnn", "--eval-samples", "100", "--final-eval-samples", "100", "--eval-interval", "0.05")


def _sim(tmp_path, name, *argv):
    out = tmp_path / name
    args = cli.build_parser().parse_args([*ARGV, *argv, "--metrics-out", str(out), "--no-progress"])
    args.argv = list(argv)
    return cli.run(args)


@pytest.mark.parametrize("mode", ["esync", "localsgd"])
def test_members_are_scored_every_round_without_changing_the_run(tmp_path, mode):
    extra = ("--local-steps", "2") if mode == "localsgd" else ()
    off = _sim(tmp_path, "off", "--sync", mode, *extra)
    on = _sim(tmp_path, "on", "--sync", mode, *extra, "--score-members", "100")
    assert off["members"] is None
    digest = {w["final_model_sha256"] for w in on["workers"]}
    assert digest == {w["final_model_sha256"] for w in off["workers"]} and len(digest) == 1
    assert on["curve"] == off["curve"]

    members = on["members"]
    assert members["samples"] == 100 and members["cpu_s"] > 0
    rounds = members["rounds"]
    workers = {w["slot"]: w for w in on["workers"]}
    assert [r["round"] for r in rounds] == sorted(r["round"] for r in rounds) and len(rounds) == 3
    for i, rec in enumerate(rounds):
        assert [m["slot"] for m in rec["members"]] == [0, 1, 2]
        # n_i: the worker's own count of local iterations in that round
        assert [m["n"] for m in rec["members"]] == [workers[s]["local_iters"][i] for s in range(3)]
        assert rec["members_mean"] == pytest.approx(sum(m["accuracy"] for m in rec["members"]) / 3, abs=1e-4)
        assert all(m["t_s"] <= rec["t_s"] for m in rec["members"])
    if mode == "esync":   # the 3x slower device does one iteration a round, the others fill its time
        assert all(r["members"][2]["n"] == 1 and r["members"][0]["n"] >= 2 for r in rounds[1:])
    else:
        assert all(m["n"] == 2 for r in rounds for m in r["members"])

    # The global score is the server's model of that round scored independently: the first
    # snapshot after the round (taken before the next round ends) holds that model, and the
    # run's curve scores it after training on the same 100 test images.
    ends = [r["t_s"] for r in rounds] + [float("inf")]
    for rec, nxt in zip(rounds, ends[1:]):
        later = [(t, acc) for t, acc in on["curve"] if rec["t_s"] <= t < nxt - 0.05]
        assert later, (rec, on["curve"])
        assert rec["global_accuracy"] == later[0][1]
    # The members differ from each other (distinct shards, distinct n_i): they are each member's own model.
    assert len({m["accuracy"] for r in rounds for m in r["members"]}) > 1


def test_score_members_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="--score-members"):
        _sim(tmp_path, "bad", "--sync", "sync", "--score-members", "100")
    with pytest.raises(ConfigError, match="--score-members"):
        _sim(tmp_path, "neg", "--sync", "esync", "--score-members", "-1")


RECORD = {"members": {"samples": 100, "cpu_s": 1.0, "rounds": [
    {"round": r, "t_s": 0.5 * (r + 1), "global_accuracy": 0.3 + 0.1 * r, "members_mean": 0.25 + 0.1 * r,
     "members": [{"slot": s, "n": 1 if s == 3 else 10, "t_s": 0.5 * (r + 1) - 0.01,
                  "accuracy": 0.2 + 0.1 * r + 0.03 * s} for s in range(4)]} for r in range(5)]},
    "mode": "esync", "model": "smallcnn", "num_workers": 4}


def test_members_plot_draws_a_figure(tmp_path):
    from bench.plots import members_plot
    src = tmp_path / "run"
    src.mkdir()
    (src / "summary.json").write_text(json.dumps(RECORD))
    path = members_plot(str(src / "summary.json"), str(tmp_path / "members.png"))
    from PIL import Image
    import numpy as np
    image = np.asarray(Image.open(path).convert("L"))
    assert image.shape[0] >= 300 and image.shape[1] >= 500
    assert image.std() > 10          # not blank: dots and lines on a white background
    from bench import cli as bench_cli
    assert bench_cli.main(["members-plot", str(src)]) == 0 and (src / "members.png").stat().st_size > 10000
    (src / "summary.json").write_text(json.dumps(dict(RECORD, members=None)))
    with pytest.raises(ValueError, match="members"):
        members_plot(str(src / "summary.json"), str(tmp_path / "none.png"))
    assert bench_cli.main(["members-plot", str(src)]) == 2
