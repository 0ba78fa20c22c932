"""In ``sync`` and ``nodelay`` a worker whose script ends its loop before the others' (fewer
steps, no ``trainer.finish()``, no stop condition) keeps serving its share of
every round at interpreter exit, and the others' gradients are averaged over
the workers still training, not diluted by its zeros: on real processes, 3
workers running 10, 20 and 30 steps on the same batches from the same initial
model. Every training worker's gradient is then the same, so the job's model
must equal plain single-process SGD over the 30 batches (a diluted mean would
shrink the last 20 steps to 2/3 and 1/3); the job exits 0 and every worker
ends with the global model's digest."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .jobs import ROOT, launch, run_leaving_job

pytestmark = pytest.mark.timeout(240)

# The report is written at exit, after the Trainer's own exit hook (atexit runs the last registered first).
# REF=1: the same loop on one process with gluon.Trainer, the reference model.
SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon
    import mxhet
    from mxhet.models import get_model

    out_dir, model, size, style = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ref = os.environ.get("REF") == "1"
    slot = 2 if ref else int(os.environ["MXHET_SLOT"])
    per = int(sys.argv[5])
    lr = float(sys.argv[6])
    mine = per * (slot + 1)          # slot 0 leaves first, slot 2 (4x slower) last
    done = [0]

    def report():
        params = {n: p.data().asnumpy() for n, p in net.collect_params().items() if p.grad_req != "null"}
        np.savez(os.path.join(out_dir, "ref.npz" if ref else "slot%d.npz" % slot),
                 **{n.split("_", 1)[1]: v for n, v in params.items()})
        if not ref:
            with open(os.path.join(out_dir, "slot%d.json" % slot), "w") as f:
                json.dump({"steps": done[0], "digest": trainer.stats.final_model_sha256}, f)
    atexit.register(report)

    mx.random.seed(0)
    net = get_model(model)
    net.initialize(mx.init.Xavier())
    opt = {"learning_rate": lr, "momentum": 0.9} if style == "allreduce" else {"learning_rate": lr}
    # DILUTE=1: the reference as if the departed workers' zeros counted in the mean
    dilute = os.environ.get("DILUTE") == "1"
    if ref:
        trainer = gluon.Trainer(net.collect_params(), "sgd", opt, kvstore=None)
    else:
        trainer = mxhet.Trainer(net.collect_params(), "sgd", opt)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for step in range(mine):
        rng = np.random.RandomState(step)   # the same batches on every worker
        x = mx.nd.array(rng.uniform(size=(8, 1, size, size)))
        y = mx.nd.array(rng.randint(0, 10, size=8))
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        if style == "allreduce":
            trainer.allreduce_grads()
            trainer.update(8)
        else:
            trainer.step(8 * 3 / (3 - step // per) if dilute else 8)
        done[0] += 1
''')


def _reference(tmp_path, args, dilute=False):
    env = dict(os.environ, PYTHONPATH=ROOT, REF="1", DILUTE="1" if dilute else "0")
    proc = subprocess.run([sys.executable, str(tmp_path / "prog.py"), str(tmp_path), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(str(tmp_path / "ref.npz")))


def _run(tmp_path, child_pids, model, size, style, per, base_iter, lr=0.05):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    args = [model, str(size), style, str(per), str(lr)]
    proc = launch(["-n", "3", "-s", "1", "--sync", "sync", "--slowdown", "1,1,4", "--base-iter", str(base_iter),
                   "--timeout", "180"],
                  [sys.executable, str(script), str(tmp_path), *args], tmp_path, child_pids, timeout=210)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / ("slot%d.json" % s)).read_text()) for s in range(3)]
    assert [r["steps"] for r in results] == [per, 2 * per, 3 * per]
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests, results
    assert not child_pids.alive()
    finals = [dict(np.load(str(tmp_path / ("slot%d.npz" % s)))) for s in range(3)]
    return finals, _reference(tmp_path, args)


def _assert_same_model(finals, ref, rtol):
    for final in finals:
        assert sorted(final) == sorted(ref)
        for name in ref:
            np.testing.assert_allclose(final[name], ref[name], rtol=rtol, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("style", ["step", "allreduce"])
def test_a_sync_worker_that_ends_its_loop_first_serves_the_rounds_without_diluting_the_mean(tmp_path, child_pids,
                                                                                             style):
    finals, ref = _run(tmp_path, child_pids, "smallcnn", 28, style, 10, 0.05)
    _assert_same_model(finals, ref, rtol=1e-3)


def _distance(a, b):
    return float(np.sqrt(sum(((a[n] - b[n]) ** 2).sum() for n in b)))


def test_a_sync_resnet18_worker_that_ends_its_loop_first(tmp_path, child_pids):
    """ResNet-18 at 32 pixels normalizes its last stage over 8 values per channel (batches of 8, one pixel),
    so its first steps' gradients are large and rounding grows fast: at lr 0.005 plain SGD's model moved by
    2.0 between one and two threads, nearly the 2.2 that dilution changes (at 0.05 the job's lay 0.9 from it
    on one machine, 2.9 on another). At lr 1e-4 rounding stays rounding (0.0007 between the thread counts,
    against 0.042 that dilution changes): the job's model must lie within a quarter of that from plain SGD's."""
    finals, ref = _run(tmp_path, child_pids, "resnet18_v1", 32, "step", 2, 0.0, lr=1e-4)
    diluted = _reference(tmp_path, ["resnet18_v1", "32", "step", "2", "0.0001"], dilute=True)
    gap = _distance(ref, diluted)
    for final in finals:
        assert _distance(final, ref) < 0.25 * gap, (_distance(final, ref), gap)


def test_a_nodelay_worker_that_ends_its_loop_first_serves_the_transfers(tmp_path, child_pids):
    # nodelay: jobs.LEAVING_SCRIPT, slot s running 10 x (s + 1) steps (no reference model: its rounds depend on
    # timing). Slot 2: 30 x 4 x 0.06 s = 7.2 s of steps; slot 0 serves the rounds for over 4.8 s, longer than
    # the 3 s heartbeat timeout (its messages keep it alive)
    proc, results = run_leaving_job(["-n", "3", "-s", "1", "--sync", "nodelay", "--slowdown", "1,1,4",
                                     "--base-iter", "0.06", "--heartbeat-timeout", "3", "--timeout", "120"],
                                    tmp_path, child_pids, steps=10, workers=3, staggered=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [r["steps"] for r in results] == [10, 20, 30]
    assert [r["departed"] for r in results] == [True, True, True]
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests, results
    assert not child_pids.alive()
