"""What every mode saves in a checkpoint to resume (``mxhet.checkpoint``), as
plain JSON data: the counters the stop conditions and the programs read.
A mode with more to resume extends ``SyncMode.checkpoint_state`` /
``restore_state`` (ESync's round, its outer momentum)."""

RESUMED_COUNTERS = ("rounds", "iterations", "samples")
"""The :class:`~mxhet.modes.stats.WorkerStats` counters a resumed worker goes on from."""


def counters_state(stats):
    """The record of ``stats``' resumed counters (name -> int)."""
    return {name: getattr(stats, name) for name in RESUMED_COUNTERS}


def restore_counters(stats, state):
    """Set ``stats``' resumed counters from :func:`counters_state`'s record.

    Raises:
        KeyError: the record lacks one of them.
    """
    for name in RESUMED_COUNTERS:
        setattr(stats, name, int(state[name]))
