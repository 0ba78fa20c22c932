"""A worker's channel to the parameter servers.

Bucketing: PS-LITE sends one message per key and server and a server calls
the Python updater once per key and round, so a model of many small
parameters pays a fixed cost per key (ResNet-18: 122 keys). When the updater
shipped to the servers is elementwise (``updater.elementwise``: the same
arithmetic for every element whatever its key, as ESync's average), the
channel lays the parameters out in a few flat buckets (consecutive keys of one
dtype and context, up to ``bucket_bytes`` each) and exchanges the buckets
instead: a copy per parameter into and out of the flat buffers, and the
updater runs once per bucket. Every element sees the same additions and the same update as with
one key per parameter, so the model is the same; modes do not change. Other
updaters (optimizers with per-key learning-rate or weight-decay multipliers,
per-key state) keep one key per parameter.
"""
import gc
import time

import mxnet as mx
import numpy as np

from ..errors import ConfigError
from ..gluon_private import kvstore_barrier

DEFAULT_BUCKET_BYTES = 256 << 10
"""Bytes per bucket at most. A parameter larger than this travels alone, as
itself (no copy): measured on ResNet-18 (one worker, one server, 2 loaded
cores; ``bench/dataplane_cost.py``), merging the large parameters too (16 MiB
buckets) made an exchange 1.6-2x slower than one key per parameter, while
merging only the small ones (102 keys -> 21) costs the same; on the small CNN
(8 keys -> 1) the exchange took half the time."""


def nbytes(arrays):
    """Bytes of a list of NDArrays, as sent over the wire (MXNet counts nothing)."""
    return sum(int(a.size) * np.dtype(a.dtype).itemsize for a in arrays)


def copy_all(sources, targets):
    """Copy arrays pairwise (converting memory layouts as needed)."""
    for src, dst in zip(sources, targets):
        src.copyto(dst)


class BucketLayout:
    """Which parameter goes where in the flat buckets.

    Args:
        keys: the parameter keys, in order.
        arrays: one array per key (shapes, dtypes and contexts are read).
        bucket_bytes: bytes per bucket at most (> 0).

    Raises:
        ValueError: for a bad ``bucket_bytes`` or mismatched lists.
    """

    def __init__(self, keys, arrays, bucket_bytes):
        if not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise ValueError("bucket_bytes must be a positive integer, got %r" % (bucket_bytes,))
        if len(keys) != len(arrays):
            raise ValueError("%d keys for %d arrays" % (len(keys), len(arrays)))
        self.keys = list(keys)
        self.position = {k: i for i, k in enumerate(self.keys)}
        self.buckets = []   # [(dtype, context, [member indices], [offsets], elements)]
        for i, a in enumerate(arrays):
            size, kind = int(a.size), (np.dtype(a.dtype), getattr(a, "context", None))
            last = self.buckets[-1] if self.buckets else None
            if (last is None or (last[0], last[1]) != kind
                    or (last[4] + size) * kind[0].itemsize > bucket_bytes):
                last = (kind[0], kind[1], [], [], 0)
                self.buckets.append(last)
            last[2].append(i)
            last[3].append(last[4])
            self.buckets[-1] = (last[0], last[1], last[2], last[3], last[4] + size)
        # bucket b is kvstore key b: keys in the parameter range, none left for per-parameter keys
        self.bucket_keys = list(range(len(self.buckets)))

    def flat_buffers(self):
        """One flat buffer per bucket of several parameters; None for a parameter alone
        (it travels as itself, viewed flat: no copy)."""
        return [mx.nd.zeros((n,), ctx=ctx, dtype=dtype) if len(members) > 1 else None
                for dtype, ctx, members, _, n in self.buckets]

    def wire(self, arrays, flats):
        """What goes to the kvstore per bucket: its flat buffer, or the lone parameter viewed flat."""
        return [flat if flat is not None else arrays[bucket[2][0]].reshape((-1,))
                for bucket, flat in zip(self.buckets, flats)]

    # Plain copies into and out of views of the flat buffers: a memcpy each. (One
    # concat or split operator for the bucket took 0.7 s for 0.5 MB in a PS-LITE
    # worker process here, against 0.5 ms for the copies.)
    def pack(self, arrays, flats):
        """Copy ``arrays`` (one per key, in key order) into the buckets ``flats``."""
        for (_, _, members, offsets, _), flat in zip(self.buckets, flats):
            for i, start in zip(members, offsets if flat is not None else ()):
                size = int(arrays[i].size)
                arrays[i].reshape((-1,)).copyto(flat[start:start + size])

    def unpack(self, flats, arrays):
        """Copy the buckets ``flats`` into ``arrays`` (one per key, in key order)."""
        for (_, _, members, offsets, _), flat in zip(self.buckets, flats):
            for i, start in zip(members, offsets if flat is not None else ()):
                out = arrays[i]
                flat[start:start + int(out.size)].reshape(out.shape).copyto(out)

    def split(self, keys):
        """``keys`` as (positions of the parameter keys, positions of the others).

        Raises:
            ValueError: the parameter keys are not exactly this layout's keys, in order.
        """
        params = [j for j, k in enumerate(keys) if k in self.position]
        if params and [keys[j] for j in params] != self.keys:
            raise ValueError("a bucketed channel exchanges every parameter key at once, in order; got %d of %d"
                             % (len(params), len(self.keys)))
        return params, [j for j, k in enumerate(keys) if k not in self.position]


