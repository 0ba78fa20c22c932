"""Worker-side policies: what a worker does after each local iteration.

An executor calls :meth:`completed` when a local iteration (forward, backward,
local update) is done and carries out the returned :class:`Action`; it tells
the policy what came of it (:meth:`ESyncPolicy.answer`, :meth:`aggregated`,
:meth:`ADSPPolicy.committed`, ...). Times are plain floats in seconds from the
executor's clock (real or virtual); nothing here reads a clock.
"""
import enum

from ..errors import ConfigError
from .speed import MovingAverage


class Action(enum.Enum):
    CONTINUE = "continue"    # start the next local iteration
    QUERY = "query"          # ESync: ask the State Server (QUERY-STATE) for this round
    ABORT = "abort"          # ESync: abandon the iteration in progress, then aggregate
    AGGREGATE = "aggregate"  # push the round's model delta, pull the new global model
    PUSH = "push"            # gradient modes: push this iteration's gradient, pull the weights
    COMMIT = "commit"        # ADSP: push the accumulated update, pull the global model
    REPORT = "report"        # ADSP: ask the scheduler for the next period's commit target


class ESyncPolicy:
    """Algorithm 1 on the worker: local iterations until the State Server says READY.

    After every completed iteration the worker queries (:attr:`Action.QUERY`,
    for round :attr:`round` and local iteration :attr:`k`). With blocking
    ACKs the answer comes back before anything else; with delayed ACKs
    (§4.2) answers arrive whenever they do: a READY for the current round
    makes the worker aggregate right after the query (:meth:`after_query`), or
    abandon the iteration in progress before its update (:meth:`before_update`).
    Answers for an earlier round are ignored (late or duplicated).

    Before its first query a worker runs one test batch (Algorithm 1 line 3,
    RUN-BATCH-DATA-TEST): a forward and backward pass timed as an iteration
    whose gradient is dropped, so the replica stays w_t (line 6). It reports
    that time with k = 0 (:meth:`test_batch_done`), which Algorithm 2 always
    answers NOT-READY; the State Server then knows every device's capability
    before any device asks to aggregate, and two equally slow devices end
    round 0 together instead of the first to report running a second
    iteration while the other waits. The test batch is not a local iteration
    (not in :attr:`k`, nor in a round's count); a worker resumed from a
    checkpoint runs one too, since a fresh State Server knows nothing of it.

    With ``max_local_steps`` K > 0 a device also aggregates after its K-th
    local iteration of a round, READY or not, and waits there for the
    slowest: on non-i.i.d. data a fast device's many steps on its own labels
    pull the model its way, and K bounds that drift (at the price of idle
    time). It still queries after every iteration, so the State Server keeps
    its capability current; a round it closes this way has no slowest (-1).

    Args:
        round_: the round to start in (> 0 when resuming).
        max_local_steps: K, the most local iterations a round; 0: no cap
            (Algorithm 2 alone).

    Raises:
        ConfigError: for a negative or non-integer ``round_`` or ``max_local_steps``.
    """

    def __init__(self, round_=0, max_local_steps=0):
        if isinstance(round_, bool) or not isinstance(round_, int) or round_ < 0:
            raise ConfigError("round must be an integer >= 0, got %r" % (round_,))
        if isinstance(max_local_steps, bool) or not isinstance(max_local_steps, int) or max_local_steps < 0:
            raise ConfigError("max_local_steps must be an integer >= 0 (0: no cap), got %r" % (max_local_steps,))
        self.round = round_
        self.max_local_steps = max_local_steps
        self.k = 0                # local iterations completed in this round
        self.ready = False        # a READY for this round has arrived
        self.slowest = -1         # the rank the State Server took for the slowest, from the READY
        self.late_replies = 0
        self.tested = False       # the test batch was run and reported (Algorithm 1 line 3)

    def test_batch_done(self):
        """The test batch finished: query the State Server with k = 0 and its time.

        Raises:
            ConfigError: if a test batch was already reported.
        """
        if self.tested:
            raise ConfigError("the test batch (Algorithm 1 line 3) runs once, before the first query")
        self.tested = True
        return Action.QUERY

    def completed(self):
        """A local iteration finished: query the State Server (for :attr:`round`, :attr:`k`)."""
        self.k += 1
        return Action.QUERY

    def answer(self, round_, ready, slowest=-1):
        """An answer to a query of round ``round_`` arrived."""
        if round_ != self.round:
            self.late_replies += 1
        elif ready and not self.ready:
            self.ready, self.slowest = True, slowest

    def join_round(self, round_):
        """``--round-deadline``: a late device's READY names the later round its
        delta enters (:mod:`mxhet.policy.deadline`); it aggregates in that round.

        Raises:
            ValueError: for a round before the current one.
        """
        if round_ < self.round:
            raise ValueError("cannot join round %d from round %d" % (round_, self.round))
        self.round = round_

    def after_query(self):
        """AGGREGATE once a READY for this round is in or the cap is reached, else CONTINUE."""
        if self.ready or (self.max_local_steps and self.k >= self.max_local_steps):
            return Action.AGGREGATE
        return Action.CONTINUE

    def before_update(self):
        """Before the update of the iteration in progress: ABORT it (and
        aggregate the completed ones) once a READY is in, else CONTINUE."""
        return Action.ABORT if self.ready else Action.CONTINUE

    def aggregated(self):
        """The round's delta was averaged; returns ``(round, k, slowest)`` of the
        finished round and starts the next one."""
        done = (self.round, self.k, self.slowest)
        self.round += 1
        self.k = 0
        self.ready, self.slowest = False, -1
        return done


