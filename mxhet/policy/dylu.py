"""Asynchronous local SGD with Dynamic Local Updates (mode ``dylu``): its pure rules.

Liu, Douillard et al., "Asynchronous Local-SGD Training for Language
Modeling" (2024, arXiv 2401.09135): each worker runs H_i local steps, pushes
its delta asynchronously and pulls the global model; Dynamic Local Updates
(DyLU) sets ``H_i = H * speed_i / speed_fastest`` so that every worker pushes
after about the same wall-clock time. The servers' Delayed Nesterov rule is
:class:`kvstore_ext.updaters.DelayedNesterov`; the worker program is
:func:`mxhet.protocol.programs_async_local.dylu`.
"""
import math



def fastest(iteration_times):
    """The shortest known iteration time (seconds) in ``iteration_times``;
    entries <= 0 mean "not measured yet" and are skipped. None if none is known."""
    known = [float(t) for t in iteration_times if t > 0]
    return min(known) if known else None


def local_steps_for(base, iteration_s, fastest_s):
    """DyLU's H_i: ``base`` (H, the fastest device's local steps) scaled by this
    device's speed relative to the fastest, ``H * fastest_s / iteration_s``,
    rounded down, at least 1. Without a measurement (either time None or
    <= 0) the device runs ``base`` steps.

    Args:
        base: H, a positive integer.
        iteration_s: this device's smoothed seconds per iteration.
        fastest_s: the fastest device's seconds per iteration.

    Raises:
        ValueError: for a base that is not a positive integer.
    """
    if isinstance(base, bool) or not isinstance(base, int) or base < 1:
        raise ValueError("local_steps (H) must be a positive integer, got %r" % (base,))
    if not iteration_s or not fastest_s or iteration_s <= 0 or fastest_s <= 0:
        return base
    return max(1, min(base, int(math.floor(base * fastest_s / iteration_s + 0.5))))


def check_options(opts):
    """Validate mode ``dylu``'s resolved options, by its spec.

    Raises:
        ConfigError: naming the bad option and value.
    """
    from .specs import DYLU
    DYLU.check(opts)
