"""Tests only: a worker kills itself at a chosen point of its exchanges, so that an integration test can
place a death exactly where a rule must handle it.

Two points, each named by a variable :mod:`mxhet.config` reads into the worker's config:
``MXHET_TEST_KILL_AFTER_PUSH`` (between a push the servers applied and the pull that would follow it) and
``MXHET_TEST_KILL_COMPUTING`` (while computing, before any part in a round). Every mode with such a point
calls :func:`kill_if_due` there with its own count of rounds (rounds, steps, transfer rounds, groups).

A spec is ``RANK[,RANK...]:ROUND[:PATH]``: the workers of those PS-LITE ranks die by SIGKILL at round
ROUND. PATH marks a process's first life: the hook writes it before the kill (what was pushed, as .npz,
or an empty file) and never kills while it exists, so a worker started again in the dead one's place --
which PS-LITE may give the same rank, and which may count its rounds from 0 again -- is not killed too.
A PATH is one process's mark, so it goes with one rank.
"""
import dataclasses
import functools
import os
import signal

from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class KillSpec:
    """A parsed spec: the PS-LITE ``ranks`` that die, at ``round``, first life marked by ``path`` ("" none)."""
    ranks: frozenset
    round: int
    path: str = ""


@functools.lru_cache(maxsize=8)
def parse_kill_spec(spec):
    """Parse ``RANK[,RANK...]:ROUND[:PATH]`` (PATH may hold colons).

    Raises:
        ConfigError: when ``spec`` is malformed, or names several ranks with one PATH.
    """
    parts = spec.split(":", 2)
    try:
        ranks = frozenset(int(r) for r in parts[0].split(","))
        round_ = int(parts[1])
    except (ValueError, IndexError):
        raise ConfigError("a test kill spec (MXHET_TEST_KILL_AFTER_PUSH, MXHET_TEST_KILL_COMPUTING) must be "
                          "RANK[,RANK...]:ROUND[:PATH], got %r" % (spec,)) from None
    path = parts[2] if len(parts) == 3 else ""
    if path and len(ranks) > 1:
        raise ConfigError("a test kill spec's PATH marks one process's first life; %r names %d ranks"
                          % (spec, len(ranks)))
    return KillSpec(ranks, round_, path)


def kill_due(spec, rank, round_index):
    """Whether ``spec`` ("" never) kills the worker of PS-LITE ``rank`` at ``round_index`` in this life."""
    if not spec:
        return False
    kill = parse_kill_spec(spec)
    return rank in kill.ranks and round_index == kill.round and not (kill.path and os.path.exists(kill.path))


def kill_if_due(spec, rank, round_index, pushed=None):
    """Die by SIGKILL when :func:`kill_due`, having written the spec's PATH: ``pushed`` (the arrays of a push
    just made: the after-push point) are waited for and saved to it (.npz, in order); None (the computing
    point): an empty file."""
    if not kill_due(spec, rank, round_index):
        return
    path = parse_kill_spec(spec).path
    if pushed is not None:
        import mxnet as mx
        mx.nd.waitall()   # the push has left and its arrays are final
        if path:
            import numpy as np
            with open(path, "wb") as f:
                np.savez(f, *[a.asnumpy() for a in pushed])
    elif path:
        with open(path, "w"):
            pass
    _die()


def _die():
    os.kill(os.getpid(), signal.SIGKILL)
