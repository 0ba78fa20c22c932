"""The supervisor's rule under ``mxhet-launch --elastic`` (mxhet.launcher.watch):
a worker's death is a departure, the job fails only when no worker finishes."""
from tests.unit.test_launcher_watch import job, watch


def test_a_dead_worker_is_a_departure_and_the_job_succeeds_when_the_others_finish():
    w = watch(elastic=True)
    d = w.decide(job(None, -9, None), 0)
    assert d.action == "continue" and "worker 1 was killed by signal SIGKILL (9)" in d.note
    assert "others train on" in d.note
    assert w.decide(job(None, -9, None), 1).note == ""   # said once
    d = w.decide(job(0, -9, 0), 2)
    assert d.action == "continue" and w.phase == "draining"
    d = w.decide(job(0, -9, 0, services=(("scheduler", 0), ("server 0", 0), ("state-server", 0))), 3)
    assert (d.action, d.exit_code) == ("finish", 0)


def test_the_job_fails_when_no_worker_finishes():
    w = watch(elastic=True)
    w.decide(job(None, -9, None), 0)
    d = w.decide(job(1, -9, 1), 1)   # e.g. the survivors fell below --min-workers
    assert (d.action, d.exit_code) == ("finish", 1)
    assert {why for _, why in d.failures} >= {"exited with code 1", "was killed by signal SIGKILL (9)"}


def test_without_elastic_a_dead_worker_still_fails_the_job():
    d = watch().decide(job(None, -9, None), 0)
    assert (d.action, d.exit_code) == ("finish", 1)


def test_a_dead_server_fails_an_elastic_job_too():
    w = watch(elastic=True)
    d = w.decide(job(None, None, services=(("scheduler", None), ("server 0", -9), ("state-server", None))), 0)
    assert (d.action, d.exit_code) == ("finish", 1)
