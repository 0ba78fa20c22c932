"""Under ``mxhet-launch``, MXNet's generic ``kv.create('dist')`` creates the kvstore the mode needs.

MXNet's distributed examples call ``store = kv.create('dist')`` for ``store.rank``
and ``store.num_workers``. That kvstore is the worker's one connection to
PS-LITE (a second one would wait forever in a start-up barrier), and ``'dist'``
puts the servers in synchronous mode for good: rank 0 sends the command from the
kvstore's constructor and the servers have no command that undoes it. The modes
whose servers add every push on arrival (``dist_async``: the asynchronous modes,
and ESync and local SGD, whose workers may leave) could then only refuse the
script. So in a worker the launcher started, ``'dist'`` -- the name that says
"distributed" without choosing -- is read as the mode's type; an explicit type
(``dist_sync``, ``dist_async``, ...) is kept, and a misfit is refused by the
Trainer with a clear error (:func:`mxhet.dataplane.channel.check_kvstore`).
"""
import functools

GENERIC = "dist"
ELASTIC_KVSTORE = "dist_async"   # the kvstore of every mode under --elastic --max-restarts


def install(kvstore_type):
    """Make ``mxnet.kv.create('dist')`` create a ``kvstore_type`` kvstore (idempotent).

    Raises:
        ValueError: ``kvstore_type`` is not a dist type.
    """
    if not kvstore_type.startswith("dist_"):
        raise ValueError("kvstore_type must be a dist type such as 'dist_async', got %r" % (kvstore_type,))
    from .mxnet_import import import_mxnet
    mx = import_mxnet()
    current = mx.kvstore.create
    if getattr(current, "mxhet_alias", None) == kvstore_type:
        return
    original = getattr(current, "__wrapped__", current)

    @functools.wraps(original)
    def create(name="local"):
        return original(kvstore_type if name == GENERIC else name)
    create.mxhet_alias = kvstore_type
    mx.kvstore.create = create   # mx.kv is the same module


def install_for_launched_worker(env=None):
    """In a worker ``mxhet-launch`` started for a ``dist_async`` mode, install
    the alias; elsewhere (the launcher, servers, the State Server, a script run
    alone, the ``dist_sync`` modes, for which ``'dist'`` already fits) do nothing."""
    from .config import launched_worker_mode, spare_setup
    from .errors import UnknownModeError
    from .policy import get_spec
    mode = launched_worker_mode(env)
    if mode is None:
        return
    try:
        kvstore_type = get_spec(mode).kvstore
    except UnknownModeError:   # the Trainer reports it, with the known modes
        return
    setup = spare_setup(env)
    if setup is not None:
        # A job with spare workers (--max-restarts above 1, only under --elastic): every worker's kvstore
        # reports the job's rank and size, and a spare waits here for a slot (mxhet/spares.py).
        from .mxnet_import import import_mxnet
        mx = import_mxnet()
        from .spares import install as install_spares
        current = mx.kvstore.create
        # every mode that takes --max-restarts runs dist_async servers under --elastic (nodelay too,
        # whose spec says dist_sync: its elastic executor switches), so a spare creates that type
        install_spares(setup, ELASTIC_KVSTORE, getattr(current, "__wrapped__", current))
        return
    if kvstore_type == "dist_async":
        install(kvstore_type)
