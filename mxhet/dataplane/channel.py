"""A worker's channel to the parameter servers."""
import time

import mxnet as mx
import numpy as np

from ..gluon_private import kvstore_barrier


def nbytes(arrays):
    """Bytes of a list of NDArrays, as sent over the wire (MXNet counts nothing)."""
    return sum(int(a.size) * np.dtype(a.dtype).itemsize for a in arrays)


def copy_all(sources, targets):
    """Copy arrays pairwise (converting memory layouts as needed)."""
    for src, dst in zip(sources, targets):
        src.copyto(dst)


class KVChannel:
    """Push/pull through one dist kvstore, with byte and time accounting.

    Communication goes through buffers in MXNet's default layout: the kvstore
    cannot read MKL-DNN (oneDNN) arrays, which is what convolution weights
    become after a forward pass on the CPU.

    Args:
        kvstore_type: ``"dist_sync"`` or ``"dist_async"``.
        counters: an object with ``bytes_pushed``, ``bytes_pulled`` and
            ``sync_s`` attributes, updated in place (the worker's stats).
        clock: monotonic clock in seconds.
    """

    def __init__(self, kvstore_type, counters, clock=time.monotonic):
        self.kvstore_type = kvstore_type
        self.counters = counters
        self.clock = clock
        self.kv = None

    def connect(self):
        """Create the kvstore (joins PS-LITE; the rank is known afterwards)."""
        self.kv = mx.kv.create(self.kvstore_type)
        return self.kv

    @property
    def rank(self):
        return self.kv.rank

    @property
    def num_workers(self):
        return self.kv.num_workers

    def share_model(self, keys, weights, updater, num_servers):
        """Initialize ``keys`` with ``weights`` (rank 0's win), ship the
        ``updater`` to the servers, check that they run it, and pull the
        initial global model into the replica.

        Returns:
            the default-layout buffers holding the global model, one per key.

        Raises:
            kvstore_ext.probe.UpdaterNotRunning: a server does not run the updater.
        """
        from kvstore_ext.probe import verify_server_updater
        bufs = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in weights]
        copy_all(weights, bufs)
        self.kv.init(keys, bufs)
        self.kv.set_optimizer(updater)
        verify_server_updater(self.kv, num_servers, self.kvstore_type == "dist_sync")
        self.kv.pull(keys, out=bufs)
        self.counters.bytes_pulled += nbytes(bufs)
        copy_all(bufs, weights)
        mx.nd.waitall()
        return bufs

    def init(self, keys, values):
        """Initialize extra (control) keys."""
        self.kv.init(keys, values)

    def push_pull(self, keys, values, outs):
        """Push ``values`` and pull into ``outs`` (one batch), waiting for both."""
        t0 = self.clock()
        self.kv.push(keys, values)
        self.kv.pull(keys, out=outs)
        mx.nd.waitall()
        self.counters.sync_s += self.clock() - t0
        self.counters.bytes_pushed += nbytes(values)
        self.counters.bytes_pulled += nbytes(outs)

    def pull(self, keys, outs):
        """Pull into ``outs``, waiting for it (bytes counted; the time is the caller's to count)."""
        self.kv.pull(keys, out=outs)
        mx.nd.waitall()
        self.counters.bytes_pulled += nbytes(outs)

    def barrier(self):
        """Wait until every worker reaches the barrier."""
        kvstore_barrier(self.kv)

    def close(self):
        self.kv = None
