"""The supervisor's rule under ``mxhet-launch --elastic --max-restarts K`` (mxhet.launcher.watch):
a dead worker is started again in its slot once both heartbeat timeouts have passed, while
another worker still trains, at most K times in all."""
import pytest

from mxhet.launcher.watch import CONTINUE
from tests.unit.test_launcher_watch import job, watch

WORKER_1 = 4   # index of "worker 1" among the observations (after scheduler, server, State Server, worker 0)


def test_a_dead_worker_is_started_again_after_the_delay_and_counts_as_running_again():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7)
    d = w.decide(job(None, -9, None), 0)
    assert d.action == "continue" and "others train on" in d.note
    assert w.decide(job(None, -9, None), 6.9).action == "continue"   # PS-LITE would give it no id yet
    d = w.decide(job(None, -9, None), 7)
    assert (d.action, d.index) == ("restart", WORKER_1)
    assert "starting it again in its slot (0 worker restart(s) left)" in d.note
    assert w.restarts == [(WORKER_1, 0, 7)]
    # the replacement runs; when everyone finishes the job succeeds
    assert w.decide(job(None, None, None), 8).action == "continue"
    assert w.decide(job(0, 0, 0), 9).action == "continue" and w.phase == "draining"


def test_restarts_are_bounded_and_a_second_death_is_a_departure():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=0)
    assert w.decide(job(None, -9, None), 0).action == "restart"
    d = w.decide(job(None, -9, None), 1)   # the replacement died too: no restart left
    assert d.action == "continue" and "others train on" in d.note
    assert w.decide(job(None, -9, None), 50).action == "continue"


def test_no_restart_once_no_other_worker_trains():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=5)
    w.decide(job(None, -9, None), 0)
    d = w.decide(job(0, -9, 0), 6)   # the others finished meanwhile: nobody to rejoin
    assert d.action == "continue" and w.phase == "draining"


def test_a_negative_restart_count_is_refused():
    with pytest.raises(ValueError, match="worker_restarts must be >= 0"):
        watch(elastic=True, worker_restarts=-1)


def test_max_restarts_plans_pslite_heartbeats_and_the_restart_delay():
    from mxhet import launcher
    plan = launcher.plan(["-n", "2", "-s", "1", "--sync", "esync", "--elastic", "--max-restarts", "1",
                          "--", "python", "train.py"])
    assert plan.worker_restarts == 1 and plan.worker_restart_delay == 5.0 + 2.0   # the State Server's 5 s + 2
    by_role = {p.role: p.env for p in plan.processes}
    assert by_role["scheduler"]["PS_HEARTBEAT_TIMEOUT"] == "3"
    assert all(p.env.get("PS_HEARTBEAT_INTERVAL") == "1" for p in plan.processes if p.role != "state-server")
    plain = launcher.plan(["-n", "2", "-s", "1", "--sync", "esync", "--elastic", "--", "python", "train.py"])
    assert plain.worker_restarts == 0 and not any("PS_HEARTBEAT_INTERVAL" in p.env for p in plain.processes)


def test_max_restarts_needs_elastic():
    from mxhet import launcher
    from mxhet.errors import ConfigError
    with pytest.raises(ConfigError, match="--max-restarts 1 needs --elastic"):
        launcher.plan(["-n", "2", "--sync", "esync", "--max-restarts", "1", "--", "python", "train.py"])


def test_more_restarts_than_pslite_recovers_take_spares_started_with_the_job():
    # MXNet 1.9.1's PS-LITE serves one recovery per job: above it every restart takes a spare (test_spares.py)
    from mxhet import launcher
    plan = launcher.plan(["-n", "4", "--sync", "esync", "--elastic", "--max-restarts", "2", "--", "python",
                          "train.py"])
    assert plan.worker_restarts == 2 and len(plan.by_role("spare")) == 2


