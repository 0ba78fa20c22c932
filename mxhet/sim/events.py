"""Devices that leave a simulated job and come back: ``python -m mxhet.sim --events 3:leave@120,3:join@300``.

A pure parser (no SimPy): the simulator's interpreter of worker programs
(:func:`mxhet.sim.program.run_program`) reads the result. A device leaves at
the first iteration boundary at or after its time, as a cluster worker whose
script stops calling ``step()``: it says goodbye to the State Server and the
rounds go on without it (:mod:`mxhet.control.membership`). A device that
joins at T registers again at T, as a restarted cluster worker does
(``mxhet-launch --max-restarts``): it takes the global model, a fresh local
optimizer, and takes part from the next round boundary.
"""
import math

from ..errors import ConfigError

KINDS = ("leave", "join")


def parse_events(text, num_devices):
    """``"3:leave@120,1:leave@300"`` -> ``{3: 120.0, 1: 300.0}`` (slot -> virtual seconds it leaves);
    see :func:`parse_schedule` for the joins too.

    Raises:
        ConfigError: as :func:`parse_schedule`.
    """
    return parse_schedule(text, num_devices)[0]


def parse_schedule(text, num_devices):
    """``"3:leave@120,3:join@300"`` -> ``({3: 120.0}, {3: 300.0})``: the virtual seconds each slot
    leaves, and those it joins again.

    Raises:
        ConfigError: naming the bad entry (syntax, unknown kind, slot out of
            range, a negative or non-finite time, a slot that leaves or joins
            twice, a join without an earlier leave of the same slot).
    """
    leaves, joins = {}, {}
    if not text:
        return leaves, joins
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
        chosen = leaves if kind == "leave" else joins
        if slot in chosen:
            raise ConfigError("--events: slot %d %ss twice" % (slot, kind))
        chosen[slot] = at
    for slot, at in joins.items():
        if not leaves.get(slot, at) < at:
            raise ConfigError("--events: slot %d joins at %g s without leaving before" % (slot, at))
    return leaves, joins
