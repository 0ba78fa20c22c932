"""The supervisor's rule under ``mxhet-launch --elastic --max-restarts K`` (mxhet.launcher.watch):
a dead worker is started again in its slot once both heartbeat timeouts have passed, while
another worker still trains, at most K times in all."""
import pytest

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


def test_more_restarts_than_pslite_recovers_are_refused_with_the_reason():
    from mxhet import launcher
    from mxhet.errors import ConfigError
    with pytest.raises(ConfigError, match="--max-restarts 2: MXNet 1.9.1's PS-LITE serves 1 worker recovery per job"):
        launcher.plan(["-n", "4", "--sync", "esync", "--elastic", "--max-restarts", "2", "--", "python", "train.py"])


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