def test_two_dead_workers_and_one_restart_left_restart_the_first_and_let_the_other_go():
    # job(): the scheduler, the server and the State Server come first, so worker i is index 3 + i
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=2.0)
    d = w.decide(job(None, -9, -9), 0.0)
    assert d.action == "continue" and "worker 1" in d.note and "worker 2" in d.note
    assert w.decide(job(None, -9, -9), 1.0).action == "continue"
    d = w.decide(job(None, -9, -9), 2.0)
    assert (d.action, d.index) == ("restart", 4) and "worker 1" in d.note
    for t in (3.0, 9.0, 30.0):   # worker 2 stays gone: no restart left
        assert w.decide(job(None, None, -9), t).action == "continue"
    d = w.decide(job(0, 0, -9), 31.0)
    assert d.action == "continue" and w.phase == "draining"
    assert w.departures == [(4, 0.0), (5, 0.0)]


# -- rule 6: a replacement still starting when every other worker has finished -------------------------------

def _replacement(progress, cpu=None):
    from tests.unit.test_launcher_watch import obs
    return obs("worker 1", "worker", None, cpu=cpu, progress=progress)


def _restarted_at(w, t):
    """A 3-worker job whose worker 1 died at 0 and was started again at ``t``."""
    w.decide(job(None, -9, None), 0)
    d = w.decide(job(None, -9, None), t)
    assert (d.action, d.index) == ("restart", WORKER_1)


@pytest.mark.parametrize("progress", ["started", "trainer"])
def test_a_replacement_still_starting_when_the_others_finished_is_ended_and_the_job_succeeds(progress):
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7, start_grace=120)
    _restarted_at(w, 7)
    # the others train on while it starts up: nothing to decide
    assert w.decide(job(None, _replacement(progress, cpu=1.0), None), 20).action == "continue"
    assert w.decide(job(0, _replacement(progress, cpu=1.0), None), 25).action == "continue"
    # the last other worker finished: it gets late_grace (5 s) to register and leave by itself, and
    # meanwhile neither the orphan watch (idle 30 s) nor a service that stopped (worker_grace 5 s) fails it
    services_done = (("scheduler", 0), ("server 0", 0), ("state-server", None))
    for t in (26, 28, 30.9):
        assert w.decide(job(0, _replacement(progress, cpu=1.0), 0, services=services_done), t) is CONTINUE
    # then it is too late: ended (not failed)
    d = w.decide(job(0, _replacement(progress, cpu=1.0), 0, services=services_done), 31)
    assert (d.action, d.index) == ("end", WORKER_1)
    assert "worker 1, started again 24 s ago" in d.note and "not a failure" in d.note
    assert w.late_ends == [(WORKER_1, 31)]
    # ended by SIGTERM: the job drains and succeeds
    d = w.decide(job(0, -15, 0), 32)
    assert d.action == "continue" and w.phase == "draining"
    done = (("scheduler", 0), ("server 0", 0), ("state-server", 0))
    assert (w.decide(job(0, -15, 0, services=done), 33).action, w.phase) == ("finish", "finished")


def test_a_late_replacement_still_busy_starting_up_is_given_time_until_start_grace():
    # at load its imports and model take long: it uses CPU, so it is not ended while it does
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7, start_grace=120, late_grace=5)
    _restarted_at(w, 7)
    for k, t in enumerate((26, 30, 40, 60)):
        assert w.decide(job(0, _replacement("started", cpu=1.0 + k), 0), t) is CONTINUE
    # it registers, is answered "over" and leaves by itself
    assert w.decide(job(0, _replacement("late", cpu=9.0), 0), 61).action == "continue"
    assert w.decide(job(0, 0, 0), 62).action == "continue" and w.phase == "draining" and w.late_ends == []
    # another, busy until 120 s after its start without finishing its start-up: a hang (a spin)
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7, start_grace=120, late_grace=5)
    _restarted_at(w, 7)
    for k, t in enumerate((26, 60, 100, 126)):
        assert w.decide(job(0, _replacement("trainer", cpu=1.0 + k), 0), t) is CONTINUE
    d = w.decide(job(0, _replacement("trainer", cpu=9.0), 0), 127)
    assert (d.action, d.exit_code) == ("finish", 1) and "is still starting up" in d.failures[0][1]


