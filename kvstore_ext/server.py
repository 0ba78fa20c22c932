"""Entry point of the PS-LITE scheduler and server processes.

``python -m kvstore_ext.server`` (with ``DMLC_ROLE=server`` or ``scheduler`` and
the other ``DMLC_*`` variables set, as the launcher does) runs MXNet's
parameter-server loop with mxhet's updaters importable.

Two differences from MXNet's own ``kvstore_server`` module:

* MXNet starts the server *while it is being imported* when ``DMLC_ROLE`` is
  not ``worker``, before any other module could register its optimizers. We
  import MXNet and :mod:`kvstore_ext.updaters` with the role masked, then run
  the server explicitly.
* MXNet's controller lets an unpickling failure pass (ctypes swallows the
  exception) and the server then silently stores the plain sum of pushes. Our
  controller logs the error and ends the process with exit code 3, so the
  launcher stops the whole job and names the server.
"""
import logging
import os
import pickle
import sys

LOG = logging.getLogger("kvstore_ext.server")
EXIT_BAD_OPTIMIZER = 3
_K_CONTROLLER = 0  # MXNet's kvstore server command id for "set optimizer"


def _import_mxnet_masked(role):
    os.environ["DMLC_ROLE"] = "worker"
    try:
        import mxnet  # noqa: F401  (imported with the role masked on purpose)
        from . import updaters  # noqa: F401  (registers the updaters)
    finally:
        os.environ["DMLC_ROLE"] = role


def run_server():
    """Run this process as a PS-LITE scheduler or server until the job ends.

    Raises:
        SystemExit: if ``DMLC_ROLE`` is neither ``server`` nor ``scheduler``.
    """
    role = os.environ.get("DMLC_ROLE", "")
    if role not in ("server", "scheduler"):
        raise SystemExit("kvstore_ext.server: DMLC_ROLE must be 'server' or 'scheduler', got %r" % role)
    _import_mxnet_masked(role)
    import mxnet as mx
    from mxnet.kvstore.kvstore_server import KVStoreServer

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s " + role + " %(levelname)s %(message)s")

    class _Server(KVStoreServer):
        def _controller(self):
            def controller(cmd_id, cmd_body, _):
                if cmd_id != _K_CONTROLLER:
                    LOG.warning("ignoring unknown server command %d", cmd_id)
                    return
                try:
                    # MXNet's channel: the worker pickles the optimizer (trusted network only).
                    optimizer = pickle.loads(cmd_body)
                except Exception as exc:  # noqa: BLE001  (any failure is fatal here)
                    LOG.critical("cannot load the optimizer sent by the workers: %s: %s. "
                                 "Is the mxhet package (kvstore_ext) installed on this host?",
                                 type(exc).__name__, exc)
                    sys.stderr.flush()
                    os._exit(EXIT_BAD_OPTIMIZER)
                LOG.info("server updater set to %s", type(optimizer).__name__)
                if hasattr(optimizer, "bind_server"):   # it holds a part of each large array
                    optimizer.bind_server(self.kvstore.rank, int(os.environ.get("DMLC_NUM_SERVER", "1")))
                self.kvstore.set_optimizer(optimizer)
            return controller

    _Server(mx.kv.create("dist")).run()


if __name__ == "__main__":
    run_server()
