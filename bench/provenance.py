"""Where a results JSON came from: commit, date, machine, command and seeds, in one record.

Every results JSON the bench writes carries ``"provenance": provenance(...)``,
so a number quoted from it can be traced to the code that made it (a dirty
working tree is flagged: the commit alone would not reproduce it), the day, a
machine described without its hostname, the exact command line and the seeds.
"""
import datetime
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The repository the bench runs from."""


def git_state(root=ROOT):
    """``(commit, dirty)`` of the checkout at ``root``; ``(None, None)`` outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=30).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if not commit or status.returncode != 0:
        return None, None
    return commit, bool(status.stdout.strip())


def memory_bytes():
    """Physical memory of this machine in bytes (None where /proc/meminfo is absent)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def provenance(command=None, seeds=(), contexts=(), now=None, code=None):
    """The provenance record: ``commit``, ``dirty``, ``date`` (UTC, ISO 8601), ``machine`` (CPU model,
    cores, memory, GPUs, Python and MXNet versions; no hostname), ``command`` (the full command line,
    default ``sys.argv``) and ``seeds``.

    ``code``: the ``(commit, dirty)`` of the checkout when the process that made the numbers loaded its
    code (:func:`git_state` then); default the checkout now. A run takes hours and the checkout may move on
    meanwhile: the record names the code that ran, and ``written_on`` the checkout it was written from
    where that differs."""
    from .runner import machine_info
    commit, dirty = git_state() if code is None else code
    now = now or datetime.datetime.now(datetime.timezone.utc)
    record = {"commit": commit, "dirty": dirty, "date": now.replace(microsecond=0).isoformat(),
              "machine": dict(machine_info(contexts), memory_bytes=memory_bytes()),
              "command": [str(a) for a in (command if command is not None else sys.argv)],
              "seeds": sorted({int(s) for s in seeds})}
    if code is not None:
        current = git_state()
        if current != tuple(code):
            record["written_on"] = {"commit": current[0], "dirty": current[1]}
    return record