def server_mode(kvstore_type):
    """``"dist_async"`` or ``"dist_sync"``: how the servers of a kvstore of
    type ``kvstore_type`` (``store.type``) merge pushes. MXNet puts the servers
    in synchronous mode when rank 0 creates any dist kvstore whose type lacks
    ``_async`` -- ``kv.create('dist')`` included -- and nothing undoes it."""
    return "dist_async" if "_async" in kvstore_type else "dist_sync"


def is_dist_kvstore(obj):
    """True for a kvstore object of a dist type (``mx.kv.create('dist...')``)."""
    return isinstance(obj, mx.kvstore.KVStore) and str(obj.type).startswith("dist")


def live_dist_kvstores():
    """The dist kvstore objects alive in this process (e.g. the one a script
    created for ``store.rank``), found among the garbage collector's objects
    (a scan of a few tenths of a second, skipped when MXNet never created a
    kvstore here: ``mx.kv.create`` records the last handle for its profiler)."""
    if not getattr(getattr(mx.profiler, "profiler_kvstore_handle", None), "value", 1):
        return []
    return [obj for obj in gc.get_objects() if isinstance(obj, mx.kvstore.KVStore) and is_dist_kvstore(obj)]


def check_kvstore(store, kvstore_type, mode):
    """Raises ConfigError unless the dist kvstore ``store`` can carry mode
    ``mode``, which needs servers of ``kvstore_type``.

    A second dist kvstore in one process cannot be created instead: it
    registers again with PS-LITE and waits forever in a start-up barrier that
    the servers never join (every worker then hangs at 0% CPU)."""
    if server_mode(store.type) != kvstore_type:
        raise ConfigError(
            "sync mode %r needs a %r kvstore, but this worker already created a %r one (kvstore=%r), which "
            "put the parameter servers in %s mode; create it with kv.create(%r), or create none and read "
            "trainer.rank / trainer.num_workers instead of store.rank / store.num_workers"
            % (mode, kvstore_type, store.type, store.type,
               "synchronous" if server_mode(store.type) == "dist_sync" else "asynchronous", kvstore_type))


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
        bucket_bytes: bytes per flat bucket when the updater allows buckets
            (see the module's docstring); 0 = one key per parameter always.

    Raises:
        ValueError: for a negative or non-integer ``bucket_bytes``.
    """

    def __init__(self, kvstore_type, counters, clock=time.monotonic, bucket_bytes=DEFAULT_BUCKET_BYTES):
        if not isinstance(bucket_bytes, int) or bucket_bytes < 0:
            raise ValueError("bucket_bytes must be an integer >= 0, got %r" % (bucket_bytes,))
        self.kvstore_type = kvstore_type
        self.counters = counters
        self.clock = clock
        self.bucket_bytes = bucket_bytes
        self.layout = None      # a BucketLayout once the model is shared in buckets
        self.last_exchange = None   # (began, issued, finished) clock readings of the latest push_pull
        self._flats = None      # (send buffers, receive buffers), one per bucket
        self.kv = None

    def connect(self, store=None):
        """Create the kvstore (joins PS-LITE; the rank is known afterwards), or
        use ``store``, a dist kvstore the worker already created (the caller
        checks it with :func:`check_kvstore`)."""
        self.kv = store if store is not None else mx.kv.create(self.kvstore_type)
        return self.kv

    @property
    def rank(self):
        return self.kv.rank

    @property
    def num_workers(self):
        return self.kv.num_workers

    def share_model(self, keys, weights, updater, num_servers, init=True):
        """Initialize ``keys`` with ``weights`` (rank 0's win), ship the
        ``updater`` to the servers, check that they run it, and pull the
        initial global model into the replica. ``updater`` None: keep the one
        the servers run (a worker started again into a running job: shipping it
        anew would reset its state, e.g. the momentum of ``async``'s optimizer).
        ``init`` False: no ``kv.init`` (the chief started again into a running
        job: MXNet's ``kv.init`` pushes rank 0's values even in a recovered
        node, and the servers' updater would add them to the model).

        Returns:
            the default-layout buffers holding the global model, one per key.

        Raises:
            kvstore_ext.probe.UpdaterNotRunning: a server does not run the updater.
        """
        from kvstore_ext.probe import verify_server_updater
        bufs = [mx.nd.zeros(w.shape, ctx=w.context, dtype=w.dtype) for w in weights]
        copy_all(weights, bufs)
        if self.bucket_bytes and getattr(updater, "elementwise", False) and len(keys) > 1:
            self.layout = BucketLayout(keys, bufs, self.bucket_bytes)
            self._flats = (self.layout.flat_buffers(), self.layout.flat_buffers())
            self.layout.pack(bufs, self._flats[0])
            if init:
                self.kv.init(self.layout.bucket_keys, self.layout.wire(bufs, self._flats[0]))
        elif init:
            self.kv.init(keys, bufs)
        if updater is not None:
            self.kv.set_optimizer(updater)
        verify_server_updater(self.kv, num_servers, self.kvstore_type == "dist_sync")
        self.pull(keys, bufs)
        copy_all(bufs, weights)
        mx.nd.waitall()
        return bufs

    def _bucketed(self, keys, values, outs):
        """The kvstore's keys, values and outs for a call on ``keys``: the
        buckets (values packed) in place of the parameter keys, then the others."""
        params, others = self.layout.split(keys)
        sends, recvs = self._flats
        if not params:  # control keys only
            sends, recvs = [], []
        else:
            recvs = self.layout.wire([outs[j] for j in params], recvs)
        if values is not None and params:
            self.layout.pack([values[j] for j in params], sends)
            sends = self.layout.wire([values[j] for j in params], sends)
        kv_keys = (self.layout.bucket_keys if params else []) + [keys[j] for j in others]
        kv_values = None if values is None else sends + [values[j] for j in others]
        return kv_keys, kv_values, recvs + [outs[j] for j in others], [outs[j] for j in params]

    def init(self, keys, values):
        """Initialize extra (control) keys."""
        self.kv.init(keys, values)

    def push_pull(self, keys, values, outs):
        """Push ``values`` and pull into ``outs`` (one batch), waiting for both.

        :attr:`last_exchange` holds the clock when it began, when the push and pull
        were issued (MXNet runs them asynchronously) and when both had finished."""
        t0 = self.clock()
        if self.layout is None:
            self.kv.push(keys, values)
            self.kv.pull(keys, out=outs)
            issued = self.clock()
        else:
            kv_keys, kv_values, kv_outs, param_outs = self._bucketed(keys, values, outs)
            self.kv.push(kv_keys, kv_values)
            self.kv.pull(kv_keys, out=kv_outs)
            issued = self.clock()
            if param_outs:
                self.layout.unpack(self._flats[1], param_outs)
        mx.nd.waitall()
        done = self.clock()
        self.last_exchange = (t0, issued, done)
        self.counters.sync_s += done - t0
        self.counters.bytes_pushed += nbytes(values)
        self.counters.bytes_pulled += nbytes(outs)

    def push(self, keys, values):
        """Push ``values`` and wait until the servers applied them (bytes counted;
        the time is the caller's to count). Under ``dist_async`` a pull issued
        afterwards sees them."""
        if self.layout is None:
            self.kv.push(keys, values)
        else:
            kv_keys, kv_values, _, _ = self._bucketed(keys, values, values)
            self.kv.push(kv_keys, kv_values)
        mx.nd.waitall()
        self.counters.bytes_pushed += nbytes(values)

    def pull(self, keys, outs):
        """Pull into ``outs``, waiting for it (bytes counted; the time is the caller's to count)."""
        if self.layout is None:
            self.kv.pull(keys, out=outs)
        else:
            kv_keys, _, kv_outs, param_outs = self._bucketed(keys, None, outs)
            self.kv.pull(kv_keys, out=kv_outs)
            if param_outs:
                self.layout.unpack(self._flats[1], param_outs)
        mx.nd.waitall()
        self.counters.bytes_pulled += nbytes(outs)

    def barrier(self):
        """Wait until every worker reaches the barrier."""
        kvstore_barrier(self.kv)

    def close(self):
        self.kv = None
        self._flats = None
