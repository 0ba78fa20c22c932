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

The scheduler runs no updater: it starts PS-LITE through MXNet's C API
(``libmxnet.so`` loaded with ctypes) without importing MXNet's Python package,
which would cost every job about 1.5 CPU s; it imports MXNet where the library
is not beside the package.
"""
import logging
import os
import pickle
import sys

LOG = logging.getLogger("kvstore_ext.server")
EXIT_BAD_OPTIMIZER = 3
_K_CONTROLLER = 0  # MXNet's kvstore server command id for "set optimizer"


def _import_mxnet_masked(role):
    from mxhet.mxnet_import import import_mxnet   # (imports mxhet with the process's own role)
    os.environ["DMLC_ROLE"] = "worker"
    try:
        import_mxnet(lean=True)   # with the role masked on purpose (lean: a server runs mxhet's code only)
        from . import updaters  # noqa: F401  (registers the updaters)
    finally:
        os.environ["DMLC_ROLE"] = role


def _libmxnet_path():
    """The ``libmxnet.so`` MXNet's own loader (``mxnet.libinfo``) would pick first, found without importing
    the mxnet package; None where it is not beside the package (the caller then imports MXNet)."""
    import importlib.util
    from_env = os.environ.get("MXNET_LIBRARY_PATH", "")
    if os.path.isabs(from_env) and os.path.isfile(from_env):
        return from_env
    spec = importlib.util.find_spec("mxnet")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(folder, "libmxnet.so")
        if os.path.isfile(path):
            return path
    return None


def _run_scheduler(lib_path):
    """The scheduler's part of MXNet's ``kvstore_server``, through MXNet's C API alone: create the
    ``dist`` kvstore (PS-LITE starts this process as the job's scheduler), run until every node has
    finalized, free it and shut MXNet down, as ``import mxnet`` would. A scheduler runs no updater and gets
    no command, so it needs none of MXNet's Python package, whose import costs about 1.5 CPU s in every job.

    Raises:
        RuntimeError: with MXNet's last error where a call fails.
    """
    import ctypes
    lib = ctypes.CDLL(lib_path, ctypes.RTLD_LOCAL)
    lib.MXGetLastError.restype = ctypes.c_char_p

    def check(code):
        if code != 0:
            raise RuntimeError("MXNet: %s" % lib.MXGetLastError().decode("utf-8", "replace"))

    handle = ctypes.c_void_p()
    check(lib.MXKVStoreCreate(ctypes.c_char_p(b"dist"), ctypes.byref(handle)))
    no_command = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda *_: None)
    check(lib.MXKVStoreRunServer(handle, no_command, None))
    check(lib.MXKVStoreFree(handle))
    check(lib.MXNotifyShutdown())


def run_server():
    """Run this process as a PS-LITE scheduler or server until the job ends.

    Raises:
        SystemExit: if ``DMLC_ROLE`` is neither ``server`` nor ``scheduler``.
    """
    role = os.environ.get("DMLC_ROLE", "")
    if role not in ("server", "scheduler"):
        raise SystemExit("kvstore_ext.server: DMLC_ROLE must be 'server' or 'scheduler', got %r" % role)
    lib_path = _libmxnet_path() if role == "scheduler" else None
    if lib_path is not None:
        _run_scheduler(lib_path)
        return
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
