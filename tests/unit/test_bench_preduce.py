"""``mxhet-bench preduce``: its plan and its numbers (no jobs run)."""
import argparse

import pytest

from bench import preduce
from mxhet.errors import ConfigError


def _args(*argv):
    parser = argparse.ArgumentParser()
    preduce.add_parser(parser.add_subparsers(dest="experiment"))
    return parser.parse_args(["preduce", *argv])


def test_the_grid_covers_n_levels_group_sizes_weights_and_baselines():
    runs = preduce.plan(_args("--engines", "sim", "--workers", "4,8", "--levels", "1,3"))
    labels = [r[0] for r in runs]
    assert len(labels) == len(set(labels)) == 2 * 2 * (4 + 2 * 2 + 1)   # P = N: one weighting
    assert "sim-n8-hl3-p8-con" in labels and "sim-n4-hl1-p4-con" in labels and "sim-n4-hl3-esync" in labels
    assert "sim-n8-hl3-p8-dyn" not in labels and "sim-n8-hl3-p3-dyn" in labels
    spec = dict((r[0], r[-1]) for r in runs)["sim-n8-hl3-p3-dyn"]
    assert spec.slowdowns == (1.0,) * 5 + (3.0,) * 3
    assert spec.extra_train_args[-6:] == ("--group-size", "3", "--weights", "dynamic", "--alpha", "0.5")
    assert "--stop-at-target" in spec.launch_argv("out")
    cluster = preduce.plan(_args("--engines", "cluster"))
    assert [r[0] for r in cluster][:3] == ["cluster-n4-hl3-p3-con", "cluster-n4-hl3-p3-dyn", "cluster-n4-hl3-p2-dyn"]


@pytest.mark.parametrize("argv", [("--engines", "gpu"), ("--group-sizes", "1"), ("--levels", "9"),
                                  ("--engines", "cluster", "--cluster-runs", "preduce:7:dynamic"),
                                  ("--weights", "heavy")])
def test_bad_settings_are_refused(argv):
    with pytest.raises(ConfigError):
        preduce.plan(_args(*argv))


def test_updates_and_the_report():
    workers = [{"rounds": 10, "slot": 0, "slowdown": 1.0, "compute_ratio": 0.9, "iterations": 11, "samples": 1,
                "local_iters": [1], "bytes_pushed": 0, "bytes_pulled": 0},
               {"rounds": 4, "slot": 1, "slowdown": 3.0, "compute_ratio": 0.7, "iterations": 5, "samples": 1,
                "local_iters": [1], "bytes_pushed": 0, "bytes_pulled": 0}]
    summary = {"workers": workers, "model": "smallcnn", "mode": "preduce", "dist": "iid", "time_to_target_s": 6.0,
               "final_accuracy": 0.81, "train_time_s": 7.0, "curve": [[0, 0.1]],
               "sim": {"preduce": {"groups": 7, "interventions": 2, "holds": 1, "window": 2}}}
    assert preduce.updates(summary, "async") == 14 and preduce.updates(summary, "sync") == 10
    r = preduce.row("sim-n2-hl3-p2-dyn", "sim", 2, 3, "preduce", 2, "dynamic", summary, "nowhere", "out")
    assert r["updates"] == 7 and r["time_per_update_s"] == pytest.approx(1.0) and r["interventions"] == 2
    assert r["compute_ratio"] == pytest.approx(0.8)
    text = preduce.format_report({"command": ["mxhet-bench", "preduce"], "machine": {"cpu": "x", "cores": 2},
                                  "settings": {"model": "smallcnn", "lr": 0.1, "base_iter": 0.05,
                                               "target_accuracy": 0.8},
                                  "runs": [r], "failures": []})
    assert "| preduce | 2 | dynamic | 6.0 | 7 | 1.0000 | 0.80 | 2 | 0.8100 |" in text


def test_fastest_per_setting_and_the_plot(tmp_path):
    def r(mode, t, p=None, weights=None, n=4, level=3):
        return {"label": mode, "engine": "sim", "workers": n, "level": level, "mode": mode, "group_size": p,
                "weights": weights, "time_to_target_s": t, "final_accuracy": 0.8, "updates": 1,
                "time_per_update_s": 1.0, "compute_ratio": 0.5, "interventions": None, "slowdown": [1.0] * n}
    runs = [r("sync", 20.0), r("preduce", 12.0, 3, "dynamic"), r("preduce", 10.0, 2, "constant"),
            r("preduce", 25.0, 4, "constant"), r("esync", None), r("sync", 9.0, level=1)]
    ranked = dict(preduce.fastest(runs))
    assert [x["time_to_target_s"] for x in ranked[("sim", 4, 3)]] == [10.0, 12.0, 20.0, 25.0]
    result = {"command": ["mxhet-bench", "preduce"], "machine": {"cpu": "x", "cores": 2},
              "settings": {"model": "smallcnn", "lr": 0.1, "base_iter": 0.05, "target_accuracy": 0.8},
              "runs": runs, "failures": []}
    text = preduce.format_report(result)
    assert "| sim | 4 | 3 | preduce P=2 constant 10.0 | preduce P=3 dynamic 12.0 | sync 20.0 | 12.0 (2 of 4) |" in text
    assert "| sim | 4 | 1 | sync 9.0 | - | - | - |" in text
    path = preduce.plot(result, str(tmp_path / "p.png"))
    assert path and (tmp_path / "p.png").stat().st_size > 0
