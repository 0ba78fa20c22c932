"""The State Server under a stream of malformed and hostile messages while a real ESync job runs."""
import json
import random
import re
import socket
import threading
import time

import pytest
import zmq

from mxhet.control import messages as m

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)


def _garbage(rng):
    """One hostile message (a list of frames)."""
    kind = rng.randrange(9)
    valid = m.encode(m.Query(rank=rng.randrange(3), seq=rng.randrange(1, 99), round=0, k=1, c=0.1,
                             since_finish=0.0))
    if kind == 0:
        return [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))]
    if kind == 1:
        return [valid[:rng.randrange(1, len(valid))]]                       # truncated
    if kind == 2:
        body = json.loads(valid)
        body[rng.choice(list(body))] = rng.choice(["x", None, [], {}, -5, 1e300, True])
        return [json.dumps(body).encode()]                                  # wrong types / ranges
    if kind == 3:
        body = json.loads(valid)
        body["extra"] = 1
        return [json.dumps(body).encode()]                                  # unknown field
    if kind == 4:
        return [b"x" * (m.MAX_MESSAGE_BYTES + rng.randrange(1, 1000))]       # oversized
    if kind == 5:
        return [valid, valid]                                               # extra frames
    if kind == 6:  # out-of-range ranks (taking a free rank first is what authentication prevents)
        return [m.encode(m.Register(rank=rng.randrange(3, 9), seq=1, slot=rng.randrange(6)))]
    if kind == 7:
        return [m.encode(m.Reset(rank=rng.randrange(3), seq=5, round=rng.randrange(1, 50), want_stop=True))]
    return [valid]                                                          # a valid query for someone else


def _fuzz(address, stop, counts, seed=0):
    rng = random.Random(seed)
    ctx = zmq.Context()
    socks = []
    try:
        while not stop.is_set() and counts["sent"] < 5000:
            if not socks or rng.random() < 0.05:   # new connections now and then (oversized ones are cut)
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, 100)
                sock.connect(address)
                socks.append(sock)
            sock = rng.choice(socks)
            try:
                sock.send_multipart(_garbage(rng), zmq.NOBLOCK)
                counts["sent"] += 1
            except zmq.Again:
                time.sleep(0.001)
            for s in socks:
                while s.poll(0):
                    s.recv_multipart()
                    counts["answered"] += 1
            if counts["sent"] % 50 == 0:
                time.sleep(0.002)  # leave the 2 cores some room for the job itself
    finally:
        for s in socks:
            s.close(0)
        ctx.term()


def test_job_finishes_correctly_under_fuzzing(tmp_path, child_pids):
    out = tmp_path / "esync"
    stats = tmp_path / "state.json"
    stop, counts = threading.Event(), {"sent": 0, "answered": 0}
    with socket.socket() as s:  # a free port for the State Server, known to the fuzzer
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fuzzer = threading.Thread(target=_fuzz, args=("tcp://127.0.0.1:%d" % port, stop, counts), daemon=True)
    fuzzer.start()
    try:
        # --no-auth: with CURVE (the default) the fuzzer's messages would not even reach the decoder
        # iteration times pinned: 6 rounds of the slow device's 1 s iterations last at least 6 s, time for
        # the fuzzer's 1,000 messages on a loaded machine too (it sends thousands a second on an idle one)
        proc = launch(["-n", "3", "-s", "1", "--sync", "esync", "--slowdown", "1,1,10", "--base-iter", "0.1",
                       "--no-auth", "--state-server-port", str(port), "--state-stats", str(stats)],
                      train_command(out, "--max-rounds", "6", "--time-budget", "120"), tmp_path, child_pids)
    finally:
        stop.set()
        fuzzer.join(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts["sent"] >= 1000, counts
    assert counts["answered"] > 0                       # refused with explicit errors, not silence
    summary = load_summary(out)
    for w in summary["workers"]:
        assert w["rounds"] == 6 and len(w["local_iters"]) == 6
    assert summary["final_accuracy"] > 0.3
    record = json.loads(stats.read_text())
    assert len(record["rounds"]) == 6
    # the State Server logged what it refused and kept serving
    assert re.search(r"bad request|refused", proc.stdout + proc.stderr)
