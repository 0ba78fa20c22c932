"""The supervisor's decisions as a small state machine over plain data.

:class:`JobWatch` sees, at each poll, one :class:`Observation` per process
(role, exit code, when it last wrote, whether its output ends in an uncaught
Python exception, how much CPU it used) and returns a :class:`Decision`:
continue, restart the State Server, or finish with an exit code and the
processes to blame. It starts nothing and reads no clock of its own, so unit
tests drive it with made-up observations (:mod:`.supervisor` is the executor).

Phases: ``running`` (workers at work) -> ``draining`` (every worker exited 0;
the scheduler and servers get ``server_grace`` s to stop on their own) ->
``finished``.

Rules, in order:

1. a process that exited non-zero fails the job (the State Server is started
   again instead while restarts are left, and no longer matters once every
   worker is done);
2. the scheduler or a server that exited 0 while workers run fails the job
   unless the workers follow within ``worker_grace`` s of their last CPU use
   (a worker past PS-LITE's final barrier may still be tearing MXNet down on
   a loaded machine), and within ``EARLY_EXIT_BUSY_CAP_S`` s in all;
3. a *stuck* worker fails the job: one whose output ends in an uncaught Python
   exception and that has neither written nor used CPU for ``hang_grace`` s
   (MXNet 1.9.1 keeps such a worker alive in PS-LITE's exit barrier, and a
   plain MXNet worker never talks to the State Server, whose heartbeat watch
   would catch it otherwise);
4. an *orphaned* worker fails the job: every other worker has exited, and it
   has used no CPU for ``orphan_grace`` s (waiting for peers that are gone);
5. a worker *stalled before its first step* fails the job: its
   ``mxhet.Trainer`` exists but no ``step()`` has returned, and it has used no
   CPU for ``start_grace`` s (e.g. waiting in PS-LITE's start-up barrier for a
   second dist kvstore, or for a peer that never joins); it prints nothing, so
   rule 3 never sees it;
6. a worker *started again too late* (``--max-restarts``) is ended, not
   failed: every other worker has exited, at least one with 0, and the
   replacement has not finished a step (its progress note says ``started`` or
   ``trainer``: it never took part in a round). Nobody is left to train with
   it and the others' final models are out, so it has nothing to add; left
   alone it may hang before it reaches the State Server, in PS-LITE's
   recovery while the scheduler and servers end, and rule 4 would fail the
   job. While it uses CPU (still importing, building its model), and for
   ``late_grace`` s once it is idle or its CPU time is unknown, rules 2 to 5
   spare it: it may register and hear the State Server's ``over``, which ends
   it with exit 0 and a ``late`` event in the State Server's record. Then the
   decision is ``end``, and the job drains and succeeds (the supervisor
   records the restart as ``too_late``). A replacement that has been starting
   for ``start_grace`` s or more when the others finish, or that is still busy
   starting ``start_grace`` s after its start, is a genuine hang and fails the
   job; one whose note is unknown (remote), ``batch`` or ``late`` is left to
   rules 1 to 5.

With ``elastic`` (``mxhet-launch --elastic``) rule 1 spares the workers: one
that exits non-zero has left the job (the State Server drops it, the others
train on), and the job succeeds once every worker has exited and at least one
of them exited 0; it fails only when none did (e.g. every survivor stopped
because the job fell below its minimum of live workers).

Under ``--max-restarts`` a departed worker is started again after the delay
while another worker trains; with spares (``--max-restarts`` above 1, processes
of role ``spare``) the decision is ``activate`` instead: an idle spare on the
dead worker's host, else the first idle one, takes over its slot, and the dead
worker is never served again. Spares are not workers for rules 2 to 6; one that
exits non-zero fails the job (rule 1), and the drain waits for the idle ones,
which the supervisor tells to exit.

Rules 3 to 5 need the worker's CPU time (read from /proc, on the worker's
host over ssh for a remote one); where it is unknown (no /proc, or the probe
failed) rule 3 goes by output alone and rules 4 and 5 do not apply. Rule 5
also needs the worker's progress note (``MXHET_PROGRESS_FILE``, written by
``mxhet.Trainer``), which a local worker has: a plain MXNet program writes
none and is not judged by it.
"""
import dataclasses
from typing import Optional

