"""Partial Reduce on the real cluster: with P = N it is synchronous model
averaging every step (``localsgd --local-steps 1``), through PS-LITE's servers
used as rendezvous buffers and the State Server's barrier."""
import glob
import json

import mxnet as mx
import numpy as np
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)


def _final(tmp_path, child_pids, name, rounds, launcher, *train_args):
    out = tmp_path / name
    stats = tmp_path / (name + "-state.json")
    proc = launch(["-n", "2", "-s", "1", "--state-stats", str(stats), *launcher],
                  train_command(out, "--max-rounds", str(rounds), "--time-budget", "120", "--seed", "5", "--lr", "0.1",
                                "--eval-interval", "1000", "--final-eval-samples", "200", *train_args),
                  tmp_path / name, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = sorted(glob.glob(str(out / "snapshots" / "*.params")))[-1]
    return load_summary(out), json.loads(stats.read_text()), {k: v.asnumpy() for k, v in mx.nd.load(last).items()}


def test_p_equal_n_matches_localsgd_with_one_local_step(tmp_path, child_pids):
    (tmp_path / "preduce").mkdir()
    (tmp_path / "localsgd").mkdir()
    # preduce: 3 reduces (the 4th READY carries the stop), then the final average of the 4th step;
    # localsgd stops after the average that reaches --max-rounds: 4 steps, each averaged
    summary, state, a = _final(tmp_path, child_pids, "preduce", 3, ["--sync", "preduce", "--slowdown", "1,2"],
                               "--group-size", "2", "--weights", "constant")
    other, _, b = _final(tmp_path, child_pids, "localsgd", 4, ["--sync", "localsgd", "--slowdown", "1,2"],
                         "--local-steps", "1")
    assert [w["rounds"] for w in summary["workers"]] == [3, 3]
    assert [w["iterations"] for w in summary["workers"]] == [w["iterations"] for w in other["workers"]] == [4, 4]
    assert state["preduce"]["groups"] == 3 and state["preduce"]["group_size"] == 2
    assert len({w["final_model_sha256"] for w in summary["workers"]}) == 1
    assert a.keys() == b.keys()
    # localsgd's dist_async servers add each member's Δ/m as it arrives, so float32 rounding depends
    # on which worker's push lands first (w + a + b != w + b + a); four steps amplify that to a few
    # 1e-5 on some weights. A wrong average would be off by far more than atol.
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-4, err_msg=name)
