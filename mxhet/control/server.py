"""The State Server: Algorithm 2 behind a ZeroMQ ROUTER socket.

:class:`StateService` turns validated requests into replies at a given clock
reading (no I/O, no clock of its own); :func:`serve` is the socket loop. A bad
request is logged and answered with an error reply (or dropped when it cannot
be answered); the loop keeps serving.
"""
import json
import logging
import os
import time

import zmq

from ..errors import ProtocolError
from . import messages as m
from .state_rule import DEFAULT_EPSILON, StateTable

LOG = logging.getLogger("mxhet.state_server")


class StateService:
    """The State Server's state and request handling.

    Args:
        num_workers: number of workers; their PS-LITE ranks are 0..n-1.
        epsilon: Algorithm 2's ε in seconds.
        now: the clock reading at creation.
    """

    def __init__(self, num_workers, epsilon=DEFAULT_EPSILON, now=0.0):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("num_workers must be a positive integer, got %r" % (num_workers,))
        self.num_workers = num_workers
        self.table = StateTable(range(num_workers), epsilon=epsilon, now=now)
        self.slots = {}          # rank -> launcher slot
        self.left = set()        # ranks that said bye
        self.stop_decisions = {}  # round -> stop after this round?
        self.rounds = {}         # round -> {"slowest": rank, "local_iters": {rank: k}}

    @property
    def finished(self):
        """True once every registered worker has left."""
        return bool(self.slots) and self.left >= set(self.slots)

    def handle(self, request, now):
        """Answer one validated request at server clock ``now``."""
        try:
            return getattr(self, "_on_" + request.TYPE)(request, now)
        except (KeyError, ValueError, ProtocolError) as exc:
            LOG.warning("refused %s from rank %s: %s", request.TYPE, request.rank, exc)
            return m.Reply(seq=request.seq, ok=False, error=str(exc).strip('"'))

    def _registered(self, rank):
        if rank not in self.slots:
            raise ProtocolError("rank %d has not registered" % rank)
        return self.table.record(rank)

    def _on_register(self, req, now):
        self.table.record(req.rank)  # range check
        known = self.slots.get(req.rank)
        if known is not None and known != req.slot:
            raise ProtocolError("rank %d is already registered for slot %d" % (req.rank, known))
        self.slots[req.rank] = req.slot
        self.left.discard(req.rank)
        LOG.info("rank %d (slot %d) registered", req.rank, req.slot)
        return m.Reply(seq=req.seq, round=self.table.record(req.rank).round)

    def _on_query(self, req, now):
        record = self._registered(req.rank)
        if req.round != record.round:
            raise ProtocolError("query for round %d, rank %d is in round %d" % (req.round, req.rank, record.round))
        ready = self.table.query(req.rank, req.k, req.c, now - req.since_finish, now)
        slowest = self.table.slowest_rank()
        if ready:
            info = self.rounds.setdefault(req.round, {"slowest": slowest, "local_iters": {}})
            info["local_iters"].setdefault(req.rank, req.k)
        return m.Reply(seq=req.seq, ready=ready, round=req.round, slowest=slowest)

    def _on_reset(self, req, now):
        self._registered(req.rank)
        self.table.reset(req.rank, req.round, now)
        stop = self.stop_decisions.setdefault(req.round, req.want_stop)
        return m.Reply(seq=req.seq, round=req.round, stop=stop)

    def _on_bye(self, req, now):
        self._registered(req.rank)
        self.left.add(req.rank)
        return m.Reply(seq=req.seq)

    def stats(self):
        """Per-round record: which rank was slowest, each rank's n_i."""
        return {
            "epsilon": self.table.epsilon,
            "slots": {str(r): s for r, s in sorted(self.slots.items())},
            "rounds": [{"round": t, "slowest": info["slowest"],
                        "local_iters": {str(r): k for r, k in sorted(info["local_iters"].items())}}
                       for t, info in sorted(self.rounds.items())],
        }


def serve(bind, num_workers, epsilon=DEFAULT_EPSILON, should_stop=lambda: False,
          clock=time.monotonic, poll_interval=0.2, context=None, on_bound=None):
    """Run the State Server on ``bind`` until ``should_stop()`` or every worker left.

    Args:
        bind: ZeroMQ address to bind, e.g. ``tcp://127.0.0.1:5555``.
        num_workers: number of workers.
        epsilon: Algorithm 2's ε in seconds.
        should_stop: polled every ``poll_interval`` seconds.
        clock: monotonic clock in seconds; every decision uses its readings.
        poll_interval: seconds between checks of ``should_stop``.
        context: a ``zmq.Context`` (default: the process-wide instance).
        on_bound: called with the bound endpoint once the socket listens.

    Returns:
        The :class:`StateService`, for its statistics.
    """
    service = StateService(num_workers, epsilon=epsilon, now=clock())
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, m.MAX_MESSAGE_BYTES)
    sock.bind(bind)
    if on_bound is not None:
        on_bound(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    LOG.info("State Server listening on %s for %d workers (epsilon %.3f s)",
             sock.getsockopt_string(zmq.LAST_ENDPOINT), num_workers, epsilon)
    try:
        while not should_stop() and not service.finished:
            if not sock.poll(int(poll_interval * 1000)):
                continue
            frames = sock.recv_multipart()
            now = clock()
            if len(frames) != 2:
                LOG.warning("dropped a message of %d frames (expected identity + body)", len(frames))
                continue
            identity, body = frames
            try:
                request = m.decode(body, m.REQUEST_TYPES)
            except ProtocolError as exc:
                LOG.warning("bad request: %s", exc)
                reply = m.Reply(seq=0, ok=False, error=str(exc))
            else:
                reply = service.handle(request, now)
            sock.send_multipart([identity, m.encode(reply)])
    finally:
        sock.close(0)
    return service


def write_stats(service, path):
    """Write the service's statistics as JSON (atomically)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(service.stats(), f, indent=1)
    os.replace(tmp, path)
