"""Devices that leave a simulated job: ``python -m mxhet.sim --events 3:leave@120``.

A pure parser (no SimPy): the simulator's interpreter of worker programs
(:func:`mxhet.sim.program.run_program`) reads the result. A device leaves at
the first iteration boundary at or after its time, as a cluster worker whose
script stops calling ``step()``: it says goodbye to the State Server and the
rounds go on without it (:mod:`mxhet.control.membership`).
"""
import math

from ..errors import ConfigError

KINDS = ("leave",)


def parse_events(text, num_devices):
    """``"3:leave@120,1:leave@300"`` -> ``{3: 120.0, 1: 300.0}`` (slot -> virtual seconds).

    Raises:
        ConfigError: naming the bad entry (syntax, unknown kind, slot out of
            range, a negative or non-finite time, a slot given twice).
    """
    leaves = {}
    if not text:
        return leaves
    for entry in text.split(","):
        entry = entry.strip()
        try:
            slot_text, rest = entry.split(":", 1)
            kind, time_text = rest.split("@", 1)
            slot, at = int(slot_text), float(time_text)
        except ValueError:
            raise ConfigError("--events entry %r is not SLOT:KIND@SECONDS (e.g. 3:leave@120)" % entry) from None
        if kind not in KINDS:
            raise ConfigError("--events entry %r: kind must be one of %s, got %r" % (entry, ", ".join(KINDS), kind))
        if not 0 <= slot < num_devices:
            raise ConfigError("--events entry %r: slot must be in [0, %d)" % (entry, num_devices))
        if not (math.isfinite(at) and at >= 0):
            raise ConfigError("--events entry %r: the time must be a finite number of seconds >= 0" % entry)
        if slot in leaves:
            raise ConfigError("--events: slot %d leaves twice" % slot)
        leaves[slot] = at
    return leaves
