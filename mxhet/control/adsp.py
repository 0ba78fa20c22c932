"""ADSP's scheduler (the ADSP paper, §4 and its Algorithm 1) as pure code.

Time is cut into check periods of ``period`` seconds on the scheduler's clock.
At each checkpoint the scheduler sets the target total number of commits
``C_target = max_i c_i + rate`` for the next checkpoint; worker i is asked for
``ΔC_target^i = C_target - c_i`` commits in the period, so every worker ends
the period with about the same number of commits whatever its speed.

The per-period commit ``rate`` is searched online, once per epoch
(DECIDECOMMITRATE): evaluate ``rate`` for a window, then ``rate + 1``; if the
second reward is higher, repeat from ``rate + 1``, else keep ``rate`` for the
rest of the epoch. Training never pauses for the search.

The reward of a window is the paper's (§4.2): the window's (time, loss)
samples are fitted with ``loss = 1 / (a1² t + a2) + a3`` (scipy's
``curve_fit``) and the reward is the speed of reaching one loss threshold ℓ,
``r = a1² / (1/(ℓ - a3) - a2) = 1 / t*(ℓ)``. ℓ is fixed for every
configuration one search compares: ``(1 - LEVEL_DROP)`` times the lowest loss
of the search's first window. t is measured from the start of the search for
every window, so the windows' t* are on one clock: a later window, which
starts lower on the same curve, gets the same reward as the earlier one, not
a higher or a lower one. (The previous rule -- the time to drop 5% below each
window's own start -- gave the later, flatter part of one curve a lower
reward and ended the climb early.) The reward is 0 when the fit never reaches
ℓ; a window with too few samples or a failed fit has no reward, which ends
the climb.

The loss is what the workers report with their commits: the smoothed
training loss of their replicas. The paper's figures plot the global model's
loss, but its reward section only asks for "(time t, loss ℓ) pairs when the
system is running"; evaluating the global model would need a forward pass
that PS-LITE's servers cannot run (they hold arrays, not the network) and a
worker would have to stop training for, against ADSP's no-waiting premise.
Replicas are at most one commit (Γ/ΔC seconds) away from the global model.
"""
import dataclasses
import math
import warnings

from . import wire as w

DEFAULT_PERIOD = 2.0
"""Check period Γ in seconds (the paper uses 60 s for hour-long runs; short runs need short periods)."""
DEFAULT_EPOCH = 60.0
"""Seconds between two commit-rate searches (the paper uses 20 minutes)."""
DEFAULT_WINDOW_PERIODS = 2
"""Check periods each evaluated rate runs for (the paper: about a minute)."""
MIN_SAMPLES = 4


def loss_curve(t, a1, a2, a3):
    return 1.0 / (a1 * a1 * t + a2) + a3


LEVEL_DROP = 0.1
MIN_GAIN = 1e-6
"""rate + 1 wins when its reward is higher by more than this share: equal
curves fitted in two windows differ by rounding, and a tie keeps the rate."""
"""ℓ = (1 - LEVEL_DROP) x the lowest loss of a search's first window."""
_INSTANT = 1e9
"""Reward of a fit that is below ℓ already at the search start (finite: it travels as JSON)."""


def fit_curve(samples):
    """Fit ``loss = 1 / (a1² t + a2) + a3`` to ``(t, loss)`` samples, t in seconds.

    Returns:
        ``(a1, a2, a3)`` with t measured from the first sample's origin (the
        samples' own zero), or None for too few samples or a failed fit.
    """
    points = [(float(t), float(l)) for t, l in samples if math.isfinite(t) and math.isfinite(l)]
    if len(points) < MIN_SAMPLES or len({t for t, _ in points}) < 3:
        return None
    import numpy as np
    from scipy.optimize import OptimizeWarning, curve_fit

    t = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    start = max(float(y[0]), 1e-6)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", OptimizeWarning)
            (a1, a2, a3), _ = curve_fit(loss_curve, t, y, p0=(1.0, 1.0 / start, 0.0),
                                        bounds=([-np.inf, 1e-9, -np.inf], [np.inf, np.inf, np.inf]),
                                        maxfev=5000)
    except (RuntimeError, ValueError, OptimizeWarning):
        return None
    if not all(math.isfinite(v) for v in (a1, a2, a3)):
        return None
    return float(a1), float(a2), float(a3)


