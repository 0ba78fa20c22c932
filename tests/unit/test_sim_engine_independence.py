"""A simulator run's result does not depend on MXNet's engine.

The replicas' BatchNorm statistics are model state that the delta modes exchange and
that the final model includes. Read on MXNet's threaded engine they must be the values
the NaiveEngine (which runs every operator at once) would see, or a run's digest
depends on timing (see ``mxhet.sim.engine.build_devices``).
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(240)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A BatchNorm model, small input, a few real iterations: a few seconds per run. ESync reads the replicas'
# statistics on every path a stale read once took (deltas, the global model, snapshots, final copies); a
# standalone run reads them on the last two only, so its pair of runs proved nothing more. The digest is
# the final model's, taken before any snapshot is scored: one precise-BN batch per score is enough.
JOBS = {
    "esync": ["-n", "2", "--sync", "esync", "--slowdown", "1,2", "--max-iterations", "16"],
}
COMMON = ["--model", "resnet18_v1", "--input-size", "16", "--batch-size", "16", "--lr", "0.05",
          "--base-iter", "0.1", "--time-budget", "1000", "--eval-samples", "50", "--final-eval-samples", "50",
          "--bn-batches", "1", "--no-progress"]


def _start(out, mode, engine, child_pids):
    env = dict(os.environ, MXNET_ENGINE_TYPE=engine, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.Popen([sys.executable, "-m", "mxhet.sim", *JOBS[mode], *COMMON, "--metrics-out", str(out)],
                            cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    child_pids.add(proc.pid)
    return proc


def _digests(out):
    summary = json.loads((out / "summary.json").read_text())
    return {w["final_model_sha256"] for w in summary["workers"]}


@pytest.mark.parametrize("mode", sorted(JOBS))
def test_threaded_and_naive_engines_give_the_same_model(tmp_path, mode, child_pids):
    # ThreadedEnginePerDevice is MXNet's default; named here so that a caller's setting cannot hide the race.
    runs = {engine: (tmp_path / engine, None) for engine in ("ThreadedEnginePerDevice", "NaiveEngine")}
    for engine, (out, _) in runs.items():
        runs[engine] = (out, _start(out, mode, engine, child_pids))
    for engine, (out, proc) in runs.items():
        log, _ = proc.communicate(timeout=200)
        assert proc.returncode == 0, "%s run failed:\n%s" % (engine, log[-3000:])
    threaded, naive = (_digests(runs[e][0]) for e in ("ThreadedEnginePerDevice", "NaiveEngine"))
    assert len(naive) == 1 and threaded == naive