def test_a_late_replacement_that_registers_in_its_grace_leaves_by_itself():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7, late_grace=5)
    _restarted_at(w, 7)
    assert w.decide(job(0, _replacement("trainer", cpu=1.0), 0), 26) is CONTINUE
    assert w.decide(job(0, _replacement("late", cpu=1.0), 0), 27).action == "continue"   # answered "over"
    d = w.decide(job(0, 0, 0), 28)
    assert d.action == "continue" and w.phase == "draining" and w.late_ends == []


def test_a_replacement_whose_note_is_unknown_is_left_to_the_orphan_watch():
    # a remote worker writes no note the launcher can read: alone and idle for 30 s, rule 4 fails the job
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7)
    _restarted_at(w, 7)
    assert w.decide(job(0, _replacement(None, cpu=1.0), 0), 26).action == "continue"
    d = w.decide(job(0, _replacement(None, cpu=1.0), 0), 56)
    assert (d.action, d.exit_code) == ("finish", 1) and "is the last worker running" in d.failures[0][1]


def test_a_replacement_that_trained_is_a_member_and_is_not_ended_as_late():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7)
    _restarted_at(w, 7)
    assert w.decide(job(None, _replacement("batch", cpu=1.0), None), 20).action == "continue"
    assert w.decide(job(0, _replacement("batch", cpu=1.0), 0), 30).action == "continue"
    assert w.late_ends == []
    # the others' end leaves it to rules 1 to 5: idle alone for 30 s it is an orphan
    d = w.decide(job(0, _replacement("batch", cpu=1.0), 0), 60)
    assert (d.action, d.exit_code) == ("finish", 1) and "is the last worker running" in d.failures[0][1]


def test_a_replacement_leaving_late_on_its_own_is_left_to_do_so():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7)
    _restarted_at(w, 7)
    assert w.decide(job(0, _replacement("late", cpu=1.0), 0), 26).action == "continue"
    d = w.decide(job(0, 0, 0), 27)
    assert d.action == "continue" and w.phase == "draining" and w.late_ends == []


def test_a_replacement_starting_for_start_grace_when_the_others_finish_is_a_genuine_hang():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7, start_grace=120)
    _restarted_at(w, 7)
    assert w.decide(job(None, _replacement("started", cpu=1.0), None), 100).action == "continue"
    d = w.decide(job(0, _replacement("started", cpu=1.0), 0), 127)   # the others gone 120 s after its start
    assert (d.action, d.exit_code) == ("finish", 1) and w.late_ends == []
    [(index, why)] = d.failures
    assert index == WORKER_1 and "was started again 120 s ago and has not finished a step" in why


def test_no_late_end_while_another_worker_trains_or_when_no_other_worker_succeeded():
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=7, orphan_grace=0)
    _restarted_at(w, 7)
    assert w.decide(job(None, _replacement("started"), -9), 30).action == "continue"   # worker 0 trains
    # the others all died: the job has failed whatever the replacement does (rule 1 under --elastic)
    d = w.decide(job(-9, _replacement("started"), -9), 31)
    assert d.action == "continue" and w.late_ends == []


_WORKER_0 = """
import os, sys, time
with open(os.environ["MXHET_PROGRESS_FILE"], "w") as f:
    f.write("batch")
time.sleep(float(sys.argv[1]))
"""

# First incarnation: trains a step and is killed. Its replacement hangs in its start-up, before any
# Trainer exists (as one did in PS-LITE's recovery at load 6 while the others ended): it writes no note.
_WORKER_1 = """
import os, signal, sys, time
marker = sys.argv[1]
if not os.path.exists(marker):
    open(marker, "w").close()
    with open(os.environ["MXHET_PROGRESS_FILE"], "w") as f:
        f.write("batch")
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(300)
"""