def reward_at(params, level, offset=0.0):
    """The paper's reward ``r = a1² / (1/(ℓ - a3) - a2)`` of a fitted curve.

    Args:
        params: ``(a1, a2, a3)`` of :func:`fit_curve`, fitted with t from the
            window's start.
        level: the loss threshold ℓ.
        offset: seconds from the search's start to the window's start: the
            reward is ``1 / t*`` with t* on the search's clock, so windows
            that start at different times are compared on one clock.

    Returns:
        ``1 / t*`` in 1/s; 0.0 if the curve never reaches ``level``.
    """
    a1, a2, a3 = params
    if level <= a3 or a1 == 0:
        return 0.0
    t_star = offset + (1.0 / (level - a3) - a2) / (a1 * a1)
    return 1.0 / t_star if t_star > 1.0 / _INSTANT else _INSTANT


def fit_reward(samples, level, offset=0.0):
    """Reward of a window from its ``(seconds since window start, loss)`` samples,
    for the threshold ``level`` (see :func:`reward_at`); None when the fit fails."""
    params = fit_curve(samples)
    return None if params is None else reward_at(params, level, offset)


def search_level(samples, drop=LEVEL_DROP):
    """ℓ for a search, from its first window's samples: ``(1 - drop)`` x their lowest loss (None if none)."""
    losses = [float(l) for _, l in samples if math.isfinite(l)]
    return (1.0 - drop) * min(losses) if losses else None


class CommitRateSearch:
    """DECIDECOMMITRATE as a state machine over evaluation windows.

    :attr:`rate` is the per-period commit rate to use now. Call
    :meth:`window_done` with the reward of each finished window.
    """

    def __init__(self, start=1, min_gain=MIN_GAIN):
        if not isinstance(start, int) or start < 1:
            raise ValueError("the start rate must be a positive integer, got %r" % (start,))
        if not min_gain >= 0:
            raise ValueError("min_gain must be >= 0, got %r" % (min_gain,))
        self.min_gain = float(min_gain)
        self.restart(start)

    def restart(self, start=1):
        self.base = start
        self.phase = "base"      # evaluating base, then "next" (base + 1), then "fixed"
        self.base_reward = None
        self.history = []        # (rate, reward)

    @property
    def rate(self):
        return self.base + 1 if self.phase == "next" else self.base

    @property
    def searching(self):
        return self.phase != "fixed"

    def window_done(self, reward):
        self.history.append((self.rate, reward))
        if self.phase == "base":
            self.base_reward = reward
            self.phase = "next"
        elif self.phase == "next":
            if (reward is not None and self.base_reward is not None
                    and reward > self.base_reward * (1.0 + self.min_gain)):
                self.base += 1           # DECIDECOMMITRATE(C_target + 1): evaluate it again against +2
                self.phase = "base"
            else:
                self.phase = "fixed"


@dataclasses.dataclass
class _Worker:
    commits: int = 0
    loss: float = -1.0
    commit_cost: float = 0.0