class LocalSGDPolicy:
    """Local SGD / fixed ADACOMM: aggregate after every τ local steps.

    Args:
        local_steps: τ, a positive integer.
    """

    def __init__(self, local_steps):
        if isinstance(local_steps, bool) or not isinstance(local_steps, int) or local_steps < 1:
            raise ConfigError("local_steps (tau) must be a positive integer, got %r" % (local_steps,))
        self.local_steps = local_steps
        self.k = 0

    def completed(self):
        self.k += 1
        return Action.AGGREGATE if self.k >= self.local_steps else Action.CONTINUE

    def aggregated(self):
        """Returns the local steps of the finished round."""
        done, self.k = self.k, 0
        return done


class GradientPolicy:
    """Sync, async, SSP, DC-ASGD: every iteration's gradient goes to the servers."""

    def completed(self):
        return Action.PUSH


REPORT_MARGIN = 0.05
"""Seconds after a checkpoint at which an ADSP worker that met its target asks for the next one."""


class ADSPPolicy:
    """ADSP's commit timer on the worker (the scheduler is :mod:`mxhet.control.adsp`).

    Each scheduler report answers with the total commits due by the next
    checkpoint and the time left until it (:meth:`schedule`); the worker
    spreads the remaining commits evenly over that time, minus its measured
    commit cost O_i (the paper's timer Γ/ΔC_target^i − O_i, re-aimed after
    every commit so all workers reach the checkpoint with the same count), and
    commits at the iteration boundary nearest to the due time.

    Args:
        report_margin: seconds after a checkpoint at which a worker that met
            its target asks again.
    """

    def __init__(self, report_margin=REPORT_MARGIN):
        self.report_margin = float(report_margin)
        self.commits = 0
        self.cost = MovingAverage()   # seconds per commit
        self.next_commit = None       # when to commit next (None: this period's target is met)
        self.next_report = 0.0        # when to ask for the next period's target, if it is met
        self.k = 0                    # local iterations since the last commit

    @property
    def commit_cost(self):
        return self.cost.get()

    def schedule(self, now, target, left):
        """The scheduler's answer at ``now``: ``target`` total commits by a checkpoint ``left`` seconds away."""
        due = target - self.commits
        if due <= 0:
            # Target met: no commit until the next period; ask again once it began.
            self.next_commit = None
            self.next_report = now + left + self.report_margin
        else:
            # Aim at the middle of the next slot of the remaining time, so the
            # last commit of a period lands well before its checkpoint.
            self.next_commit = now + max(0.0, 0.5 * left / due - self.commit_cost)

    def completed(self, now, capability, stopping=False):
        """A local iteration of ``capability`` seconds ended at ``now``.

        Returns COMMIT when the due time is nearer to this boundary than to the
        next one (or the worker is stopping), REPORT when a met target's period
        is over, else CONTINUE.
        """
        self.k += 1
        if stopping:
            return Action.COMMIT
        if self.next_commit is None:
            return Action.REPORT if now >= self.next_report else Action.CONTINUE
        return Action.CONTINUE if now < self.next_commit - capability / 2 else Action.COMMIT

    def committed(self, seconds):
        """A commit took ``seconds``; returns the local iterations it carried."""
        self.cost.update(seconds)
        self.commits += 1
        done, self.k = self.k, 0
        return done

    @property
    def holds_local_work(self):
        """True while iterations since the last commit are not committed."""
        return self.k > 0
