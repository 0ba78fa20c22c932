"""Process roles and exit codes, shared by the plan, the watch and the supervisor."""

SCHEDULER = "scheduler"
SERVER = "server"
STATE_SERVER = "state-server"
WORKER = "worker"
SPARE = "spare"   # --max-restarts above 1: a worker process held idle until it takes a dead worker's slot

PROGRESS_STARTED = "started"
"""The progress note the launcher writes for a worker it starts again (``--max-restarts``), before the
process starts: the dead worker's note is gone, and until the new one's Trainer writes ``trainer`` (then
``batch`` after its first step) the launcher knows it is still starting up."""
PROGRESS_TRAINER = "trainer"   # mxhet.modes.liveness: the worker's Trainer exists, no step has returned
PROGRESS_BATCH = "batch"       # mxhet.modes.liveness: a step has returned
PROGRESS_LATE = "late"
"""A worker's progress note (``MXHET_PROGRESS_FILE``) when, started again (``--max-restarts``), it came
after the job's end and left with exit 0 (:data:`mxhet.modes.liveness.PROGRESS_LATE`, the same word)."""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STATE_SERVER_SILENT_WORKER = 4  # mxhet.state_server: a worker went silent
EXIT_TIMEOUT = 124
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
