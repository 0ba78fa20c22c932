"""What a mode is, as plain data: :class:`ModeSpec` and its strict registry."""
import dataclasses
import typing

from ..errors import ConfigError, UnknownModeError

KVSTORES = ("dist_sync", "dist_async", None)


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a mode (passed as ``Trainer(..., name=value)``).

    Args:
        name: the keyword.
        default: its value when not given.
        help: one line for the user.
    """
    name: str
    default: typing.Any
    help: str


@dataclasses.dataclass(frozen=True)
class ModeSpec:
    """Everything about a mode that the launcher, the bench and the docs need.

    Args:
        name: the registry name (lowercase alphanumeric, ``_`` allowed).
        kvstore: ``"dist_sync"``, ``"dist_async"`` or None (standalone).
        description: one line.
        needs_state_server: the algorithm itself asks the State Server (every
            distributed job gets one anyway, for heartbeats and the model check).
        exchanges_deltas: workers push model deltas (the global model is the
            last pulled one, not the replica).
        uses_loss: the mode reads the training loss.
        options: the mode's :class:`Option` records.

    Raises:
        ConfigError: for a malformed name, an unknown kvstore or duplicate options.
    """
    name: str
    kvstore: typing.Optional[str]
    description: str
    needs_state_server: bool = False
    exchanges_deltas: bool = False
    uses_loss: bool = False
    options: tuple = ()

    def __post_init__(self):
        name = self.name
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum() or name != name.lower():
            raise ConfigError("a mode needs a lowercase alphanumeric name, got %r" % (name,))
        if self.kvstore not in KVSTORES:
            raise ConfigError("mode %r: kvstore must be one of %s, got %r" % (name, KVSTORES, self.kvstore))
        names = [o.name for o in self.options]
        if len(names) != len(set(names)):
            raise ConfigError("mode %r lists an option twice: %s" % (name, names))

    @property
    def distributed(self):
        """True if the mode runs with parameter servers."""
        return self.kvstore is not None

    def defaults(self):
        """Option name -> default."""
        return {o.name: o.default for o in self.options}

    def resolve(self, given):
        """The defaults updated with ``given``.

        Raises:
            ConfigError: naming options the mode does not take.
        """
        unknown = sorted(set(given) - {o.name for o in self.options})
        if unknown:
            raise ConfigError("mode %r has no option(s) %s; it takes %s"
                              % (self.name, unknown, sorted(o.name for o in self.options) or "none"))
        return dict(self.defaults(), **given)


_SPECS = {}


def register_spec(spec):
    """Register ``spec`` under its name; returns it.

    Raises:
        ConfigError: if another spec already has the name.
    """
    existing = _SPECS.get(spec.name)
    if existing is not None and existing != spec:
        raise ConfigError("mode %r is already registered" % (spec.name,))
    _SPECS[spec.name] = spec
    return spec


def get_spec(name):
    """The :class:`ModeSpec` registered under ``name``.

    Raises:
        UnknownModeError: naming the known modes.
    """
    try:
        return _SPECS[name]
    except (KeyError, TypeError):
        raise UnknownModeError("unknown sync mode %r; known modes: %s"
                               % (name, ", ".join(sorted(_SPECS)))) from None


def spec_names():
    """Registered mode names, sorted."""
    return sorted(_SPECS)
