"""What a mode is, as plain data: :class:`ModeSpec` and its strict registry."""
import dataclasses
import numbers
import typing

from ..errors import ConfigError, UnknownModeError

KVSTORES = ("dist_sync", "dist_async", None)


_TYPES = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def _is_type(value, kind):
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, numbers.Integral)
    if kind is float:
        return isinstance(value, numbers.Real)
    return isinstance(value, kind)


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a mode (passed as ``Trainer(..., name=value)``, or as its
    flag to ``python -m mxhet.train`` and ``python -m mxhet.sim``).

    Several modes may declare options with the same flag (``--local-steps``:
    localsgd's τ and dylu's H), each with its own default; they must agree on
    type, choices and syntax (:mod:`mxhet.policy.flags`).

    Args:
        name: the keyword.
        default: its value when not given.
        help: one line for the user.
        flag: the command-line flag (default: ``--`` and the name, ``_`` as ``-``).
        type: bool, int, float or str (default: the default's type); an int
            is accepted where a float is asked for.
        choices: the values allowed (empty: any value of the type).
        check: ``check(label, value)`` raises ConfigError naming ``label``
            and the value when the value is refused (:mod:`mxhet.policy.checks`).
        switch: a bool given on the command line as a bare flag that sets
            it (``--reset-optimizer-state``); otherwise a bool takes ``on|off``.

    Raises:
        ConfigError: for a type it cannot infer, or a default its own checks refuse.
    """
    name: str
    default: typing.Any
    help: str
    flag: str = ""
    type: typing.Optional[type] = None
    choices: tuple = ()
    check: typing.Optional[typing.Callable] = None
    switch: bool = False

    def __post_init__(self):
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))
        if not self.flag.startswith("--"):
            raise ConfigError("option %r: its flag must start with '--', got %r" % (self.name, self.flag))
        if self.type is None:
            if type(self.default) not in _TYPES:
                raise ConfigError("option %r: give its type (its default %r is not one of bool, int, float, str)"
                                  % (self.name, self.default))
            object.__setattr__(self, "type", type(self.default))
        if self.type not in _TYPES:
            raise ConfigError("option %r: type must be one of bool, int, float, str, got %r" % (self.name, self.type))
        object.__setattr__(self, "choices", tuple(self.choices))
        if self.switch and self.type is not bool:
            raise ConfigError("option %r: only a bool can be a switch" % (self.name,))
        self.validate(self.default, "option %r's default" % (self.name,))

    def validate(self, value, label=None):
        """Check ``value`` against the type, the choices and the check.

        Raises:
            ConfigError: naming ``label`` (default: the name and flag) and the value.
        """
        label = label or "%s (%s)" % (self.name, self.flag)
        if value is None and self.default is None:
            return
        if not _is_type(value, self.type):
            raise ConfigError("%s must be %s, got %r" % (label, _TYPES[self.type], value))
        if self.choices and value not in self.choices:
            raise ConfigError("%s must be one of %s, got %r" % (label, ", ".join(map(str, self.choices)), value))
        if self.check is not None:
            self.check(label, value)


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
        state_rules: the State Server rule plugins a job of this mode loads
            (names in :data:`mxhet.control.rules.PLUGINS`); the State Server
            refuses requests of any other rule's kinds.

    Raises:
        ConfigError: for a malformed name, an unknown kvstore, duplicate options
            or malformed rule names.
    """
    name: str
    kvstore: typing.Optional[str]
    description: str
    needs_state_server: bool = False
    exchanges_deltas: bool = False
    uses_loss: bool = False
    options: tuple = ()
    state_rules: tuple = ()

    def __post_init__(self):
        name = self.name
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum() or name != name.lower():
            raise ConfigError("a mode needs a lowercase alphanumeric name, got %r" % (name,))
        if self.kvstore not in KVSTORES:
            raise ConfigError("mode %r: kvstore must be one of %s, got %r" % (name, KVSTORES, self.kvstore))
        names = [o.name for o in self.options]
        if len(names) != len(set(names)):
            raise ConfigError("mode %r lists an option twice: %s" % (name, names))
        rules = self.state_rules
        if not isinstance(rules, tuple) or not all(isinstance(r, str) and r for r in rules) \
                or len(set(rules)) != len(rules):
            raise ConfigError("mode %r: state_rules must be a tuple of distinct rule names, got %r" % (name, rules))

    @property
    def distributed(self):
        """True if the mode runs with parameter servers."""
        return self.kvstore is not None

    def defaults(self):
        """Option name -> default."""
        return {o.name: o.default for o in self.options}

    def check(self, opts):
        """Check every option of this mode that ``opts`` holds (type, choices, check).

        Raises:
            ConfigError: naming the mode, the option, its flag and the value.
        """
        for o in self.options:
            if o.name in opts:
                o.validate(opts[o.name], "%s: %s (%s)" % (self.name, o.name, o.flag))

    def resolve(self, given):
        """The defaults updated with ``given``, checked (:meth:`check`): both
        engines, the Trainer and the command lines go through here.

        Raises:
            ConfigError: naming options the mode does not take, or a bad value.
        """
        unknown = sorted(set(given) - {o.name for o in self.options})
        if unknown:
            raise ConfigError("mode %r has no option(s) %s; it takes %s"
                              % (self.name, unknown, sorted(o.name for o in self.options) or "none"))
        opts = dict(self.defaults(), **given)
        self.check(opts)
        return opts


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


def registered_specs():
    """Registered specs, in the order they were registered."""
    return list(_SPECS.values())


def spec_names():
    """Registered mode names, sorted."""
    return sorted(_SPECS)
