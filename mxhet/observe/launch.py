"""The launcher's side of the live view: ``mxhet-launch --dashboard [HOST:]PORT``.

The launcher calls :func:`add_arguments` on its parser, :func:`check` after
parsing, :func:`make_live_dir` before it builds the plan (a directory whose
path every worker gets as ``MXHET_LIVE_DIR``), :func:`start` once the plan is
built, and :func:`stop` when the job has ended. The library API
(:func:`mxhet.launcher.run`) calls :func:`start` and :func:`finish` for any
plan that has a live view.
"""
import os
import shutil
import sys
import tempfile

from ..errors import ConfigError
from .dashboard import Dashboard, JobView, parse_address


def add_arguments(parser):
    """Add ``--dashboard`` to the launcher's parser (its own argument group)."""
    group = parser.add_argument_group("live view")
    group.add_argument("--dashboard", default=None, metavar="[HOST:]PORT",
                       help="serve a read-only live view of the job at http://HOST:PORT/ and its state as JSON "
                            "at /api/state while the job runs (HOST default 127.0.0.1; PORT 0 = a free port; "
                            "off by default)")
    return group


def check(args, parser):
    """Validate ``--dashboard`` after parsing (``args.dashboard_address``); exits 2 naming a bad value."""
    args.dashboard_address = None
    if getattr(args, "dashboard", None) is not None:
        try:
            args.dashboard_address = parse_address(args.dashboard)
        except ConfigError as exc:
            parser.error(str(exc))


def make_live_dir(args):
    """The job's live directory (``args.live_dir``; "" without ``--dashboard``).

    Local jobs keep it in the temporary directory; ssh jobs in the working
    directory, which every host must share (as for the job's keys).
    """
    args.live_dir = ""
    if getattr(args, "dashboard_address", None) is None:
        return ""
    parent = os.getcwd() if getattr(args, "launcher", "local") == "ssh" else None
    args.live_dir = tempfile.mkdtemp(prefix=".mxhet-live-" if parent else "mxhet-live-", dir=parent)
    return args.live_dir


def devices_of(plan):
    """The plan's workers as the dashboard lists them."""
    return [{"slot": p.slot, "host": p.host, "context": p.context, "slowdown": p.slowdown}
            for p in plan.processes if p.role == "worker"]


def start(plan, out=None):
    """Serve the dashboard of ``plan`` (None when the plan has no live view:
    ``plan.live_view`` and ``plan.live_dir`` come from ``--dashboard``);
    prints its address to ``out`` (default stderr).

    Raises:
        ConfigError: when the address cannot be bound.
    """
    if not plan.live_dir or plan.live_view is None:
        return None
    host, port = plan.live_view
    board = Dashboard(JobView(devices_of(plan), plan.live_dir, mode=plan.mode), host, port).start()
    print("mxhet-launch: dashboard at %s (read-only; JSON at %sapi/state)" % (board.url, board.url),
          file=out or sys.stderr, flush=True)
    return board


def finish(board, exit_code=None):
    """Mark the job finished (exit code 0) or failed and stop serving (no-op for None)."""
    if board is not None:
        board.view.set_status("finished" if exit_code == 0 else "failed")
        board.stop()


def stop(args, board, exit_code=None):
    """:func:`finish`, then remove the live directory."""
    finish(board, exit_code)
    if getattr(args, "live_dir", ""):
        shutil.rmtree(args.live_dir, ignore_errors=True)
