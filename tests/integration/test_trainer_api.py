"""gluon.Trainer's API on a real job: ``allreduce_grads()``, gradient clipping,
then ``update()``, as Horovod's ``DistributedTrainer`` allows.

Two workers, one weight vector w = [1, 1]; worker slot s has the gradient
[3 s, 0] (batch size 1), clipped to global norm 1, SGD with lr 0.1:

* sync: allreduce_grads() gives both the mean [1.5, 0]; clipped [1, 0];
  w[0] = 1 - 0.1 = 0.9. (Clipping each worker's own gradient would give
  0.95, no clipping 0.85.)
* ssp, dcasgd (both asynchronous SGD, gated or compensated; plain async
  takes the same path): each worker's own gradient is applied alone: [0, 0]
  and [3, 0] clipped to [1, 0]; w[0] = 0.9 (no clipping: 0.7). DCASGD's
  compensation term is zero here: the zero gradient leaves the weight as it
  was, and the first update of a key compensates nothing.
"""
import json
import os
import sys
import textwrap

import pytest

from tests.integration.jobs import launch

WORKER = textwrap.dedent('''
    import json, os, sys
    import mxnet as mx
    from mxnet import autograd, gluon
    import mxhet

    def main(out_dir):
        slot = int(os.environ["MXHET_SLOT"])
        net = gluon.nn.Dense(1, in_units=2, use_bias=False)
        net.initialize(mx.init.One())
        trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        x = mx.nd.array([[3.0 * slot, 0.0]])
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        trainer.allreduce_grads()
        reduced = net.weight.grad().asnumpy()[0].tolist()
        gluon.utils.clip_global_norm([net.weight.grad()], 1.0)
        if trainer.sync == "sync":
            trainer.request_stop()  # voted with this step: every worker stops after it
        trainer.update(1)
        if trainer.sync != "sync":
            trainer.request_stop()  # the asynchronous modes stop at once
        trainer.finish()
        weight = net.weight.data().asnumpy()[0].tolist()
        trainer.close()
        with open(os.path.join(out_dir, "slot%d.json" % slot), "w") as f:
            json.dump({"reduced": reduced, "weight": weight, "stopped": trainer.should_stop}, f)

    if __name__ == "__main__":
        main(sys.argv[1])
''')


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode,reduced", [("sync", [[1.5, 0.0], [1.5, 0.0]]),
                                          ("ssp", [[0.0, 0.0], [3.0, 0.0]]),
                                          ("dcasgd", [[0.0, 0.0], [3.0, 0.0]])])
def test_allreduce_clip_update(tmp_path, child_pids, mode, reduced):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = launch(["-n", "2", "-s", "1", "--sync", mode, "--timeout", "150"],
                  [sys.executable, str(script), str(tmp_path)], tmp_path, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((tmp_path / ("slot%d.json" % s)).read_text()) for s in (0, 1)]
    assert [r["reduced"] for r in results] == reduced
    for r in results:
        assert r["weight"] == pytest.approx([0.9, 1.0], abs=1e-6)
        assert r["stopped"]
    assert os.path.exists(tmp_path / "job.json")