from .codes import (EXIT_FAILED, EXIT_OK, EXIT_STATE_SERVER_SILENT_WORKER, EXIT_USAGE, PROGRESS_STARTED,
                    PROGRESS_TRAINER, SCHEDULER, SERVER, SPARE, STATE_SERVER, WORKER)

#: Seconds a worker whose output ends in an uncaught exception may stay silent
#: and idle before the job is declared failed.
DEFAULT_HANG_GRACE_S = 10.0
#: Seconds a worker whose peers have all exited may stay idle (no CPU).
DEFAULT_ORPHAN_GRACE_S = 30.0
#: Seconds a worker whose Trainer exists but that never finished a step may
#: stay idle (no CPU): long against the slowest peer's start-up (data loading,
#: model initialization on a loaded machine) that the first step waits for.
DEFAULT_START_GRACE_S = 120.0
#: Seconds of no CPU use a worker started again that has not finished a step gets, once every other
#: worker has exited, to register and leave by itself (the State Server answers it ``over``) before it
#: is ended (rule 6): one that computes is still starting up; one idle this long waits for peers.
DEFAULT_LATE_GRACE_S = 5.0
#: Seconds a worker still using CPU may run on after the scheduler or a server exited 0 (rule 2).
EARLY_EXIT_BUSY_CAP_S = 60.0
#: CPU seconds below which a process counts as idle over a grace period.
IDLE_CPU_S = 0.05


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the supervisor knows about one process at one poll.

    ``returncode`` is None while it runs; ``last_output`` the monotonic time
    of its last output line (or its start); ``exception`` True when its last
    stderr lines are an uncaught Python exception's traceback; ``cpu_s`` its
    process group's CPU seconds so far, None when unknown; ``progress`` its
    progress note: None (unknown), ``"trainer"`` (its Trainer exists, no step
    has returned) or ``"batch"`` (a step has returned).
    """
    name: str
    role: str
    returncode: Optional[int] = None
    last_output: float = 0.0
    exception: bool = False
    cpu_s: Optional[float] = None
    progress: Optional[str] = None
    host: str = ""


@dataclasses.dataclass(frozen=True)
class Decision:
    """``action`` is ``continue``, ``restart`` (``index``: the process to
    start again), ``activate`` (``index``: a dead worker whose slot the idle
    spare ``spare`` takes over, ``--max-restarts`` above 1), ``end``
    (``index``: a worker started again too late, rule 6) or ``finish`` (``exit_code``; ``failures``: (index, why)
    pairs; ``note``: a line for the console)."""
    action: str
    exit_code: Optional[int] = None
    failures: tuple = ()
    index: Optional[int] = None
    note: str = ""
    spare: Optional[int] = None


CONTINUE = Decision("continue")


def describe_exit(returncode):
    """``exited with code 3`` / ``was killed by signal SIGKILL (9)``."""
    import signal
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return "was killed by signal %s (%d)" % (name, -returncode)
    return "exited with code %d" % returncode


def exit_cause(returncode):
    """A worker's end as the job's record says it: ``killed by signal 9 (SIGKILL)`` / ``exit code 3``."""
    import signal
    if returncode is not None and returncode < 0:
        try:
            return "killed by signal %d (%s)" % (-returncode, signal.Signals(-returncode).name)
        except ValueError:
            return "killed by signal %d" % -returncode
    return "exit code %s" % returncode


class JobWatch:
    """Decides, poll by poll, whether the job goes on (see the module docstring).

    Args:
        server_grace, worker_grace, hang_grace, orphan_grace, start_grace, late_grace:
            seconds (see the rules); 0 turns rule 3, 4 or 5 off (``late_grace`` 0: rule 6 ends at once).
        state_server_restarts: how often a State Server that died is started again.

    Raises:
        ValueError: for a negative grace or restart count.
    """

    def __init__(self, *, server_grace, worker_grace, hang_grace=DEFAULT_HANG_GRACE_S,
                 orphan_grace=DEFAULT_ORPHAN_GRACE_S, start_grace=DEFAULT_START_GRACE_S, state_server_restarts=0,
                 elastic=False, worker_restarts=0, worker_restart_delay=0.0, late_grace=DEFAULT_LATE_GRACE_S):
        for name, value in (("server_grace", server_grace), ("worker_grace", worker_grace),
                            ("hang_grace", hang_grace), ("orphan_grace", orphan_grace),
                            ("start_grace", start_grace),
                            ("state_server_restarts", state_server_restarts),
                            ("worker_restarts", worker_restarts), ("worker_restart_delay", worker_restart_delay),
                            ("late_grace", late_grace)):
            if value is None or value < 0:
                raise ValueError("%s must be >= 0, got %r" % (name, value))
        self.server_grace = server_grace
        self.worker_grace = worker_grace
        self.hang_grace = hang_grace
        self.orphan_grace = orphan_grace
        self.start_grace = start_grace
        self.late_grace = late_grace
        self.restarts_left = state_server_restarts
        self.elastic = bool(elastic)
        self._departed = set()      # elastic: workers whose exit was reported as a departure
        self.worker_restarts_left = worker_restarts
        self.worker_restart_delay = worker_restart_delay
        self._dead_since = {}       # worker index -> when its death was seen (a restart is due after the delay)
        self.restarts = []          # (index, seen dead at, restarted at) per worker restart, for the record
        self._starting = {}         # worker index -> when it was started again, until it trains, ends or is ended
        self._alone_since = {}      # worker index -> when rule 6 first found every other worker gone
        self.late_ends = []         # (index, at) per replacement ended as too late (rule 6), for the record
        self._replaced = set()      # dead workers whose slot a spare took over (each is served once)
        self.spares_used = []       # (dead worker index, spare index) per activation, for the record
        self.departures = []        # (index, seen at) per worker exit the job went on after (elastic), for the record
        self.phase = "running"
        self._early = None          # (index of a service that exited 0 early, deadline)
        self._drain_deadline = None
        self._cpu_marks = {}        # index -> (cpu_s, since): CPU use at the start of an idle stretch

    def restarted(self, index):
        """The supervisor started process ``index`` again: forget what was known of it."""
        self._cpu_marks.pop(index, None)
        self._departed.discard(index)

    def _worker_restart(self, observations, workers, spared, now):
        """Rule 1 under ``--max-restarts``: a departed worker is started again once the delay
        after its death has passed, while another worker still trains; returns the Decision or None."""
        running = [i for i in workers if observations[i].returncode is None]
        for i in sorted(spared - self._replaced):
            if self.worker_restarts_left <= 0 or not running:
                return None
            seen = self._dead_since.setdefault(i, now)
            if now - seen >= self.worker_restart_delay:
                self.worker_restarts_left -= 1
                del self._dead_since[i]
                if i not in self._departed:   # restarted at the poll that saw it end (no delay)
                    self.departures.append((i, seen))
                self.restarts.append((i, seen, now))
                spare = self._idle_spare(observations, observations[i].host)
                if spare is not None:
                    # the spare becomes the slot's worker at its own index; the dead one stays departed
                    self._departed.add(i)
                    self._replaced.add(i)
                    self.spares_used.append((i, spare))
                    self._starting[spare] = now
                    return Decision("activate", index=i, spare=spare,
                                    note="%s %s; %s takes over its slot (%d worker restart(s) left)"
                                    % (observations[i].name, describe_exit(observations[i].returncode),
                                       observations[spare].name, self.worker_restarts_left))
                self.restarted(i)
                self._starting[i] = now
                return Decision("restart", index=i,
                                note="%s %s; starting it again in its slot (%d worker restart(s) left)"
                                % (observations[i].name, describe_exit(observations[i].returncode),
                                   self.worker_restarts_left))
        return None

    def _idle_spare(self, observations, host):
        """An idle spare (``--max-restarts`` above 1) to serve a death on ``host``: one on that host if there
        is one, else any; the lowest index first. None when no spare is left (the worker is started again
        itself, through PS-LITE's recovery)."""
        idle = [j for j, o in enumerate(observations) if o.role == SPARE and o.returncode is None]
        return next((j for j in idle if observations[j].host == host), idle[0] if idle else None)

    def _idle_since(self, index, obs, now):
        """Since when process ``index`` has used no CPU (None if unknown)."""
        if obs.cpu_s is None:
            return None
        mark = self._cpu_marks.get(index)
        if mark is None or obs.cpu_s - mark[0] > IDLE_CPU_S:
            self._cpu_marks[index] = (obs.cpu_s, now)
            return now
        return mark[1]

    def decide(self, observations, now):
        """One poll: ``observations`` in process order, ``now`` monotonic seconds."""
        if self.phase == "finished":
            raise RuntimeError("the job is already finished")
        workers = [i for i, o in enumerate(observations) if o.role == WORKER]
        workers_done = all(observations[i].returncode == 0 for i in workers)
        spared = set()   # elastic: workers whose non-zero exit is a departure, not a failure
        if self.elastic:
            exited = all(observations[i].returncode is not None for i in workers)
            anyone_ok = any(observations[i].returncode == 0 for i in workers)
            if not (exited and not anyone_ok):
                spared = {i for i in workers if observations[i].returncode not in (None, 0)}
            workers_done = exited and anyone_ok
        if not workers_done:
            for i, o in enumerate(observations):
                if (o.role == STATE_SERVER and o.returncode not in (None, 0, EXIT_USAGE,
                                                                    EXIT_STATE_SERVER_SILENT_WORKER)
                        and self.restarts_left > 0):
                    self.restarts_left -= 1
                    self.restarted(i)
                    return Decision("restart", index=i,
                                    note="state-server %s; restarting it on the same address (%d restart(s) left)"
                                    % (describe_exit(o.returncode), self.restarts_left))
        failures = [(i, describe_exit(o.returncode)) for i, o in enumerate(observations)
                    if o.returncode not in (None, 0) and not (workers_done and o.role == STATE_SERVER)
                    and i not in spared]
        if not workers_done and not failures and self._starting:
            late, hung = self._late_replacement(observations, workers, now)
            if late is not None:
                return late
            failures += hung
        if not workers_done:
            failures += self._early_service_exit(observations, workers, now)
            failures += self._stuck_workers(observations, workers, now)
        if failures:
            return self._finish(EXIT_FAILED, failures)
        if workers_done:
            if self.phase == "running":
                self.phase = "draining"
                self._drain_deadline = now + self.server_grace
                # (by slot: a slot a spare took over has its dead worker too)
                note = "all %d workers finished" % len({observations[i].name for i in workers})
            else:
                note = ""
            running = [o.name for o in observations if o.role in (SCHEDULER, SERVER, SPARE) and o.returncode is None]
            if not running:
                return self._finish(EXIT_OK, (), note)
            if now >= self._drain_deadline:
                return self._finish(EXIT_OK, (), "%s still running %g s after the workers finished; ending them"
                                    % (", ".join(running), self.server_grace))
            return Decision("continue", note=note)
        restart = self._worker_restart(observations, workers, spared, now)
        if restart is not None:
            return restart
        new = sorted(spared - self._departed)
        if new:
            self._departed.update(new)
            self.departures.extend((i, now) for i in new)
            return Decision("continue", note="; ".join(
                "%s %s: it leaves the job, the others train on (--elastic)"
                % (observations[i].name, describe_exit(observations[i].returncode)) for i in new))
        return CONTINUE

    def _late_replacement(self, observations, workers, now):
        """Rule 6: (the ``end`` Decision or None, failures) for the workers started again."""
        for i, since in sorted(self._starting.items()):
            o = observations[i]
            if o.returncode is not None or o.progress not in (PROGRESS_STARTED, PROGRESS_TRAINER):
                del self._starting[i]   # ended, trained a step (a member now), leaving late on its own, or unknown
                self._alone_since.pop(i, None)
                continue
            others = [observations[j].returncode for j in workers if j != i]
            if None in others or 0 not in others:
                continue
            alone = self._alone_since.setdefault(i, now)
            if self.start_grace and alone - since >= self.start_grace:
                return None, [(i, "was started again %g s ago and has not finished a step; every other worker "
                                  "has exited (hung in its start-up?)" % (now - since))]
            idle_since = self._idle_since(i, o, now)
            quiet_since = alone if idle_since is None else max(alone, idle_since)
            if now - quiet_since >= self.late_grace:
                del self._starting[i]
                self.late_ends.append((i, now))
                return Decision("end", index=i, note=(
                    "%s, started again %g s ago, has not finished a step and every other worker has finished: "
                    "it comes too late, nothing is left for it to take part in; ending it (not a failure)"
                    % (o.name, now - since))), []
            if self.start_grace and now - since >= self.start_grace:
                return None, [(i, "was started again %g s ago and is still starting up (no step) after every "
                                  "other worker exited" % (now - since))]
            return CONTINUE, []   # busy starting up: it may still register and hear "over" (rules 2 to 5 wait)
        return None, []

    def _finish(self, code, failures, note=""):
        self.phase = "finished"
        return Decision("finish", exit_code=code, failures=tuple(failures), note=note)

    def _early_service_exit(self, observations, workers, now):
        # PS-LITE's final barrier or the State Server's goodbyes may let a
        # service stop a moment before the last worker, which then tears down
        # MXNet (seconds of CPU on a loaded machine): a worker gets the grace
        # from when it last used CPU, up to EARLY_EXIT_BUSY_CAP_S in all.
        stopped = [i for i, o in enumerate(observations)
                   if o.role in (SCHEDULER, SERVER) and o.returncode == 0]
        if stopped and self._early is None:
            self._early = (stopped[0], now)
        if self._early is None:
            return []
        index, since = self._early
        running = [i for i in workers if observations[i].returncode is None]
        idle = [self._idle_since(i, observations[i], now) for i in running]   # None: CPU unknown
        if now - since < max(EARLY_EXIT_BUSY_CAP_S, self.worker_grace) and all(
                now - (since if t is None else max(since, t)) < self.worker_grace for t in idle):
            return []
        names = ", ".join(observations[i].name for i in running)
        return [(index, "exited with code 0 while workers were still running (%s)" % names)]

    def _stuck_workers(self, observations, workers, now):
        found = []
        running = [i for i in workers if observations[i].returncode is None]
        for i in running:
            o = observations[i]
            idle_since = self._idle_since(i, o, now)
            quiet_since = o.last_output if idle_since is None else max(o.last_output, idle_since)
            if self.hang_grace and o.exception and now - quiet_since >= self.hang_grace:
                found.append((i, "printed an uncaught exception and has neither exited nor written for %g s "
                                 "(held in PS-LITE's exit barrier?)" % (now - o.last_output)))
            elif (self.orphan_grace and idle_since is not None and len(workers) > 1 and running == [i]
                  and now - idle_since >= self.orphan_grace):
                found.append((i, "is the last worker running, idle for %g s after every other worker exited "
                                 "(waiting for peers that are gone?)" % (now - idle_since)))
            elif (self.start_grace and idle_since is not None and o.progress == "trainer"
                  and now - idle_since >= self.start_grace):
                found.append((i, "created its mxhet.Trainer but has not finished a step, and has used no CPU for "
                                 "%g s (waiting for PS-LITE, e.g. a second dist kvstore, or for a peer that never "
                                 "joins?)" % (now - idle_since)))
        return found
