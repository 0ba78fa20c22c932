"""The cluster launcher: start a PS-LITE job (scheduler, servers, State Server,
workers), forward their output, watch them and end them together.

``mxhet-launch``, ``python -m mxhet.launcher`` and ``tools/launch.py`` are thin
wrappers over :func:`main`. The package:

* :mod:`.cli` -- :func:`parse_args` reads and validates the command line (exit
  code 2 with a message naming the bad value), :func:`main`;
* :mod:`.jobplan` -- :func:`build_plan` turns the options into a :class:`Plan`,
  the list of :class:`ProcessSpec` to start; it starts nothing, so unit tests
  can check every command line and environment variable;
* :mod:`.supervisor` -- :func:`run_plan` starts the processes, prefixes their
  output with their role (``[worker 1] ...``), and ends the whole job when one
  process fails, when the time limit passes or when the launcher gets
  SIGINT/SIGTERM; :mod:`.watch` holds its decisions as a state machine over
  plain observations;
* :mod:`.api` -- :func:`plan` / :func:`run` / :func:`launch`: the launcher as
  a library, returning a :class:`JobResult` with every process's role, host
  and exit code;
* :mod:`.flagdoc` -- the flag reference of ``docs/launcher.md``, generated
  from the parser.

Every child runs in its own session, so the launcher ends a child together with
its own children with ``os.killpg(pid, ...)``: by process id, never by name.

With ``--launcher ssh`` every host must see the same working directory and
Python path (a shared file system, or ``--sync-dst-dir``), and ports are
chosen free on *this* machine. Remote processes are ended over ssh.

Exit codes of :func:`run_plan`: 0 all workers succeeded; 1 a process failed
(or could not be started); 124 the ``--timeout`` passed; 130 / 143 the
launcher got SIGINT / SIGTERM. :func:`main` returns 2 for a usage error.
"""
from .api import launch, plan, run
from .cli import build_parser, main, make_job_keys, parse_args
from .jobplan import *  # noqa: F401,F403  (the constants)
from .jobplan import (Plan, ProcessSpec, _bind_address, _child_pythonpath, _lookup_mode, _source_root,
                   build_plan, find_free_port, read_hostfile, ssh_argv)
from .supervisor import JobResult, ProcessResult, Supervisor, end_children, job_record, run_plan
from .watch import Decision, JobWatch, Observation, describe_exit
