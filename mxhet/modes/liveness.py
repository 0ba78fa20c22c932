"""What the launcher sees of a worker process: a progress note for its hang
watch, and an exit at once on an uncaught error, so that a failed worker
fails the job instead of hanging it."""
import os
import sys

PROGRESS_TRAINER = "trainer"
PROGRESS_BATCH = "batch"
PROGRESS_LATE = "late"   # mxhet.launcher.codes.PROGRESS_LATE: the launcher needs no MXNet to read it
"""What a worker's progress file (``MXHET_PROGRESS_FILE``) says: its Trainer
exists; it finished a step; it was started again (``--max-restarts``) but came
after the job's end and left (the launcher's record of the restart says so).
The launcher's hang watch fails a job whose worker made a Trainer and sits idle
without ever finishing a step."""


def note_progress(path, what):
    """Write ``what`` to the progress file ``path`` (temp file + rename: the
    launcher never reads half a file); nothing without a path. An error is
    ignored: the note only helps the launcher diagnose a hang."""
    if not path:
        return
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write(what)
        os.replace(tmp, path)
    except OSError:
        pass


def exit_on_uncaught_error():
    """Make an uncaught exception end this worker process at once.

    MXNet's dist kvstore waits in a barrier when it is destroyed at exit; a
    worker that dies of an exception would wait there forever (the others never
    come), and so would the whole job. After the traceback is printed, the
    process leaves with ``os._exit(1)`` so that the launcher sees it fail.
    """
    previous = sys.excepthook
    if getattr(previous, "_mxhet", False):
        return

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    hook._mxhet = True
    sys.excepthook = hook
