"""The strict registry of synchronization modes.

A mode is a :class:`~mxhet.modes.base.SyncMode` subclass registered under a
unique name with :func:`register`. The Trainer, the launcher and the bench look
modes up by name with :func:`get_mode`; nothing else switches on mode strings.
"""
from ..errors import ConfigError, UnknownModeError

_MODES = {}


def register(cls):
    """Class decorator: register a SyncMode subclass under ``cls.name``.

    Raises:
        ConfigError: if the name is empty, malformed, or already taken by
            another class.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or not name.replace("_", "").isalnum() or name != name.lower():
        raise ConfigError("a mode needs a lowercase alphanumeric name, got %r" % (name,))
    existing = _MODES.get(name)
    if existing is not None and existing is not cls:
        raise ConfigError("mode %r is already registered by %s.%s"
                          % (name, existing.__module__, existing.__qualname__))
    _MODES[name] = cls
    return cls


def get_mode(name):
    """The mode class registered under ``name``.

    Raises:
        UnknownModeError: naming the known modes.
    """
    try:
        return _MODES[name]
    except (KeyError, TypeError):
        raise UnknownModeError("unknown sync mode %r; known modes: %s"
                               % (name, ", ".join(sorted(_MODES)))) from None


def mode_names():
    """Registered mode names, sorted."""
    return sorted(_MODES)
