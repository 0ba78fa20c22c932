"""Start-up check that every server runs mxhet's updater.

When a server cannot unpickle the optimizer, stock MXNet keeps going and a
``dist_sync`` server stores the plain *sum* of pushes instead of applying the
rule: training silently diverges. After ``set_optimizer``, every worker pushes
1.0 to one probe key per server; the mxhet updater stamps ``value +
PROBE_STAMP``, which the default store never produces.
"""
import mxnet as mx

from . import keys


class UpdaterNotRunning(RuntimeError):
    """A parameter server does not apply the mxhet updater."""


def verify_server_updater(kv, num_servers, synchronous):
    """Push to every server's probe key and check the updater's stamp.

    Must be called by every worker, after ``kv.set_optimizer``.

    Args:
        kv: a ``dist_*`` KVStore.
        num_servers: number of server processes (DMLC_NUM_SERVER).
        synchronous: True for ``dist_sync`` (servers sum the pushes of all
            workers), False for ``dist_async`` (each push is applied alone).

    Raises:
        UpdaterNotRunning: if any server returned an unstamped value.
    """
    probe = keys.probe_keys(num_servers)
    kv.init(probe, [mx.nd.zeros((1,)) for _ in probe])
    kv.push(probe, [mx.nd.ones((1,)) for _ in probe])
    outs = [mx.nd.zeros((1,)) for _ in probe]
    kv.pull(probe, out=outs)
    pushed = float(kv.num_workers) if synchronous else 1.0
    expected = pushed + keys.PROBE_STAMP
    for server, (key, out) in enumerate(zip(probe, outs)):
        got = float(out.asscalar())
        if abs(got - expected) > 1e-3:
            raise UpdaterNotRunning(
                "parameter server %d (probe key %d) returned %g instead of %g: it is not running "
                "the mxhet updater, so it would store raw sums of pushes. Check that the servers "
                "run 'python -m kvstore_ext.server' with the mxhet package installed."
                % (server, key, got, expected))
