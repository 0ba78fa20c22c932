"""Abandoning an iteration before its update (ESync's delayed READY, §4.2;
G-CADA's dropped gradient).

A mode says *whether* (``SyncMode.should_abort``) and *what next*
(``SyncMode.on_abort``); this module does what every abandon shares, so no
mode can apply part of an abandoned iteration or count its time twice.
"""
from ..gluon_private import mark_grad_used


def drop_gradients(params):
    """Mark ``params``' gradients used without applying them (an abandoned
    iteration, or ESync's test batch), so gluon's stale-gradient check holds."""
    for p in params:
        if p.grad_req != "null":  # BatchNorm statistics have no gradient to drop
            for data in p.list_data():
                mark_grad_used(data)


def abandon_iteration(timer, stats, drop, on_abort):
    """Give up the current iteration: count it in ``stats.aborted``, its
    seconds so far as compute time (no iteration, no samples), drop its
    gradients (``drop()``), then run the mode's ``on_abort()``, whose time is
    wait time (:class:`~mxhet.modes.timing.StepTimer`)."""
    stats.aborted += 1
    timer.abandoned()
    drop()
    t0 = timer.clock()
    on_abort()
    timer.waited(t0)
