"""Value checks for mode options (:attr:`mxhet.policy.spec.Option.check`).

A check is called as ``check(label, value)`` after the option's type was
checked, and raises ConfigError naming ``label`` and the value. ``str(check)``
is its rule, as the generated flag help shows it.
"""
import dataclasses
import math
import typing

from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Rule:
    """A value check: ``test(value)`` must hold; ``text`` says what it asks ("> 0")."""
    text: str
    test: typing.Callable

    def __call__(self, label, value):
        if not self.test(value):
            raise ConfigError("%s must be %s, got %r" % (label, self.text, value))

    def __str__(self):
        return self.text


def positive():
    """A finite number > 0."""
    return Rule("finite and > 0", lambda v: math.isfinite(v) and v > 0)


def at_least(minimum):
    """A value >= ``minimum``."""
    return Rule(">= %s" % (minimum,), lambda v: v >= minimum)


def unit_interval():
    """A number in [0, 1)."""
    return Rule("in [0, 1)", lambda v: 0 <= v < 1)
