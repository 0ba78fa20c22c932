"""In the modes where no worker waits for another's next contribution (the
asynchronous gradient modes -- async, and ssp, which shares its exit path --,
asynchronous local SGD ``dylu``, Partial Reduce ``preduce``, ``gcada`` and
``cada``) a worker whose script stops calling ``step()`` leaves the job at
interpreter exit, and the others train on: on real processes, with every
worker running a different number of steps and the State Server's heartbeat
timeout shorter than the time the first one to leave waits for the last. In
``preduce`` (groups of P = 2 of N = 3) the last worker left trains on in
groups of one; in ``cada`` (groups of one) each departure retires a group,
and the servers' steps go on without it; in ``gcada`` (one group of three)
the teammates compute for the group."""
import json
import sys
import textwrap

import pytest

from .jobs import launch

pytestmark = pytest.mark.timeout(200)

# An ordinary loop that just ends: no trainer.finish(), no stop condition. The report is written at exit, after
# the Trainer's own exit hook (atexit runs the last registered first).
SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    import mxnet as mx
    from mxnet import autograd, gluon
    import mxhet
    from mxhet.models import get_model

    out_dir = sys.argv[1]
    slot = int(os.environ["MXHET_SLOT"])
    mine = 10 * (slot + 1)          # slot 0 leaves first, slot 2 (4x slower) last
    done = [0]

    def report():
        with open(os.path.join(out_dir, "slot%d.json" % slot), "w") as f:
            json.dump({"steps": done[0], "digest": trainer.stats.final_model_sha256,
                       "rounds": trainer.stats.rounds}, f)
    atexit.register(report)

    mx.random.seed(slot)
    net = get_model("smallcnn")
    net.initialize(mx.init.Xavier())
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(mine):
        x = mx.nd.random.uniform(shape=(16, 1, 28, 28))
        y = mx.nd.array([i % 10 for i in range(16)])
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(16)
        done[0] += 1
''')


@pytest.mark.parametrize("mode", ["async", "ssp", "dylu", "preduce", "cada", "gcada"])
def test_a_worker_that_ends_its_loop_first_leaves_and_every_worker_ends_with_the_global_model(tmp_path, child_pids,
                                                                                               mode):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    # slot 2: 30 x 4 x 0.1 s = 12 s of steps; slot 0 leaves after 10 (ssp: gated to about slot 2's pace), well
    # over the 5 s heartbeat timeout before the end
    proc = launch(["-n", "3", "-s", "1", "--sync", mode, "--slowdown", "1,1,4", "--base-iter", "0.1",
                   "--heartbeat-timeout", "5", "--timeout", "120"],
                  [sys.executable, str(script), str(tmp_path)], tmp_path, child_pids, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / ("slot%d.json" % s)).read_text()) for s in range(3)]
    assert [r["steps"] for r in results] == [10, 20, 30]
    if mode == "preduce":
        # every step ended in a reduce: slot 2's last ones, after the others left, in groups of one
        assert [r["rounds"] for r in results] == [10, 20, 30]
    # each pulled the servers' model after every worker's last push
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests and None not in digests, results
    assert not child_pids.alive()
