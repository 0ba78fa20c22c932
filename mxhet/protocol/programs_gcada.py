"""The worker program of G-CADA and CADA (modes ``gcada``, ``cada``; see :mod:`mxhet.protocol`).

The decisions are the State Server's (:class:`mxhet.control.gcada.GroupCoordinator`):
which groups compute in iteration k, which member uploads, when the servers
step; the servers apply AMSGrad over every group's last gradient
(:class:`kvstore_ext.gcada.GroupAMSGrad`). CADA is the same with groups of one.
"""
from .effects import BeginIteration, ClaimUpload, Download, StepServers, Upload, WantsStop, WatchedCompute


def gcada(opts, stats):
    """G-CADA's worker: ask for the next iteration until its group is selected
    (or have the servers step when nobody is), download θ^k, compute one
    gradient unless a teammate claimed the upload first (the work is then
    dropped at once), claim the upload; the first finisher uploads, the last
    upload of the iteration has the servers step. A wish to stop travels with
    the request; the State Server answers stop to all."""
    wanted = 0
    while True:
        wants = yield WantsStop()
        selection = yield BeginIteration(wanted, bool(wants))
        stats.rounds = selection.round     # iterations the job finished
        if selection.stop:
            return
        k = selection.round
        wanted = k + 1
        if selection.target:               # nobody selected: this worker has the servers step
            yield StepServers(k)
            continue
        if not selection.ready:
            continue
        yield Download(k)
        if not (yield WatchedCompute()):   # a teammate finished first (counted as an aborted step)
            continue
        first = yield ClaimUpload(k)
        stats.local_iters.append(1)
        if not first:                      # a teammate claimed it meanwhile: this gradient is dropped
            stats.aborted += 1
            continue
        if (yield Upload(k)):
            yield StepServers(k)
