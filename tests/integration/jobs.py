"""Helpers to run real jobs through the launcher in tests."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def launch(launcher_args, command, tmp_path, child_pids, timeout=180):
    """Run ``tools/launch.py`` on 127.0.0.1; returns the CompletedProcess.

    Every pid of the job is recorded in ``child_pids`` (ended at teardown).
    """
    job_file = os.path.join(str(tmp_path), "job.json")
    argv = [sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", job_file,
            *launcher_args, "--", *command]
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if os.path.exists(job_file):
            child_pids.add_job_file(job_file)
    return proc


def train_command(metrics_out, *args):
    """``python -m mxhet.train`` on the small CNN; ``args`` come last and override these defaults (argparse
    keeps the last of a repeated option). The final point is scored on 1,000 test images, not all 10,000: a
    test checks how the model was evaluated and that it learned, not its accuracy to the third digit, and
    all 10,000 cost rank 0 about 0.5 CPU s at the end of every job (ten times 1,000's)."""
    return [sys.executable, "-m", "mxhet.train", "--model", "smallcnn", "--metrics-out", str(metrics_out),
            "--eval-samples", "500", "--final-eval-samples", "1000", *args]


def load_summary(metrics_out):
    with open(os.path.join(str(metrics_out), "summary.json")) as f:
        return json.load(f)


WORKER_KEYS = {"rank", "slot", "context", "slowdown", "rounds", "local_iters", "compute_s", "wait_s",
               "bytes_pushed", "bytes_pulled", "samples"}


def check_mode_contract(summary, mode, workers):
    """The contract every mode keeps on a real job of the small CNN (``workers`` of them): a complete
    summary, every worker trained and exchanged, the curve starts from the initial model at t = 0 (at
    chance) and the run scored later ones, and every worker ends holding the same global model."""
    from mxhet.modes import get_mode
    standalone = get_mode(mode).kvstore_type is None
    assert summary["mode"] == mode and len(summary["workers"]) == workers
    for w in summary["workers"]:
        assert WORKER_KEYS <= set(w), sorted(WORKER_KEYS - set(w))
        assert w["rounds"] > 0
        # gcada: a member slower than its whole group never finishes first; all its work is dropped
        assert w["samples"] > 0 or (mode == "gcada" and w["aborted"] > 0 and w["downloads"] > 0), w
        if not standalone:
            assert (w["bytes_pushed"] > 0 or mode == "gcada") and w["bytes_pulled"] > 0, w
    (start, initial), later = summary["curve"][0], summary["curve"][1:]
    assert start < 0.1 and initial < 0.3 and later, summary["curve"]
    assert summary["evaluation"]["batchnorm"] == "none in model"
    digests = {w["final_model_sha256"] for w in summary["workers"]}
    assert len(digests) == 1 and "" not in digests, "workers ended with different global models"


def start(tmp_path, launcher_args, command, env=None):
    """Start ``tools/launch.py`` in a session of its own, its stderr to ``tmp_path/launcher.err``
    (``env``: variables added to its environment, which its processes inherit).

    Returns ``(proc, job_file, err)``; the caller closes ``err`` and records the pids.
    """
    job_file = tmp_path / "job.json"
    err = open(tmp_path / "launcher.err", "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", str(job_file),
                             *launcher_args, "--", *command], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                            env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})), start_new_session=True)
    return proc, job_file, err


