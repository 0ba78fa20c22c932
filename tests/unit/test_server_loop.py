"""The State Server's socket loop: one turn takes every waiting request, answers all, in order."""
import threading

import pytest
import zmq

from mxhet.control import messages as m
from mxhet.control.server import serve


def _start(ctx, address, turns, **options):
    stop = threading.Event()
    result = {}

    def should_stop():
        turns.append(1)
        return stop.is_set()

    def run():
        result["service"] = serve(address, 2, context=ctx, should_stop=should_stop, poll_interval=0.05,
                                  heartbeat_timeout=0, **options)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return stop, thread, result


def _replies(sock, count, timeout_ms=5000):
    got = []
    while len(got) < count:
        assert sock.poll(timeout_ms), "only %d of %d replies arrived" % (len(got), count)
        got.append(m.decode(sock.recv(), m.REPLY_TYPES))
    return got


@pytest.mark.timeout(30)
def test_one_turn_answers_every_waiting_request_in_order():
    ctx = zmq.Context()
    address = "inproc://state-server-loop"
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.connect(address)                  # inproc: messages wait in the pipe until the bind
    client.send(m.encode(m.Register(rank=0, seq=1, slot=0)))
    client.send(b"not json")
    client.send_multipart([b"two", b"frames"])  # dropped: a request is one frame
    queries = 300
    for seq in range(2, queries + 2):
        client.send(m.encode(m.Query(rank=0, seq=seq, round=0, k=1, c=0.1, since_finish=0.0)))
    turns = []
    stop, thread, _ = _start(ctx, address, turns)
    try:
        replies = _replies(client, queries + 2)
        assert replies[0].ok and not replies[1].ok and "JSON" in replies[1].error
        assert [r.seq for r in replies[2:]] == list(range(2, queries + 2))
        # rank 1 never registered: like READY, the slowest named is looked for among the registered ranks
        assert all(r.ok and r.slowest == 0 for r in replies[2:])
        assert len(turns) < 10                                       # not one turn per message
    finally:
        stop.set()
        thread.join(5)
        client.close(0)
        ctx.term()


@pytest.mark.timeout(30)
def test_deferred_ssp_replies_go_out_from_the_loop():
    ctx = zmq.Context()
    address = "inproc://state-server-ssp"
    turns = []
    stop, thread, result = _start(ctx, address, turns, staleness=0, max_batch=1)
    socks = []
    try:
        for rank in range(2):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(address)
            sock.send(m.encode(m.Register(rank=rank, seq=1, slot=rank)))
            assert _replies(sock, 1)[0].ok
            socks.append(sock)
        socks[0].send(m.encode(m.Clock(rank=0, seq=2, clock=1)))     # one ahead of rank 1: deferred
        assert not socks[0].poll(200)
        socks[1].send(m.encode(m.Clock(rank=1, seq=2, clock=1)))
        assert _replies(socks[1], 1)[0].seq == 2
        assert _replies(socks[0], 1)[0].seq == 2                     # released by rank 1's clock
        for rank, sock in enumerate(socks):
            sock.send(m.encode(m.Bye(rank=rank, seq=3)))
            assert _replies(sock, 1)[0].ok
        thread.join(5)
        assert not thread.is_alive() and result["service"].finished  # every worker left: serve returned
    finally:
        stop.set()
        thread.join(5)
        for sock in socks:
            sock.close(0)
        ctx.term()


def test_max_batch_is_checked():
    with pytest.raises(ValueError):
        serve("inproc://never", 1, max_batch=0)