class ADSPScheduler:
    """Commit targets for every worker at every checkpoint, and the rate search.

    Args:
        ranks: the workers' ranks.
        period: check period Γ, seconds.
        epoch: seconds between searches.
        window_periods: check periods per evaluated rate.
        now: the scheduler clock at creation (seconds); the first period starts here.
    """

    def __init__(self, ranks, period=DEFAULT_PERIOD, epoch=DEFAULT_EPOCH,
                 window_periods=DEFAULT_WINDOW_PERIODS, now=0.0):
        ranks = list(ranks)
        if not ranks:
            raise ValueError("ADSP needs at least one worker")
        for name, value in (("period", period), ("epoch", epoch)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError("%s must be a positive number of seconds, got %r" % (name, value))
        if not isinstance(window_periods, int) or window_periods < 1:
            raise ValueError("window_periods must be a positive integer, got %r" % (window_periods,))
        self.period, self.epoch, self.window_periods = float(period), float(epoch), window_periods
        self.workers = {r: _Worker() for r in ranks}
        self.search = CommitRateSearch()
        self.start = float(now)
        self.checkpoint = 0            # index of the last checkpoint passed
        self.epoch_start = 0           # checkpoint index where the current epoch began
        self.window_start = 0          # checkpoint index where the current evaluation window began
        self.samples = []              # (seconds since window start, loss) of the current window
        self.level = None              # the search's loss threshold ℓ, fixed after its first window
        self.levels = []               # ℓ of every search so far
        self.c_target = self.search.rate
        self.log = []                  # one record per checkpoint
        self.searches = 0              # search epochs begun (the first at the start)
        self.windows = []              # one record per evaluated window (see search_record)
        self.comparisons = []          # one record per comparison of two rates (see search_record)

    def next_checkpoint_time(self):
        return self.start + (self.checkpoint + 1) * self.period

    def advance(self, now):
        """Pass every checkpoint up to ``now``."""
        while now >= self.next_checkpoint_time():
            self.checkpoint += 1
            self._on_checkpoint()

    def _on_checkpoint(self):
        commits = {r: w.commits for r, w in self.workers.items()}
        if self.search.searching and self.checkpoint - self.window_start >= self.window_periods:
            if self.level is None:
                self.level = search_level(self.samples)
                if self.level is not None:
                    self.levels.append(self.level)
            offset = (self.window_start - self.epoch_start) * self.period
            reward = None if self.level is None else fit_reward(self.samples, self.level, offset)
            self._record_window(reward)
            self.window_start = self.checkpoint
            self.samples = []
        if (self.checkpoint - self.epoch_start) * self.period >= self.epoch:
            self.search.restart()
            self.searches += 1
            self.epoch_start = self.window_start = self.checkpoint
            self.samples = []
            self.level = None
        self.c_target = max(commits.values()) + self.search.rate
        self.log.append({"checkpoint": self.checkpoint, "time": self.checkpoint * self.period,
                         "commits": {str(r): c for r, c in sorted(commits.items())},
                         "rate": self.search.rate, "c_target": self.c_target,
                         "phase": self.search.phase, "search": self.searches})

    def _record_window(self, reward):
        """Feed a finished window's reward to the search and record it (and the comparison it closes)."""
        losses = [l for _, l in self.samples]
        phase, rate, base_reward = self.search.phase, self.search.rate, self.search.base_reward
        window = {"search": self.searches, "rate": rate,
                  "start": self.window_start * self.period, "end": self.checkpoint * self.period,
                  "samples": len(losses), "first_loss": losses[0] if losses else None,
                  "last_loss": losses[-1] if losses else None, "min_loss": min(losses) if losses else None,
                  "level": self.level, "reward": reward}
        self.windows.append(window)
        self.search.window_done(reward)
        if phase == "next":
            first = self.windows[-2]
            climbed = self.search.phase == "base"
            self.comparisons.append({
                "search": self.searches, "checkpoint": self.checkpoint, "time": self.checkpoint * self.period,
                "rates": [rate - 1, rate], "rewards": [base_reward, reward],
                "losses": [[first["first_loss"], first["last_loss"]], [window["first_loss"], window["last_loss"]]],
                "samples": [first["samples"], window["samples"]], "level": self.level,
                "decision": ("climb" if climbed else "keep" if reward is not None and base_reward is not None
                             else "keep (no reward)"),
                "rate_after": self.search.rate})

    def report(self, rank, commits, loss, commit_cost, now):
        """A worker's commit report at scheduler time ``now``.

        Returns:
            ``(c_target, period_left)``: the total commits the worker should
            have made by the next checkpoint, and the seconds until it.

        Raises:
            KeyError: for an unknown rank.
            ValueError: for a negative commit count or cost.
        """
        if rank not in self.workers:
            raise KeyError("rank %r is not part of this job" % (rank,))
        if commits < 0 or commit_cost < 0:
            raise ValueError("commits and commit_cost must be >= 0")
        self.advance(now)
        worker = self.workers[rank]
        worker.commits = max(worker.commits, int(commits))
        worker.commit_cost = float(commit_cost)
        if loss >= 0:
            worker.loss = float(loss)
            window_t0 = self.start + self.window_start * self.period
            self.samples.append((now - window_t0, float(loss)))
        return self.c_target, self.next_checkpoint_time() - now

    def search_record(self, origin=0.0):
        """The commit-rate search as it ran, for a run's summary (``adsp_search``, docs/metrics.md).

        Times are seconds on the scheduler's clock from its start (the first
        commit report) plus ``origin`` (the simulator passes the virtual time of
        that report, so times are on the run's clock; the cluster passes 0).

        Returns:
            a dict: ``period``, ``epoch``, ``window_periods``, ``origin``;
            ``comparisons`` (each: ``time``, ``checkpoint``, ``search``, the
            ``rates`` compared, their ``rewards`` (1/s; null: no fit), each
            window's first and last reported ``losses`` and ``samples``, the
            ``level`` ℓ, the ``decision`` -- ``climb`` (rate + 1 won: it is
            compared with rate + 2 next), ``keep`` or ``keep (no reward)`` --
            and ``rate_after``); ``windows`` (every evaluated window);
            ``periods`` (every checkpoint: ``time``, ``rate``, ``c_target``,
            ``phase`` of the search, ``commits``); ``counts``.
        """
        def shifted(record, keys=("time",)):
            return dict(record, **{k: origin + record[k] for k in keys})
        comparisons = [shifted(c) for c in self.comparisons]
        return {"period": self.period, "epoch": self.epoch, "window_periods": self.window_periods,
                "origin": origin, "comparisons": comparisons,
                "windows": [shifted(w, ("start", "end")) for w in self.windows],
                "periods": [shifted(p) for p in self.log],
                "counts": {"searches": self.searches + 1, "comparisons": len(comparisons),
                           "climbs": sum(c["decision"] == "climb" for c in comparisons),
                           "windows": len(self.windows), "periods": len(self.log),
                           "final_rate": self.search.rate}}

    def stats(self):
        return {"period": self.period, "epoch": self.epoch, "window_periods": self.window_periods,
                "search": [{"rate": r, "reward": w} for r, w in self.search.history],
                "loss_thresholds": list(self.levels),
                "checkpoints": self.log, "comparisons": self.comparisons}


# -- ADSP's wire records (the plugin: mxhet.control.rules.ADSPRule) ---------------------------

@w.reply_record
class CommitReply(w.Reply):
    """The answer to :class:`Commit`: ``target`` total commits due by the next
    checkpoint, ``period_left`` seconds until it."""
    TYPE = "commit_reply"
    target: int = 0
    period_left: float = 0.0
    CHECKS = {"target": w.integer(), "period_left": w.check_seconds}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Commit(w.Request):
    """ADSP: the worker has made ``commits`` commits; ``loss`` is its recent
    training loss (-1 when it has none yet), ``commit_cost`` the seconds one
    commit takes it. The answer carries its commit target."""
    TYPE = "commit"
    REPLY = CommitReply
    commits: int
    loss: float
    commit_cost: float
    CHECKS = {"commits": w.integer(), "loss": w.check_finite, "commit_cost": w.check_seconds}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdspRecord(w.RecordRequest):
    """ADSP: rank 0 asks for the record of the commit-rate search (for its run's
    summary) after the last commit, in pages (:class:`~.wire.RecordPage`)."""
    TYPE = "adsp_record"
