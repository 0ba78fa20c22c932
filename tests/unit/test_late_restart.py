"""A worker started again (``mxhet-launch --elastic --max-restarts``) that comes after the job's end:
the State Server tells it so at registration (``Registered.over``), it takes part in nothing, and the
State Server is still there to tell it (``--until-stopped``)."""
import threading

import pytest
import zmq

from mxhet.control import messages as m
from mxhet.control.membership import Finished, RoundRendezvous
from mxhet.control.server import StateService, serve


def _register(service, rank, seq=1, slot=None):
    return service.handle(m.Register(rank=rank, seq=seq, slot=rank if slot is None else slot, signature="",
                                     round=0, incarnation=seq), now=0.0, sender=(rank, seq))


def test_the_job_is_over_for_a_rank_that_comes_back_once_nobody_trains_or_the_stop_is_agreed():
    r = RoundRendezvous(range(3))
    assert not r.over()
    r.depart(2, "died")
    r.enter(0, 0, "a")
    r.enter(1, 0, "b", ballot=True)          # the job agrees to stop after round 0
    assert r.over()
    r.done(0, 0, "a")
    r.done(1, 0, "b")
    r.finish(0, "f0")
    assert r.finish(1, "f1") == [(0, "f0", Finished(0)), (1, "f1", Finished(0))]
    assert not r.training and r.over()
    r.late(2, now=12.5)
    assert 2 in r.gone and r.stats()["events"][-1] == {"event": "late", "rank": 2, "cause": "restarted",
                                                       "round": None, "t": 12.5}
    with pytest.raises(ValueError, match="never left"):
        r.late(0)
    # a job in which a worker left but the others still train is not over (esync's stop comes from the caller)
    r = RoundRendezvous(range(3))
    r.depart(2, "died")
    assert not r.over() and r.over(stopping=True)


def test_a_restarted_worker_after_the_jobs_end_is_told_so_and_stays_out():
    service = StateService(3, rules=("membership",))
    for rank in range(3):
        _register(service, rank)
    service.depart(2, "died (silent for over 3 s)")
    for rank in (0, 1):
        service.handle(m.RoundFinish(rank=rank, seq=2, incarnation=1), now=1.0, sender=(rank, 1))
    reply = _register(service, 2, seq=7)
    assert reply.ok and reply.over
    rendezvous = service.rule("membership").rendezvous
    assert 2 in rendezvous.gone and not rendezvous.training
    assert [e["event"] for e in rendezvous.events][-1] == "late"


def test_a_restarted_worker_while_others_train_rejoins_as_before():
    service = StateService(3, rules=("membership",))
    for rank in range(3):
        _register(service, rank)
    service.depart(2, "died")
    reply = _register(service, 2, seq=7)
    assert reply.ok and not reply.over and 2 in service.rule("membership").rendezvous.training


@pytest.mark.timeout(30)
@pytest.mark.parametrize("until_stopped", [False, True])
def test_until_stopped_the_state_server_answers_after_every_worker_left(until_stopped):
    ctx = zmq.Context()
    address = "inproc://state-server-until-stopped-%d" % until_stopped
    stop, result = threading.Event(), {}

    def run():
        result["service"] = serve(address, 1, context=ctx, should_stop=stop.is_set, poll_interval=0.05,
                                  heartbeat_timeout=0, until_stopped=until_stopped)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.connect(address)
    try:
        client.send(m.encode(m.Register(rank=0, seq=1, slot=0)))
        assert client.poll(5000) and m.decode(client.recv(), m.REPLY_TYPES).ok
        client.send(m.encode(m.Bye(rank=0, seq=2)))
        assert client.poll(5000) and m.decode(client.recv(), m.REPLY_TYPES).ok
        thread.join(1.0)
        # every worker left: without the flag the loop ends, with it the State Server still answers
        assert thread.is_alive() == until_stopped
        if until_stopped:
            client.send(m.encode(m.Register(rank=0, seq=1, slot=0, incarnation=2)))
            assert client.poll(5000) and m.decode(client.recv(), m.REPLY_TYPES).ok
    finally:
        stop.set()
        thread.join(5)
        client.close(0)
        ctx.term()
    assert not thread.is_alive()


def test_max_restarts_keeps_the_state_server_until_the_launcher_ends_it():
    from mxhet import launcher
    argv = ["-n", "2", "-s", "1", "--sync", "localsgd", "--elastic"]
    state = {p.role: p.argv for p in launcher.plan(argv + ["--max-restarts", "1", "--", "python", "t.py"]).processes}
    assert "--until-stopped" in state["state-server"]
    state = {p.role: p.argv for p in launcher.plan(argv + ["--", "python", "t.py"]).processes}
    assert "--until-stopped" not in state["state-server"]
