"""The State Server link is CURVE-authenticated with per-job keys: strangers get nothing."""
import os
import socket
import stat
import subprocess
import sys

import pytest
import zmq
import zmq.auth

from mxhet.control import messages as m
from mxhet.control.auth import create_job_keys
from mxhet.control.client import StateClient

from .jobs import ROOT

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path, child_pids):
    keys = create_job_keys(str(tmp_path / "keys"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mxhet.state_server", "--bind", "tcp://127.0.0.1:%d" % port,
                             "--num-workers", "2", "--keys", keys, "--heartbeat-timeout", "0"],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stderr=subprocess.PIPE,
                            start_new_session=True)
    child_pids.add(proc.pid)
    yield "tcp://127.0.0.1:%d" % port, keys
    proc.terminate()
    proc.wait(timeout=10)


def _ask(address, setup=None, timeout_ms=2000):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if setup:
        setup(sock)
    sock.connect(address)
    sock.send(m.encode(m.Register(rank=0, seq=1, slot=0)))
    answer = sock.recv() if sock.poll(timeout_ms) else None
    sock.close(0)
    ctx.term()
    return answer


def test_key_files_are_private(tmp_path):
    keys = create_job_keys(str(tmp_path / "k"))
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    for root, _, files in os.walk(keys):
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o600


def test_clients_without_the_job_key_get_nothing(server):
    address, keys = server
    # Positive control first: the job's own worker gets an answer, so the
    # server is up and answering before the strangers' silence is counted.
    client = StateClient(address, rank=1, slot=1, timeout=30, keys=keys)
    try:
        assert client.register().ok
    finally:
        client.close()
    assert _ask(address) is None                                   # plain, unencrypted client
    server_public, _ = zmq.auth.load_certificate(os.path.join(keys, "server.key"))

    def stranger(sock):                                            # knows the server key, not the job's
        public, secret = zmq.curve_keypair()
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = public, secret, server_public
    assert _ask(address, stranger) is None

    def member(sock):                                              # the job's client key: answered
        from mxhet.control.auth import secure_client
        secure_client(sock, keys)
    assert _ask(address, member, timeout_ms=10000) is not None
