"""Device profiles: the emulated heterogeneous cluster of a bench run.

A profile names each device's MXNet context and its slowdown ``f`` (1 = the
fastest class; a device of slowdown ``f`` runs an iteration in ``f x T``, where
``T`` is the calibrated base iteration time, see :mod:`bench.calibrate`).

Built in:

* ``paper``: the ESync paper's testbed, 2 CPU-class devices at about 3.5 s per
  batch and 4 GPU-class devices at about 0.03 s, i.e. slowdown 117. The fast
  devices share ``gpu(0)``; a machine with more GPUs can spread them with a
  custom profile.
* ``cpu``: 2 slow devices at slowdown 10 and 2 fast ones, every device on the
  CPU (one core each: two fast devices fill a 2-core machine; four would leave
  each of them half the iterations; see the README's bench section).
* ``smoke``: 2 fast devices and 1 slow one at slowdown 4, on the CPU.

A custom profile is a JSON file::

    {"name": "lab", "devices": [
        {"context": "cpu", "slowdown": 20, "label": "old laptop"},
        {"context": "gpu(0)", "slowdown": 1},
        {"context": "gpu(1)", "slowdown": 1.5}]}
"""
import dataclasses
import json

from mxhet.config import parse_context, parse_slowdown
from mxhet.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Device:
    context: str
    slowdown: float
    label: str = ""


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    devices: tuple

    @property
    def slowdowns(self):
        return tuple(d.slowdown for d in self.devices)

    @property
    def contexts(self):
        return tuple(d.context for d in self.devices)

    def fastest(self):
        """The fastest device (the first of equals): the standalone run's device."""
        return min(self.devices, key=lambda d: d.slowdown)

    def as_dict(self):
        return {"name": self.name, "devices": [dataclasses.asdict(d) for d in self.devices]}


def _paper():
    slow = [Device("cpu", 117.0, "CPU-class (about 3.5 s per batch in the paper)")] * 2
    fast = [Device("gpu(0)", 1.0, "GPU-class (about 0.03 s per batch in the paper)")] * 4
    return Profile("paper", tuple(slow + fast))


def _paper_sim():
    """The paper's speeds for the simulator: every replica computes on this
    machine's CPU; 117x and 1x are virtual speeds."""
    return Profile("paper-sim", tuple(Device("cpu", d.slowdown, d.label) for d in _paper().devices))


BUILTIN = {
    "paper": _paper(),
    "paper-sim": _paper_sim(),
    "cpu": Profile("cpu", tuple([Device("cpu", 10.0, "slow")] * 2 + [Device("cpu", 1.0, "fast")] * 2)),
    "smoke": Profile("smoke", (Device("cpu", 1.0, "fast"), Device("cpu", 1.0, "fast"), Device("cpu", 4.0, "slow"))),
}


def from_dict(obj, default_name="custom"):
    """Build a :class:`Profile` from parsed JSON.

    Raises:
        ConfigError: naming what is wrong.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("devices"), list) or not obj["devices"]:
        raise ConfigError("a profile is an object with a non-empty list 'devices'")
    devices = []
    for i, d in enumerate(obj["devices"]):
        if not isinstance(d, dict):
            raise ConfigError("profile device %d must be an object with 'context' and 'slowdown'" % i)
        unknown = set(d) - {"context", "slowdown", "label"}
        if unknown:
            raise ConfigError("profile device %d has unknown keys %s" % (i, sorted(unknown)))
        try:
            context = d.get("context", "cpu")
            parse_context(context)
            slowdown = parse_slowdown(d.get("slowdown", 1))
        except ConfigError as exc:
            raise ConfigError("profile device %d: %s" % (i, exc)) from None
        devices.append(Device(str(context).strip(), slowdown, str(d.get("label", ""))))
    name = obj.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError("a profile's 'name' must be a non-empty string")
    return Profile(name, tuple(devices))


def load(name_or_path):
    """A built-in profile by name, or a custom one from a JSON file.

    Raises:
        ConfigError: for an unknown name, an unreadable file or a bad profile.
    """
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    try:
        with open(name_or_path) as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise ConfigError("profile %r is neither a built-in profile (%s) nor a file"
                          % (name_or_path, ", ".join(sorted(BUILTIN)))) from None
    except (OSError, ValueError) as exc:
        raise ConfigError("cannot read profile %s: %s" % (name_or_path, exc)) from None
    try:
        return from_dict(obj, default_name=name_or_path)
    except ConfigError as exc:
        raise ConfigError("profile %s: %s" % (name_or_path, exc)) from None
