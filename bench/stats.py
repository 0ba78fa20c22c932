"""Statistics over seeds: means with 95% Student-t intervals, speedups, runs that never reached the target.

Every headline cell of the bench is a few seeds (3 by default) of one variant,
so intervals use Student's t with n - 1 degrees of freedom (a normal interval
would be far too narrow at n = 3: t(0.975, 2) = 4.30, not 1.96).

**Times to target** are censored: a run that ended (at its budget) without a
confirmed crossing has a time to target *greater than* its training time. Such
a run is never dropped. :func:`time_to_target` reports how many of the seeds
reached the target; where some did not, their training time stands in for the
unknown time and the mean is marked ``lower_bound`` (the true mean can only be
larger), where none did it is ``none_reached`` with the longest training time
as the bound.

**Speedups** (``slow`` variant's time over ``fast``'s) are summarised on log
times: the speedup is the ratio of geometric means, ``exp(mean(log slow) -
mean(log fast))``, and its interval is Welch's t interval of that difference
of means, exponentiated. Logs because times are positive and right-skewed and a
ratio of times becomes a difference (symmetric: the speedup of A over B is
exactly 1 / that of B over A, intervals included); Welch (unpaired, unequal
variances) because the two variants' runs share a seed's data order and
initial model but nothing else, their spreads differ by orders of magnitude
(a 117x Sync against ESync), and their seed counts may differ. Censored runs
enter with their training time, and the speedup is then a bound: a
``lower_bound`` when only the slow variant has censored runs, an
``upper_bound`` when only the fast one has, ``unknown`` when both have.
"""
import math

CONFIDENCE = 0.95


def _t_quantile(df, confidence):
    from scipy import stats
    return float(stats.t.ppf(0.5 + confidence / 2.0, df))


def _check(values, what):
    values = [float(v) for v in values]
    if any(not math.isfinite(v) for v in values):
        raise ValueError("%s must be finite numbers, got %r" % (what, values))
    return values


