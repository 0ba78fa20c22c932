"""Helpers to run real jobs through the launcher in tests."""
import json
import os
import subprocess
import sys

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
    return [sys.executable, "-m", "mxhet.train", "--model", "smallcnn", "--metrics-out", str(metrics_out),
            "--eval-samples", "500", *args]


def load_summary(metrics_out):
    with open(os.path.join(str(metrics_out), "summary.json")) as f:
        return json.load(f)
