"""Helpers to run real jobs through the launcher in tests."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

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


ROUNDS_BUDGET = "240"
"""``--time-budget`` of a job a test ends by ``--max-rounds`` and asserts the count of: mxhet.train's default
60 s ended a 200-round job at round 194 on a loaded machine (a clean `make test` beside two benches)."""


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
    assert_one_model(summary["workers"])


def start(tmp_path, launcher_args, command, env=None):
    """Start ``tools/launch.py`` in a session of its own, its stderr to ``tmp_path/launcher.err``
    (``env``: variables added to its environment, which its processes inherit).

    Returns ``(proc, job_file, err)``; the caller closes ``err`` and records the pids.
    """
    job_file = tmp_path / "job.json"
    err = open(tmp_path / "launcher.err", "w")
    # PYTHONFAULTHANDLER: a process sent SIGABRT prints every thread's stack first (run_job's hang report)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "launch.py"), "--job-file", str(job_file),
                             *launcher_args, "--", *command], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                            env=dict(os.environ, PYTHONPATH=ROOT, PYTHONFAULTHANDLER="1", **(env or {})),
                            start_new_session=True)
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


def elastic_args(mode, workers, base_iter, timeout, *more, heartbeat_timeout=3):
    """``mxhet-launch`` arguments of an elastic job on 127.0.0.1: ``workers`` workers and one server in
    ``mode``, iterations padded to ``base_iter`` s by sleeping, the launcher's ``--timeout`` of ``timeout`` s,
    ``--elastic`` with a ``--heartbeat-timeout`` of ``heartbeat_timeout`` s (None: the launcher's default);
    ``more`` come last."""
    args = ["-n", str(workers), "-s", "1", "--sync", mode, "--base-iter", str(base_iter), "--timeout", str(timeout),
            "--elastic"]
    if heartbeat_timeout is not None:
        args += ["--heartbeat-timeout", str(heartbeat_timeout)]
    return args + list(more)


def run_job(tmp_path, child_pids, launcher_args, command, timeout, env=None, during=None, out=None):
    """Run a job to its end: :func:`start` it, record every pid of its job file in ``child_pids`` (once the
    file appears and again at the end, when a worker started again is in it too), call
    ``during(proc, job_file)`` once the file exists (what a test does while the job runs; its result is the
    :class:`Job`'s ``during``) and wait up to ``timeout`` s for the launcher to end. ``out``: where the
    command writes its reports (default ``tmp_path/out``).

    Returns a :class:`Job`.
    """
    proc, job_file, err = start(tmp_path, launcher_args, command, env=env)
    child_pids.add(proc.pid)
    try:
        wait_for(job_file, proc)
        child_pids.add_job_file(job_file)
        done = during(proc, job_file) if during else None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(hang_report(tmp_path, job_file, timeout)) from None
    finally:
        err.close()
        if job_file.exists():
            child_pids.add_job_file(job_file)
    return Job(tmp_path, code, done, out=out)


def hang_report(tmp_path, job_file, timeout, settle_s=3.0):
    """What a job that did not end in ``timeout`` s was doing: every process of the job file still alive is
    sent SIGABRT, on which Python's fault handler (:func:`start` sets ``PYTHONFAULTHANDLER``) prints every
    thread's stack to the launcher's stderr; returns a message with that stderr's tail. The processes then
    die; the ``child_pids`` fixture ends the launcher."""
    for process in json.loads(job_file.read_text()).get("processes", []):
        if process.get("exit_code") is not None:   # ended (its pid may be another process's by now)
            continue
        try:
            os.kill(process["pid"], signal.SIGABRT)
        except (OSError, KeyError):
            pass
    time.sleep(settle_s)
    lines = (tmp_path / "launcher.err").read_text().splitlines(True)
    text = "".join(line for line in lines if "Extension modules:" not in line)   # (each a 3 kB list)
    return "the job did not end in %g s; its processes' stacks (SIGABRT) at the end of the launcher's stderr:\n%s" % (
        timeout, text[-12000:])


class Job:
    """A launch that ended: the launcher's exit ``code`` and ``stderr``, ``during``'s result, and readers of
    what the job wrote: the job file, the worker reports and ``summary.json`` of ``python -m mxhet.train``
    in ``out`` (:func:`train_command`; by default ``tmp_path/out``), the State Server's ``--state-stats`` in
    ``tmp_path/state.json`` (:data:`STATE_STATS`)."""

    def __init__(self, tmp_path, code, during=None, out=None):
        self.tmp_path, self.code, self.during = tmp_path, code, during
        self.out = tmp_path / "out" if out is None else out
        self.stderr = (tmp_path / "launcher.err").read_text()

    @property
    def record(self):
        """The launcher's job file (``processes``, ``worker_exits``, ``worker_restarts``)."""
        return json.loads((self.tmp_path / "job.json").read_text())

    @property
    def summary(self):
        return load_summary(self.out)

    def state(self, mode):
        """The State Server's record of ``mode`` (``--state-stats``, :data:`STATE_STATS`)."""
        return json.loads((self.tmp_path / STATE_STATS).read_text())[mode]

    def has_report(self, slot):
        return (self.out / ("worker-%d.json" % slot)).exists()

    def report(self, slot):
        """``worker-<slot>.json``."""
        return json.loads((self.out / ("worker-%d.json" % slot)).read_text())

    def reports(self, slots):
        """``{slot: worker-<slot>.json}`` in the order of ``slots``."""
        return {s: self.report(s) for s in slots}

    def dumps(self, slots, round_index):
        """The ``--dump-rounds`` files of ``round_index``, one per slot, in the order of ``slots``."""
        return [np.load(self.out / "dump" / ("slot%d_round%d.npz" % (s, round_index))) for s in slots]

    def ranks(self):
        """``(slot, rank)`` of every worker's ``slot S is PS-LITE rank R`` line, in order (a worker started
        again adds one)."""
        return ranks_logged(self.stderr)

    def slots_of(self, ranks):
        """The sorted slots of the workers that PS-LITE first gave ``ranks``."""
        slot_of = {rank: slot for slot, rank in reversed(self.ranks())}
        return sorted(slot_of[r] for r in ranks)


STATE_STATS = "state.json"
"""Where in ``tmp_path`` a test has the State Server write its record (``--state-stats``)."""


def state_stats(tmp_path):
    """The launcher's ``--state-stats`` arguments for :meth:`Job.state`."""
    return ["--state-stats", str(tmp_path / STATE_STATS)]


def ranks_logged(text):
    """``(slot, rank)`` (ints) of every ``slot S is PS-LITE rank R`` line of the workers' log, in order."""
    return [(int(s), int(r)) for s, r in re.findall(r"slot (\d+) is PS-LITE rank (\d+)", text)]


def wait_for_ranks(err_path, proc, count, timeout=150):
    """The first ``count`` :func:`ranks_logged` of the launcher's stderr file, waiting for them (seconds);
    fails if the job ends first."""
    deadline = time.monotonic() + timeout
    while True:
        seen = ranks_logged(err_path.read_text())
        if len(seen) >= count:
            return seen
        assert proc.poll() is None, "the job ended after %d workers were set up" % len(seen)
        assert time.monotonic() < deadline, "only %d workers were set up" % len(seen)
        time.sleep(0.2)


def assert_one_model(reports, key="final_model_sha256"):
    """Every report (``worker-<slot>.json``, or :data:`LEAVING_SCRIPT`'s with ``key="digest"``) ends on one
    model, and has one."""
    digests = {r[key] for r in reports}
    assert len(digests) == 1 and "" not in digests, digests


def assert_round_moved(dumps, members, pushed=None):
    """A member round's model move, from its members' ``--dump-rounds`` files (``dumps``): every member
    started from one model and pulled one; the move is the members' deltas / ``members`` -- plus, with
    ``pushed`` (the ``.npz`` the kill hook saved), a dead member's push exactly once: neither never nor
    twice, for at least one key it moved."""
    keys = len([f for f in dumps[0].files if f.startswith("after_")])
    assert keys > 0 and (pushed is None or len(pushed.files) == keys), (keys, None if pushed is None else pushed.files)
    moved = 0
    for i in range(keys):
        before, after = dumps[0]["before_%d" % i], dumps[0]["after_%d" % i]
        for d in dumps[1:]:
            assert np.array_equal(after, d["after_%d" % i]) and np.array_equal(before, d["before_%d" % i])
        theirs = before + sum(d["delta_%d" % i] / float(members) for d in dumps)
        if pushed is None:
            np.testing.assert_allclose(after, theirs, rtol=1e-4, atol=1e-6)
            continue
        np.testing.assert_allclose(after, theirs + pushed["arr_%d" % i], rtol=1e-4, atol=1e-6)
        if np.abs(pushed["arr_%d" % i]).max() > 1e-4:   # a key the victim moved: once, neither never nor twice
            assert not np.allclose(after, theirs, rtol=1e-4, atol=1e-6)
            assert not np.allclose(after, theirs + 2 * pushed["arr_%d" % i], rtol=1e-4, atol=1e-6)
            moved += 1
    assert pushed is None or moved > 0


def kill_job(tmp_path, child_pids, launcher_args, command, victims=1, signum=signal.SIGKILL, after=1.0, timeout=150,
             env=None, out=None):
    """Run a job (:func:`run_job`) and, once it trains (the chief's first snapshot in ``out``, by default
    ``tmp_path/out``) and ``after`` seconds more, send ``signum`` to ``victims``: a number of workers that
    are not PS-LITE rank 0 (:func:`non_chief_slots`), a list of slots, or a role (``"state-server"``).

    Returns the :class:`Job`; its ``during`` is the slots (or the role) hit.
    """
    out = tmp_path / "out" if out is None else out

    def kill(proc, job_file):
        wait_for(out / "snapshots" / "000000.params", proc)   # training has started
        time.sleep(after)
        if isinstance(victims, str):
            killed = victims
            record = json.loads(job_file.read_text())
            pids = [p["pid"] for p in record["processes"] if p["role"] == victims]
        else:
            killed = non_chief_slots(tmp_path / "launcher.err", victims) if isinstance(victims, int) else victims
            assert len(killed) == (victims if isinstance(victims, int) else len(victims)), killed
            pids = [worker_pid(job_file, slot) for slot in killed]
        assert pids, killed
        for pid in pids:
            os.kill(pid, signum)
        return killed

    return run_job(tmp_path, child_pids, launcher_args, command, timeout, env=env, during=kill, out=out)


def kill_and_wait(tmp_path, child_pids, launcher_args, command, out, victims=1, signum=signal.SIGKILL,
                  after=1.0, timeout=150, env=None):
    """:func:`kill_job` with the chief's snapshots in ``out``; returns ``(code, stderr, killed)``: the
    launcher's exit status, its stderr and the slots (or the role) hit."""
    job = kill_job(tmp_path, child_pids, launcher_args, command, victims=victims, signum=signum, after=after,
                   timeout=timeout, env=env, out=out)
    return job.code, job.stderr, job.during


def non_chief_slots(err_path, count):
    """Up to ``count`` slots whose worker is not PS-LITE rank 0 (the chief writes summary.json), from the
    workers' log lines."""
    return sorted({slot for slot, rank in ranks_logged(err_path.read_text()) if rank != 0})[:count]


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