def wait_for(path, proc, timeout=120):
    """Wait until ``path`` exists (seconds); fail if the job ends first."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, "the job ended before %s appeared" % path
        assert time.monotonic() < deadline, "%s did not appear" % path
        time.sleep(0.2)


def worker_pid(job_file, slot):
    """The pid of the worker in ``slot``, from a launcher ``--job-file``."""
    record = json.loads(job_file.read_text())
    return next(p["pid"] for p in record["processes"] if p["role"] == "worker" and p["slot"] == slot)


def kill_and_wait(tmp_path, child_pids, launcher_args, command, out, victims=1, signum=signal.SIGKILL,
                  after=1.0, timeout=150, env=None):
    """Start a job (:func:`start`), wait until it trains (the chief's first snapshot in ``out`` and the
    job file), ``after`` seconds more, send ``signum`` to ``victims``, and wait for the launcher to end.

    ``victims``: a number of workers that are not PS-LITE rank 0 (:func:`non_chief_slots`), a list of
    slots, or a role (``"state-server"``). Every pid is recorded in ``child_pids``. Returns
    ``(code, stderr, killed)``: the launcher's exit status, its stderr and the slots (or the role) hit.
    """
    proc, job_file, err = start(tmp_path, launcher_args, command, env=env)
    child_pids.add(proc.pid)
    try:
        wait_for(out / "snapshots" / "000000.params", proc)   # training has started
        wait_for(job_file, proc)
        record = child_pids.add_job_file(job_file)
        time.sleep(after)
        if isinstance(victims, str):
            killed = victims
            pids = [p["pid"] for p in record["processes"] if p["role"] == victims]
        else:
            killed = non_chief_slots(tmp_path / "launcher.err", victims) if isinstance(victims, int) else victims
            assert len(killed) == (victims if isinstance(victims, int) else len(victims)), killed
            pids = [worker_pid(job_file, slot) for slot in killed]
        assert pids, killed
        for pid in pids:
            os.kill(pid, signum)
        code = proc.wait(timeout=timeout)
    finally:
        err.close()
        if job_file.exists():
            child_pids.add_job_file(job_file)   # a restarted process is in it too
    return code, (tmp_path / "launcher.err").read_text(), killed


def non_chief_slots(err_path, count):
    """Up to ``count`` slots whose worker is not PS-LITE rank 0 (the chief writes summary.json), from the
    workers' log lines."""
    found = re.findall(r"slot (\d+) is PS-LITE rank (\d+)", err_path.read_text())
    return sorted({int(slot) for slot, rank in found if rank != "0"})[:count]


# An ordinary loop that just ends: no trainer.finish(), no stop condition; the only mxhet line is the Trainer's.
# Each worker runs ``steps`` steps (``staggered``: slot s runs steps x (s + 1), so slot 0 leaves first). The
# report is written at exit, after the Trainer's own exit hook (atexit runs the last registered first).
LEAVING_SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    import mxnet as mx
    from mxnet import autograd, gluon
    import mxhet
    from mxhet.models import get_model

    out_dir, steps, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    slot = int(os.environ["MXHET_SLOT"])
    mine = steps * (slot + 1) if options.pop("staggered") else steps
    done = [0]

    def report():
        with open(os.path.join(out_dir, "slot%d.json" % slot), "w") as f:
            json.dump({"steps": done[0], "rounds": trainer.stats.rounds,
                       "digest": trainer.stats.final_model_sha256,
                       "departed": getattr(trainer.mode, "departed", None),
                       "members": getattr(trainer.mode, "round_members", None)}, f)
    atexit.register(report)

    mx.random.seed(slot)
    net = get_model("smallcnn")
    net.initialize(mx.init.Xavier())
    trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05}, **options)
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


def run_leaving_job(launcher_args, tmp_path, child_pids, steps, workers, staggered=False, timeout=240,
                    **trainer_options):
    """Run :data:`LEAVING_SCRIPT` under the launcher; returns ``(proc, reports)``, one report per slot
    (``steps``, ``rounds``, ``digest``, and ``departed`` / ``members`` where the mode has them) or an empty
    list if the job failed. ``trainer_options`` go to ``mxhet.Trainer`` (``local_steps``, ``ack``)."""
    script = tmp_path / "prog.py"
    script.write_text(LEAVING_SCRIPT)
    options = json.dumps(dict(trainer_options, staggered=staggered))
    proc = launch(launcher_args, [sys.executable, str(script), str(tmp_path), str(steps), options], tmp_path,
                  child_pids, timeout=timeout)
    if proc.returncode != 0:
        return proc, []
    return proc, [json.loads((tmp_path / ("slot%d.json" % s)).read_text()) for s in range(workers)]
