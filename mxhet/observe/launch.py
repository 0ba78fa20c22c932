"""The launcher's side of the live view: ``mxhet-launch --dashboard [HOST:]PORT``.

The launcher calls :func:`add_arguments` on its parser, :func:`check` after
parsing, :func:`make_live_dir` before it builds the plan (a directory whose
path every worker gets as ``MXHET_LIVE_DIR``), :func:`start` once the plan is
built, and :func:`stop` when the job has ended.
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


def start(args, plan, out=sys.stderr):
    """Serve the dashboard of ``plan`` (None without ``--dashboard``); prints its address.

    Raises:
        ConfigError: when the address cannot be bound.
    """
    if not getattr(args, "live_dir", ""):
        return None
    host, port = args.dashboard_address
    board = Dashboard(JobView(devices_of(plan), args.live_dir, mode=plan.mode), host, port).start()
    print("mxhet-launch: dashboard at %s (read-only; JSON at %sapi/state)" % (board.url, board.url),
          file=out, flush=True)
    return board


def stop(args, board, exit_code=None):
    """Stop serving and remove the live directory."""
    if board is not None:
        board.view.set_status("finished" if exit_code == 0 else "failed")
        board.stop()
    if getattr(args, "live_dir", ""):
        shutil.rmtree(args.live_dir, ignore_errors=True)
