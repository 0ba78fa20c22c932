"""The mode options' command-line flags, generated from the registered specs.

Every :class:`~mxhet.policy.spec.Option` is a flag of the argument group
"mode options" of ``python -m mxhet.train`` and ``python -m mxhet.sim``. Modes
may share a flag with defaults of their own (``--local-steps``: localsgd's τ,
dylu's H), so every flag defaults to None and the mode's
:meth:`~mxhet.policy.spec.ModeSpec.resolve` fills in its default and checks
the value. A bool takes ``on|off`` (``--frozen-filter off``), or is a bare
switch (``--reset-optimizer-state``). No MXNet here.
"""
from ..errors import ConfigError
from .spec import get_spec, registered_specs

GROUP_TITLE = "mode options"


def flag_table(specs=None):
    """Flag -> its ``(spec, option)`` pairs over ``specs`` (default: every
    registered mode), flags and modes in the order they were registered.

    Raises:
        ConfigError: when the options sharing a flag differ in type, choices or syntax.
    """
    table = {}
    for spec in registered_specs() if specs is None else specs:
        for option in spec.options:
            pairs = table.setdefault(option.flag, [])
            if pairs:
                first = pairs[0][1]
                if (first.type, first.choices, first.switch) != (option.type, option.choices, option.switch):
                    raise ConfigError("flag %s: mode %s's option %s and mode %s's option %s differ in type, "
                                      "choices or syntax" % (option.flag, pairs[0][0].name, first.name,
                                                             spec.name, option.name))
            pairs.append((spec, option))
    return table


def dest(flag):
    """The argparse attribute of ``flag``."""
    return flag[2:].replace("-", "_")


def _shown(option, value):
    if option.type is bool:
        return "on" if value else "off"
    return str(value)


def flag_help(pairs):
    """The help of one flag: per mode (modes with the same text, default and
    rule together) its default, the rule its value must follow, and its text."""
    parts = {}
    for spec, option in pairs:
        shown = "default %s" % _shown(option, option.default)
        if option.check is not None:
            shown += "; %s" % option.check
        parts.setdefault((option.help, shown), []).append(spec.name)
    text = "; ".join("%s (%s): %s" % (", ".join(modes), shown, help_) for (help_, shown), modes in parts.items())
    return text.replace("%", "%%")   # argparse expands %(...)s in help


def add_mode_arguments(parser):
    """Add the group "mode options" to ``parser``: one flag per distinct
    :attr:`Option.flag` of the registered specs. Returns the group."""
    group = parser.add_argument_group(GROUP_TITLE, "options of the sync modes (each flag names the modes that "
                                                   "take it; a mode ignores the others' flags)")
    for flag, pairs in flag_table().items():
        option = pairs[0][1]
        kwargs = dict(dest=dest(flag), default=None, help=flag_help(pairs))
        if option.switch:
            kwargs.update(action="store_const", const=True)
        elif option.type is bool:
            kwargs.update(choices=["on", "off"])
        else:
            kwargs.update(type=option.type)
            if option.choices:
                kwargs.update(choices=list(option.choices))
        group.add_argument(flag, **kwargs)
    return group


def given_options(args, mode):
    """The options of ``mode`` given on the command line ``args`` (flags left
    at None are not given), by name, unchecked; ``on|off`` as bools.

    Raises:
        UnknownModeError: for an unknown mode.
    """
    given = {}
    for option in get_spec(mode).options:
        value = getattr(args, dest(option.flag), None)
        if value is None:
            continue
        if option.type is bool and not option.switch and isinstance(value, str):
            if value not in ("on", "off"):
                raise ConfigError("%s takes on or off, got %r" % (option.flag, value))
            value = value == "on"
        given[option.name] = value
    return given


def resolve_args(args, mode):
    """Every option of ``mode``: the command line's value, else the spec's
    default, checked by the spec.

    Raises:
        ConfigError: naming the mode, the option, its flag and the bad value.
    """
    return get_spec(mode).resolve(given_options(args, mode))

