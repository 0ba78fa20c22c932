"""The launcher as a library: ``plan -> run -> JobResult``.

::

    from mxhet import launcher
    job = launcher.plan(["-n", "2", "-s", "1", "--sync", "sync", "--", "python", "train.py"])
    result = launcher.run(job)            # blocks until the job is over
    result.exit_code, [(p.role, p.host, p.exit_code) for p in result.processes]

:func:`plan` takes ``mxhet-launch``'s own command line, so everything the
tool accepts the API accepts; the :class:`~mxhet.launcher.jobplan.Plan` it
returns is plain data (commands, environments, hosts) that starts nothing.
:func:`run` is what ``mxhet-launch`` does after parsing.
"""
import contextlib
import io
import shutil

from ..errors import ConfigError
from ..observe import launch as live_view
from .cli import make_job_keys, parse_args
from .jobplan import build_plan
from .supervisor import JobResult, ProcessResult, Supervisor  # noqa: F401  (part of the API)


def plan(argv):
    """The :class:`Plan` of ``mxhet-launch ARGV`` (a list of strings, the
    worker command after ``--``). Creates the job's CURVE keys (unless
    ``--no-auth``); they are removed when :func:`run` ends, listed in
    ``plan.scratch``.

    Raises:
        ConfigError: for a usage error, with argparse's message.
    """
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parse_args(list(argv))
    except SystemExit as exc:
        lines = err.getvalue().strip().splitlines()
        raise ConfigError(lines[-1] if lines else "invalid launcher arguments (exit %s)" % exc.code) from None
    keys = None
    try:
        if args.needs_state_server and not args.no_auth:
            keys = args.control_keys = make_job_keys(args)
        live_view.make_live_dir(args)
        return build_plan(args)
    except BaseException:
        for directory in (keys, getattr(args, "live_dir", "")):
            if directory:
                shutil.rmtree(directory, ignore_errors=True)
        raise


def run(job_plan, *, out=None, hooks=(), **options):
    """Run ``job_plan`` to its end; returns a :class:`JobResult` (exit code,
    status, and every process's role, host, pid and exit code). A plan made
    with ``--dashboard`` serves its live view while the job runs, as
    ``mxhet-launch`` does (the address is printed to ``out``).

    Args:
        out: a text stream for the job's output (default: this process's
            stdout/stderr), e.g. an open log file.
        hooks: see :class:`~mxhet.launcher.supervisor.Supervisor`.
        options: override the plan's supervision settings (``timeout``,
            ``job_file``, ``state_server_restarts``, ``hang_grace``,
            ``orphan_grace``, ``start_grace``) or the supervisor's graces (``server_grace``,
            ``worker_grace``, ``kill_grace``, ``poll_interval``).

    Raises:
        ConfigError: when the live view's address cannot be bound.
    """
    settings = {"timeout": job_plan.timeout, "job_file": job_plan.job_file,
                "state_server_restarts": job_plan.state_server_restarts,
                "hang_grace": job_plan.hang_grace, "orphan_grace": job_plan.orphan_grace,
                "start_grace": job_plan.start_grace}
    settings.update(options)
    board = result = None
    try:
        board = live_view.start(job_plan, out=out)
        result = Supervisor(job_plan, out=out, hooks=hooks, **settings).run()
        return result
    finally:
        live_view.finish(board, result.exit_code if result is not None else None)
        for directory in job_plan.scratch:
            shutil.rmtree(directory, ignore_errors=True)


def launch(argv, **kwargs):
    """:func:`plan` then :func:`run`."""
    return run(plan(argv), **kwargs)