def mean_interval(values, confidence=CONFIDENCE):
    """``{"n", "mean", "sd", "low", "high", "confidence"}`` of ``values``
    (one per seed): the mean and its Student-t interval. With one value the
    interval is absent (``low`` and ``high`` None); with none, everything is.

    Raises:
        ValueError: for a confidence outside (0, 1) or a value that is not finite.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must lie in (0, 1), got %r" % (confidence,))
    values = _check(values, "values")
    n = len(values)
    out = {"n": n, "mean": None, "sd": None, "low": None, "high": None, "confidence": confidence}
    if n == 0:
        return out
    mean = sum(values) / n
    out["mean"] = mean
    if n < 2:
        return out
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = _t_quantile(n - 1, confidence) * sd / math.sqrt(n)
    out.update(sd=sd, low=mean - half, high=mean + half)
    return out


def time_to_target(times, ends, confidence=CONFIDENCE):
    """Summary of one variant's times to target over seeds.

    Args:
        times: per seed, the confirmed time to target in seconds, or None
            where the run never reached it.
        ends: per seed, the run's training time in seconds (the bound of a
            censored run).

    Returns:
        :func:`mean_interval` of the times (a censored run counted at its
        training time) plus ``reached`` (seeds that reached the target),
        ``censored_at`` (training times of those that did not) and ``kind``:
        ``measured`` (every seed reached it), ``lower_bound`` (some did not:
        the mean is at least this), ``none_reached`` (``mean`` None; ``bound``
        the longest training time) or ``missing`` (no runs).

    Raises:
        ValueError: when ``times`` and ``ends`` differ in length, or a time is
            not positive.
    """
    times, ends = list(times), list(ends)
    if len(times) != len(ends):
        raise ValueError("one training time per run: %d times, %d ends" % (len(times), len(ends)))
    if any(t is not None and not t > 0 for t in times):
        raise ValueError("times to target must be > 0 seconds, got %r" % (times,))
    censored = [float(e) for t, e in zip(times, ends) if t is None]
    reached = len(times) - len(censored)
    if not times:
        return dict(mean_interval([], confidence), reached=0, censored_at=[], kind="missing", bound=None)
    if not reached:
        return dict(mean_interval([], confidence), n=len(times), reached=0, censored_at=censored,
                    kind="none_reached", bound=max(censored))
    filled = [float(t) if t is not None else float(e) for t, e in zip(times, ends)]
    return dict(mean_interval(filled, confidence), reached=reached, censored_at=censored,
                kind="measured" if not censored else "lower_bound", bound=None)


def speedup(slow_times, slow_ends, fast_times, fast_ends, confidence=CONFIDENCE):
    """The speedup of ``fast`` over ``slow`` (how many times less time ``fast``
    needs to the target) over seeds, as the module docstring explains.

    Arguments as :func:`time_to_target`'s, per variant.

    Returns:
        ``{"value", "low", "high", "kind", "n_slow", "n_fast", "confidence"}``;
        ``kind`` is ``measured``, ``lower_bound``, ``upper_bound``, ``unknown``
        (both variants have censored runs: no value) or ``missing`` (a
        variant has no runs). ``low``/``high`` are None with fewer than two
        runs of either variant.

    Raises:
        ValueError: as :func:`time_to_target`.
    """
    slow, fast = time_to_target(slow_times, slow_ends), time_to_target(fast_times, fast_ends)
    out = {"value": None, "low": None, "high": None, "n_slow": slow["n"], "n_fast": fast["n"],
           "confidence": confidence}
    if "missing" in (slow["kind"], fast["kind"]):
        return dict(out, kind="missing")
    slow_censored, fast_censored = bool(slow["censored_at"]), bool(fast["censored_at"])
    if slow_censored and fast_censored:
        return dict(out, kind="unknown")
    kind = "lower_bound" if slow_censored else "upper_bound" if fast_censored else "measured"
    a = [math.log(t if t is not None else e) for t, e in zip(slow_times, slow_ends)]
    b = [math.log(t if t is not None else e) for t, e in zip(fast_times, fast_ends)]
    diff = sum(a) / len(a) - sum(b) / len(b)
    out.update(value=math.exp(diff), kind=kind)
    low, high = welch_interval(a, b, confidence)
    if low is not None:
        out.update(low=math.exp(low), high=math.exp(high))
    return out


def welch_interval(a, b, confidence=CONFIDENCE):
    """Welch's t interval of ``mean(a) - mean(b)`` (unequal variances,
    Welch-Satterthwaite degrees of freedom); ``(None, None)`` with fewer than
    two values on either side. Two samples without any spread give a
    zero-width interval."""
    a, b = _check(a, "a"), _check(b, "b")
    if len(a) < 2 or len(b) < 2:
        return None, None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    if va + vb == 0.0:
        return ma - mb, ma - mb
    df = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0.0) + (vb ** 2 / (len(b) - 1) if vb else 0.0))
    half = _t_quantile(df, confidence) * math.sqrt(va + vb)
    return ma - mb - half, ma - mb + half


SAME_SNAPSHOT = " (all seeds at one snapshot of the grid)"
SAME_RATIO = " (each side's seeds at one snapshot of the grid)"
"""Said beside an interval of zero width: times to target are snapshot times, so seeds that cross between the same
two snapshots tie, and the interval says nothing about how close they are (the grid's step is about 10% of the time
so far)."""


def format_interval(summary, fmt="%.0f", unit=""):
    """``mean [low, high]unit`` of a :func:`mean_interval` (or :func:`time_to_target`) summary, as text;
    ``n/m reached`` and ``>`` where runs are censored; "not yet measured" without runs."""
    kind = summary.get("kind", "measured")
    if kind == "missing" or summary.get("n", 0) == 0:
        return "not yet measured"
    if kind == "none_reached":
        return "not reached (0/%d; > %s%s)" % (summary["n"], fmt % summary["bound"], unit)
    text = (fmt % summary["mean"]) + unit
    if summary.get("low") is not None:
        text += " [%s, %s]" % (fmt % summary["low"], fmt % summary["high"])
        if math.isclose(summary["low"], summary["high"], rel_tol=1e-9):
            text += SAME_SNAPSHOT if "reached" in summary else " (no spread over seeds)"
    else:
        text += " (n = 1, no interval)"
    if kind == "lower_bound":
        text = "> %s (%d/%d reached)" % (text, summary["reached"], summary["n"])
    return text


def format_speedup(result):
    """A :func:`speedup` as text: ``4.2× [3.1, 5.6]``, ``> 4.2× [...]``, ``< ...`` or a reason."""
    kind = result["kind"]
    if kind == "missing":
        return "not yet measured"
    if kind == "unknown":
        return "neither reached on every seed"
    text = "%.2f×" % result["value"]
    if result["low"] is not None:
        text += " [%.2f, %.2f]" % (result["low"], result["high"])
        if math.isclose(result["low"], result["high"], rel_tol=1e-9):
            text += SAME_RATIO
    return {"measured": "", "lower_bound": "> ", "upper_bound": "< "}[kind] + text
