"""ADSP's worker program (mode ``adsp``; see :mod:`mxhet.protocol`).

Hu, Wang and Wu, "Distributed Machine Learning through Heterogeneous Edge
Systems" (AAAI 2020): every worker trains its replica without waiting and
commits its accumulated update ``Δ = w_local - w_pulled`` through
``dist_async`` at the rate the State Server's scheduler
(:mod:`mxhet.control.adsp`) sets; the timer that spreads the commits is
:class:`mxhet.policy.worker.ADSPPolicy`.
"""
from ..policy import specs
from ..policy.speed import DEFAULT_WEIGHT, MovingAverage
from ..policy.worker import Action, ADSPPolicy
from .effects import MeasuredCompute, Now, Payload, PushAsync, ReportCommits, WantsStop

LOSS_WEIGHT = DEFAULT_WEIGHT
"""Weight of the newest batch in the reported loss (1: the last batch's raw loss).

The scheduler's reward fits ``loss = 1/(a1² t + a2) + a3`` to a few
``(t, loss)`` pairs per window (the paper's §4.2: "at the start, middle and
end" of it) and compares two windows' fits; the paper's ℓ is the model's
loss at t. One mini-batch's loss is that plus the batch's sampling noise,
which with a handful of pairs per window outweighs the difference between
two commit rates; the moving average estimates the model's loss at t with a
lag of about 1/LOSS_WEIGHT iterations, short against a window of several
check periods."""


def check_options(opts):
    """Raises ConfigError for an invalid option (the spec's checks: ``global_lr``, the servers' ε, > 0)."""
    specs.ADSP.check(opts)


def adsp(opts, stats):
    """ADSP: report to the scheduler, then per iteration ask the commit timer
    whether to commit (push the delta asynchronously, pull the global model),
    report again (after a commit, or once a met target's period is over), or
    go on. A worker that wants to stop commits its local work first, then
    stops alone, as the asynchronous modes do.

    Raises:
        ConfigError: for invalid options (:func:`check_options`).
    """
    check_options(opts)
    policy = ADSPPolicy()
    loss = MovingAverage(LOSS_WEIGHT)

    def report():
        target, left = yield ReportCommits(policy.commits, loss.get(-1.0), float(policy.commit_cost))
        policy.schedule((yield Now()), target, left)

    yield from report()
    while True:
        measured = yield MeasuredCompute(local_step=True)
        if measured.loss is not None:
            loss.update(measured.loss)
        stopping = yield WantsStop()
        action = policy.completed((yield Now()), measured.seconds, stopping=stopping)
        if action is Action.REPORT:
            yield from report()
        if action is not Action.COMMIT:
            continue
        t0 = yield Now()
        yield PushAsync(Payload.DELTAS, stats.rounds)
        k = policy.committed((yield Now()) - t0)
        stats.rounds += 1
        stats.local_iters.append(k)
        if stopping or (yield WantsStop()):
            return
        yield from report()
