"""Value checks for mode options (:attr:`mxhet.policy.spec.Option.check`).

A check is called as ``check(label, value)`` after the option's type was
checked, and raises ConfigError naming ``label`` and the value. ``str(check)``
is its rule, as the generated flag help shows it. Checks are plain data (no
closures), so specs compare by value and pickle.
"""
import dataclasses
import math
import typing

from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Bounds:
    """``low <= value`` (``low < value`` if not ``low_inclusive``), ``value < high``
    if ``high`` is given, and finite if ``finite``; ``text`` says so ("> 0")."""
    text: str
    low: float
    high: typing.Optional[float] = None
    low_inclusive: bool = True
    finite: bool = False

    def __call__(self, label, value):
        ok = value >= self.low if self.low_inclusive else value > self.low
        ok = ok and (self.high is None or value < self.high) and (not self.finite or math.isfinite(value))
        if not ok:
            raise ConfigError("%s must be %s, got %r" % (label, self.text, value))

    def __str__(self):
        return self.text


@dataclasses.dataclass(frozen=True)
class OffOrAtLeast:
    """0 (the option is off) or a finite value >= ``minimum``."""
    minimum: float

    def __call__(self, label, value):
        if not (value == 0 or (math.isfinite(value) and value >= self.minimum)):
            raise ConfigError("%s must be %s, got %r" % (label, self, value))

    def __str__(self):
        return "0 (off) or >= %s" % (self.minimum,)


def positive():
    """A finite number > 0."""
    return Bounds("finite and > 0", 0, low_inclusive=False, finite=True)


def at_least(minimum):
    """A value >= ``minimum``."""
    return Bounds(">= %s" % (minimum,), minimum)


def unit_interval():
    """A number in [0, 1)."""
    return Bounds("in [0, 1)", 0, high=1)