def test_the_supervisor_ends_a_replacement_that_comes_too_late_and_records_it(tmp_path):
    """Fake processes (no MXNet): worker 1 dies, is started again and hangs in its start-up while
    worker 0 finishes. The job succeeds, the restart says ``too_late``; without rule 6 the orphan
    watch (2 s here) would fail it."""
    import io
    import json
    import sys
    from mxhet.launcher.jobplan import Plan, ProcessSpec
    from mxhet.launcher.supervisor import run_plan
    idle = (sys.executable, "-c", "import time; time.sleep(300)")
    spec = lambda role, slot, argv: ProcessSpec(role=role, slot=slot, host="127.0.0.1", argv=argv, env={})
    plan = Plan(mode="esync", kvstore="dist_async", launcher="local", root_uri="127.0.0.1", root_port=1,
                state_server="", elastic=True, worker_restarts=1, worker_restart_delay=0.0, processes=(
                    spec("scheduler", None, idle), spec("server", 0, idle), spec("state-server", None, idle),
                    spec("worker", 0, (sys.executable, "-c", _WORKER_0, "1.5")),
                    spec("worker", 1, (sys.executable, "-c", _WORKER_1, str(tmp_path / "marker")))))
    out = io.StringIO()
    job_file = tmp_path / "job.json"
    code = run_plan(plan, timeout=60, job_file=str(job_file), server_grace=0.5, kill_grace=1.0,
                    poll_interval=0.05, orphan_grace=2.0, start_grace=120.0, late_grace=0.5, out=out)
    assert code == 0, out.getvalue()
    record = json.loads(job_file.read_text())
    assert record["status"] == "succeeded"
    [restart] = record["worker_restarts"]
    assert (restart["slot"], restart["ended"], restart["too_late"]) == (1, "ended by the launcher", True)
    [replacement] = [p for p in record["processes"] if p["role"] == "worker" and p["slot"] == 1]
    assert replacement["ended_by_launcher"] and replacement["exit_code"] == -15 and "failure" not in replacement
    assert "comes too late" in out.getvalue() and "not a failure" in out.getvalue()


def test_restart_delay_sets_the_least_time_between_a_death_and_its_restart():
    from mxhet import launcher
    argv = ["-n", "2", "-s", "1", "--sync", "esync", "--elastic", "--max-restarts", "1"]
    plan = launcher.plan(argv + ["--restart-delay", "40", "--", "python", "train.py"])
    assert plan.worker_restart_delay == 40.0
    # the least delay PS-LITE and the State Server allow stays the floor, here with a longer heartbeat timeout
    plan = launcher.plan(argv + ["--heartbeat-timeout", "9", "--restart-delay", "11", "--", "python", "train.py"])
    assert plan.worker_restart_delay == 11.0
    w = watch(elastic=True, worker_restarts=1, worker_restart_delay=40.0)
    w.decide(job(None, -9, None), 0)
    assert w.decide(job(None, -9, None), 39.9).action == "continue"
    assert w.decide(job(None, -9, None), 40.0).action == "restart"


@pytest.mark.parametrize("extra, message", [
    (["--restart-delay", "3"], "--restart-delay must be a finite number of seconds >= 7"),
    (["--heartbeat-timeout", "9", "--restart-delay", "10"], "--restart-delay must be a finite number of seconds >= 11"),
    (["--restart-delay", "inf"], "--restart-delay must be a finite number"),
    (["--restart-delay", "nan"], "--restart-delay must be a finite number"),
])
def test_a_restart_delay_below_the_heartbeat_timeouts_is_refused(extra, message):
    from mxhet import launcher
    from mxhet.errors import ConfigError
    with pytest.raises(ConfigError, match=message):
        launcher.plan(["-n", "2", "-s", "1", "--sync", "esync", "--elastic", "--max-restarts", "1"] + extra
                      + ["--", "python", "train.py"])


def test_restart_delay_needs_max_restarts():
    from mxhet import launcher
    from mxhet.errors import ConfigError
    with pytest.raises(ConfigError, match="--restart-delay 30 needs --max-restarts"):
        launcher.plan(["-n", "2", "-s", "1", "--sync", "esync", "--elastic", "--restart-delay", "30",
                       "--", "python", "train.py"])
