"""The strict registry of synchronization modes' executors.

A mode is described by a :class:`~mxhet.policy.ModeSpec` (readable without
MXNet: :func:`mxhet.policy.get_spec`) and carried out on the cluster by a
:class:`~mxhet.modes.base.SyncMode` subclass registered under the spec's name
with :func:`register`. The Trainer looks the executor up by name with
:func:`get_mode`; nothing else switches on mode strings. A mode whose worker
protocol is a program (:mod:`mxhet.protocol`) names it as its class's
``program``; the simulator runs it from here (:func:`get_program`).
"""
from ..errors import ConfigError, UnknownModeError
from ..policy import get_spec

_MODES = {}


def register(cls):
    """Class decorator: register a SyncMode subclass under ``cls.name``.

    Raises:
        ConfigError: if the class names no registered spec, or the name is
            already taken by another class.
    """
    spec = getattr(cls, "spec", None)
    if spec is None:
        raise ConfigError("mode class %s names no ModeSpec (set its ``spec``)" % (cls.__qualname__,))
    if get_spec(spec.name) is not spec:
        raise ConfigError("mode class %s: spec %r is not the registered one" % (cls.__qualname__, spec.name))
    name = spec.name
    existing = _MODES.get(name)
    if existing is not None and existing is not cls:
        raise ConfigError("mode %r is already registered by %s.%s"
                          % (name, existing.__module__, existing.__qualname__))
    _MODES[name] = cls
    return cls


def get_mode(name, elastic=False):
    """The mode class registered under ``name``; with ``elastic`` (``mxhet-launch --elastic``, the
    simulator's ``--events``) the class's ``elastic_executor`` if it names one (``sync``: rounds of
    the members the State Server names, :class:`mxhet.modes.gradient.ElasticSync`).

    Raises:
        UnknownModeError: naming the known modes.
    """
    try:
        cls = _MODES[name]
    except (KeyError, TypeError):
        raise UnknownModeError("unknown sync mode %r; known modes: %s"
                               % (name, ", ".join(sorted(_MODES)))) from None
    return (getattr(cls, "elastic_executor", None) or cls) if elastic else cls


def mode_names():
    """Registered mode names, sorted."""
    return sorted(_MODES)


def get_program(name, elastic=False):
    """The worker program of mode ``name`` (``program(opts, stats)`` -> generator
    of :mod:`mxhet.protocol.effects`), or None for a mode whose protocol is not
    a program yet; ``elastic`` as :func:`get_mode`'s.

    Raises:
        UnknownModeError: naming the known modes.
    """
    return getattr(get_mode(name, elastic), "program", None)
