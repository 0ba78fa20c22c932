"""mxhet: heterogeneity-aware distributed training for Apache MXNet / Gluon."""
__version__ = "0.1.0"

from .errors import (ConfigError, DataError, MxhetError, ProtocolError,  # noqa: F401
                     StateServerTimeout, UnknownModeError)


def _install_kvstore_alias():
    # Before the script's own kv.create('dist') (mxhet/kvstore_alias.py says why); only in a
    # worker the launcher started for a mode on dist_async servers, so nothing else imports MXNet.
    from .kvstore_alias import install_for_launched_worker
    install_for_launched_worker()


_install_kvstore_alias()


def __getattr__(name):
    # Imported lazily: the launcher and the State Server do not need MXNet.
    if name == "Trainer":
        from .trainer import Trainer
        return Trainer
    if name in ("split_by_speed", "measure_speeds"):
        from . import contexts
        return getattr(contexts, name)
    raise AttributeError("module 'mxhet' has no attribute %r" % name)
