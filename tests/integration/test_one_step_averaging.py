"""Two modes that average the workers' models every step at one end of their
knob, on the real cluster (2 workers, one 2x slower, iteration times pinned):
``nodelay`` with tau = 1 (PS-LITE dist_sync, State Server, data-plane thread)
and Partial Reduce with P = N (PS-LITE's servers used as rendezvous buffers and
the State Server's barrier) each end on the model of ``localsgd --local-steps 1``.
One localsgd job, the same seed and data, is the reference of both."""
import glob
import json

import mxnet as mx
import numpy as np
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)

STEPS = 4
"""Steps of every worker: localsgd's rounds (one step each), nodelay's transfers; Partial Reduce runs 3
reduces (the 4th READY carries the stop), then the final average of the 4th step."""


def _job(tmp_path, pids, mode, *train_args, stats=False):
    """Run one job; returns its summary, the State Server's --state-stats record (``stats``) and the final
    model (the last snapshot, {name: array})."""
    out, state = tmp_path / "out", tmp_path / "state.json"
    proc = launch(["-n", "2", "-s", "1", "--sync", mode, "--slowdown", "1,2", "--base-iter", "0.05",
                   *(["--state-stats", str(state)] if stats else [])],
                  train_command(out, "--time-budget", "120", "--seed", "5", "--lr", "0.1", "--eval-interval", "1000",
                                "--final-eval-samples", "200", *train_args),
                  tmp_path, pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not pids.alive()
    last = sorted(glob.glob(str(out / "snapshots" / "*.params")))[-1]
    summary = load_summary(out)
    summary["workers"].sort(key=lambda w: w["slot"])
    return (summary, json.loads(state.read_text()) if stats else None,
            {k: v.asnumpy() for k, v in mx.nd.load(last).items()})


@pytest.fixture(scope="module")
def localsgd(tmp_path_factory, module_child_pids):
    summary, _, final = _job(tmp_path_factory.mktemp("localsgd"), module_child_pids, "localsgd",
                             "--local-steps", "1", "--max-rounds", str(STEPS))
    assert [w["local_iters"] for w in summary["workers"]] == [[1] * STEPS] * 2
    assert len({w["final_model_sha256"] for w in summary["workers"]}) == 1
    return summary, final


def _assert_same_model(a, b):
    assert sorted(a) == sorted(b)
    # localsgd's dist_async servers add each member's delta as it arrives (a dist_sync merge, or a reduce, sums
    # first), so float32 rounding depends on which worker's push lands first (w + a + b != w + b + a); a few
    # steps at lr 0.1 amplify it to a few 1e-5 on some weights. A wrong average would be off by far more.
    for name in b:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_nodelay_with_tau_1_gives_the_model_of_localsgd_with_one_local_step(tmp_path, child_pids, localsgd):
    _, reference = localsgd
    summary, _, final = _job(tmp_path, child_pids, "nodelay", "--max-staleness", "1", "--max-rounds", str(STEPS))
    assert [w["local_iters"] for w in summary["workers"]] == [[1] * STEPS] * 2
    assert len({w["final_model_sha256"] for w in summary["workers"]}) == 1
    _assert_same_model(final, reference)


def test_partial_reduce_with_p_equal_n_gives_the_model_of_localsgd_with_one_local_step(tmp_path, child_pids,
                                                                                       localsgd):
    other, reference = localsgd
    summary, state, final = _job(tmp_path, child_pids, "preduce", "--max-rounds", str(STEPS - 1),
                                 "--group-size", "2", "--weights", "constant", stats=True)
    assert [w["rounds"] for w in summary["workers"]] == [STEPS - 1] * 2
    assert [w["iterations"] for w in summary["workers"]] == [w["iterations"] for w in other["workers"]] == [STEPS] * 2
    assert state["preduce"]["groups"] == STEPS - 1 and state["preduce"]["group_size"] == 2
    assert len({w["final_model_sha256"] for w in summary["workers"]}) == 1
    _assert_same_model(final, reference)
