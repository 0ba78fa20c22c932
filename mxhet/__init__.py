"""mxhet: heterogeneity-aware distributed training for Apache MXNet / Gluon."""
__version__ = "0.1.0"

from .errors import (ConfigError, DataError, MxhetError, ProtocolError,  # noqa: F401
                     StateServerTimeout, UnknownModeError)


def __getattr__(name):
    # Imported lazily: the launcher and the State Server do not need MXNet.
    if name == "Trainer":
        from .trainer import Trainer
        return Trainer
    if name in ("split_by_speed", "measure_speeds"):
        from . import contexts
        return getattr(contexts, name)
    raise AttributeError("module 'mxhet' has no attribute %r" % name)
