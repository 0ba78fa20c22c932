"""NaN/Inf in what a worker pushes: a clear error, or a skipped contribution;
the global model stays finite -- for the delta modes and the gradient modes.

A small worker script poisons slot 1's gradients at its third step, so both
kinds of push (a model delta, a gradient) carry a NaN at a known place.
"""
import json
import sys

import numpy as np
import pytest

from .jobs import launch

pytestmark = pytest.mark.timeout(240)

# A model delta (esync) and a gradient (sync). async pushes its gradient through the same call
# (mxhet.modes.gradient._GradientMode.exchange_gradients checks it before the push), without a peer blocked in
# the push: a launch of its own per policy proved nothing more.
MODES = ("esync", "sync")

POISONED_WORKER = """
import json, os, sys
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
import mxhet

out, policy = sys.argv[1], sys.argv[2]
slot = int(os.environ["MXHET_SLOT"])
net = gluon.nn.Dense(2, in_units=3)
net.initialize(mx.init.One())
trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, on_nonfinite=policy)
trainer.set_stop_condition(lambda stats: stats.rounds >= 6)
x = mx.nd.ones((4, 3))
step = 0
while not trainer.should_stop:
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    if slot == 1 and step == 2:
        net.weight.grad()[:] = float("nan")
    trainer.step(4)
    step += 1
trainer.finish()
np.save(os.path.join(out, "weight%d.npy" % slot), net.weight.data().asnumpy())
with open(os.path.join(out, "stats%d.json" % slot), "w") as f:
    json.dump(trainer.stats.as_dict(), f)
trainer.close()
"""


def _job(tmp_path, child_pids, mode, policy):
    script = tmp_path / "worker.py"
    script.write_text(POISONED_WORKER)
    out = tmp_path / "out"
    out.mkdir()
    return out, launch(["-n", "2", "-s", "1", "--sync", mode, "--slowdown", "1,2"],
                       [sys.executable, str(script), str(out), policy], tmp_path, child_pids)


@pytest.mark.parametrize("mode", MODES)
def test_nonfinite_push_stops_the_job_naming_worker_and_round(tmp_path, child_pids, mode):
    _, proc = _job(tmp_path, child_pids, mode, "stop")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "NonFiniteError" in proc.stderr and "non-finite values" in proc.stderr
    assert "worker slot 1" in proc.stderr and "the global model was not touched" in proc.stderr
    if mode == "sync":  # a gradient is pushed every step: the poisoned step is round 2
        assert "gradient of worker slot 1" in proc.stderr and "in round 2" in proc.stderr
    assert not child_pids.alive()


@pytest.mark.parametrize("mode", MODES)
def test_skip_keeps_the_global_model_finite(tmp_path, child_pids, mode):
    out, proc = _job(tmp_path, child_pids, mode, "skip")
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = [json.loads((out / ("stats%d.json" % slot)).read_text()) for slot in (0, 1)]
    assert stats[0]["skipped_pushes"] == 0 and stats[1]["skipped_pushes"] == 1
    assert stats[0]["final_model_sha256"] == stats[1]["final_model_sha256"]
    for slot in (0, 1):
        weight = np.load(str(out / ("weight%d.npy" % slot)))
        assert np.isfinite(weight).all()
        assert not (weight == 1.0).all()  # the others' contributions were applied
