"""The live feed of a running job, and the dashboard's state built from it.

Each worker of ``python -m mxhet.train`` run with ``MXHET_LIVE_DIR`` set (the
launcher sets it with ``--dashboard``) rewrites ``<dir>/worker-<slot>.json``
about once a second (:class:`LiveWriter`, temp file + rename, so a reader
never sees half a file). :func:`build_state` merges these files with the
launcher's plan into the state that ``/api/state`` serves; it is a pure
function of plain data, so it is unit-tested without a job.

Why files: a worker already counts everything the page shows (its
``WorkerStats``: rounds, n_i per round, compute and wait time, RTT, the rank
the State Server named the slowest, bytes); writing a few hundred bytes a
second costs it nothing measurable, and neither the State Server's hot loop
nor the control-plane protocol changes, and no new port is opened on a worker.
The limit: the launcher must see the workers' files (one host, or a shared
directory); otherwise the page shows the launcher's own view of each device.
"""
import json
import logging
import math
import os
import time

LOG = logging.getLogger("mxhet.observe")
FEED_FORMAT = "mxhet-live/1"
STATE_FORMAT = "mxhet-dashboard/1"
DEFAULT_INTERVAL_S = 1.0
"""Seconds between two rewrites of a worker's feed file."""
KEEP_ROUNDS = 50
"""Rounds of n_i (and of the State Server's slowest rank) kept in the feed."""
KEEP_POINTS = 200
"""Loss and accuracy points kept in the feed."""


def feed_path(directory, slot):
    return os.path.join(directory, "worker-%d.json" % slot)


def _finite(value):
    """``value`` as a float, or None when it is missing or not finite (JSON has no NaN)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class LiveWriter:
    """Rewrites one worker's feed file, at most every ``interval`` seconds.

    Args:
        directory: the job's live directory (created if missing).
        slot: the worker's slot.
        interval: seconds between rewrites (> 0); :meth:`write` with
            ``force=True`` writes at once.
        clock: monotonic clock in seconds.

    Raises:
        ValueError: for an empty directory or an interval <= 0.
    """

    def __init__(self, directory, slot, interval=DEFAULT_INTERVAL_S, clock=time.monotonic):
        if not directory:
            raise ValueError("the live directory must be a path, got %r" % (directory,))
        if not interval > 0:
            raise ValueError("the live feed interval must be > 0 seconds, got %r" % (interval,))
        os.makedirs(directory, exist_ok=True)
        self.path = feed_path(directory, slot)
        self.interval = interval
        self.clock = clock
        self._last = None
        self._warned = False

    def due(self):
        """True when the next :meth:`write` would write."""
        return self._last is None or self.clock() - self._last >= self.interval

    def write(self, record, force=False):
        """Write ``record`` (a JSON-able dict) when due or forced; returns True if written."""
        if not force and not self.due():
            return False
        self._last = self.clock()
        body = dict(record, format=FEED_FORMAT, written_unix=time.time())
        tmp = "%s.tmp.%d" % (self.path, os.getpid())
        try:
            with open(tmp, "w") as f:
                json.dump(body, f, allow_nan=False, default=_finite)
            os.replace(tmp, self.path)
        except OSError as exc:  # the feed must never stop training (e.g. its directory is gone at the end)
            if not self._warned:
                LOG.warning("live feed %s not written: %s", self.path, exc)
                self._warned = True
            return False
        return True


def read_feed(directory, slot):
    """The worker's latest feed record, or None (no file yet, or not a feed)."""
    if not directory:
        return None
    try:
        with open(feed_path(directory, slot)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FEED_FORMAT else None


def worker_record(stats, *, mode, phase, elapsed_s, samples_per_s=None, loss=None, losses=(), accuracy=(),
                  keep_rounds=KEEP_ROUNDS):
    """One feed record from a worker's ``WorkerStats`` (read, never copied whole).

    ``local_iters`` and ``slowest`` are ``[[round, value], ...]`` of the last
    ``keep_rounds`` rounds (1-based rounds); ``slowest`` is the PS-LITE rank
    the State Server took for the slowest device in that round (ESync only;
    -1 for a round the device closed at its ``max_local_steps`` cap).
    """
    rounds = stats.rounds
    n = stats.local_iters[-keep_rounds:]
    first = len(stats.local_iters) - len(n) + 1
    slow = stats.round_slowest[-keep_rounds:]
    first_slow = len(stats.round_slowest) - len(slow) + 1
    total = stats.compute_s + stats.wait_s
    return {
        "slot": stats.slot,
        "rank": stats.rank,
        "context": stats.context,
        "slowdown": stats.slowdown,
        "mode": mode,
        "phase": phase,
        "elapsed_s": round(elapsed_s, 3),
        "rounds": rounds,
        "iterations": stats.iterations,
        "samples": stats.samples,
        "samples_per_s": _finite(samples_per_s),
        "compute_ratio": stats.compute_s / total if total > 0 else None,
        "rtt_s": _finite(stats.rtt_s),
        "bytes_pushed": stats.bytes_pushed,
        "bytes_pulled": stats.bytes_pulled,
        "local_iters": [[first + i, k] for i, k in enumerate(n)],
        "slowest": [[first_slow + i, r] for i, r in enumerate(slow)],
        "loss": _finite(loss),
        "losses": [[_finite(t), _finite(v)] for t, v in list(losses)[-KEEP_POINTS:]],
        "accuracy": [[_finite(t), _finite(v)] for t, v in list(accuracy)[-KEEP_POINTS:]],
        "rejoined_at_round": getattr(stats, "rejoined_at_round", None),
    }


EVENTS_FILE = "launcher-events.json"
"""The launcher's record of the workers that left (their process ended, ``--elastic``) and were started
again (``--max-restarts``), in the live directory: ``{"events": [{t_s, event, slot, cause, round}, ...]}``
(``round``: for a leave, the rounds the worker's last live report counted -- the first round it no longer
took part in, as of that report --, None when it never reported)."""


def write_events(directory, events):
    """Rewrite the launcher's leave / join record in ``directory`` (temp file + rename); False on an OSError."""
    path = os.path.join(directory, EVENTS_FILE)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            json.dump({"events": list(events)}, f)
        os.replace(tmp, path)
    except OSError as exc:
        LOG.warning("live events %s not written: %s", path, exc)
        return False
    return True


def read_events(directory):
    """The launcher's leave / join events (a list, oldest first; empty when none were written)."""
    if not directory:
        return []
    try:
        with open(os.path.join(directory, EVENTS_FILE)) as f:
            events = json.load(f).get("events", [])
    except (OSError, ValueError, AttributeError):
        return []
    return events if isinstance(events, list) else []


def build_state(devices, live_dir, *, mode="", elapsed_s=0.0, status="running", now_unix=None):
    """The dashboard's state: the launcher's plan merged with the live feed.

    Args:
        devices: the launcher's workers, dicts with ``slot``, ``host``,
            ``context`` and ``slowdown`` (every device is listed, fed or not).
        live_dir: the job's live directory ("" = none).
        mode: the job's sync mode.
        elapsed_s: seconds since the launcher started the job.
        status: the launcher's view of the job (``running``, ``finished``, ``failed``).
        now_unix: wall-clock time, to tell how old each feed record is
            (the launcher and the workers read the same clock on one host).

    Returns:
        A JSON-able dict: ``job`` (mode, status, elapsed time, rounds, the
        latest evaluated accuracy, loss and accuracy curves, the slowest slot,
        ``present``: devices not away, ``events``: the launcher's leaves and joins)
        and ``devices`` (one entry per slot, in slot order; ``present``, and how
        often it ``left`` and ``joined``).
    """
    now_unix = time.time() if now_unix is None else now_unix
    out, feeds = [], {}
    for dev in sorted(devices, key=lambda d: d["slot"]):
        feed = read_feed(live_dir, dev["slot"])
        feeds[dev["slot"]] = feed
        entry = {
            "slot": dev["slot"],
            "host": dev.get("host"),
            "context": dev.get("context"),
            "slowdown": dev.get("slowdown"),
            "fed": feed is not None,
            "phase": "starting",
            "rank": None, "round": 0, "iterations": 0, "samples": 0, "samples_per_s": None,
            "compute_ratio": None, "rtt_s": None, "bytes_pushed": 0, "bytes_pulled": 0,
            "local_iters": [], "age_s": None, "slowest": False,
        }
        if feed is not None:
            entry.update(
                rank=feed.get("rank"), phase=feed.get("phase", "training"), round=feed.get("rounds", 0),
                iterations=feed.get("iterations", 0), samples=feed.get("samples", 0),
                samples_per_s=feed.get("samples_per_s"), compute_ratio=feed.get("compute_ratio"),
                rtt_s=feed.get("rtt_s"), bytes_pushed=feed.get("bytes_pushed", 0),
                bytes_pulled=feed.get("bytes_pulled", 0), local_iters=feed.get("local_iters", []),
                age_s=round(max(0.0, now_unix - feed.get("written_unix", now_unix)), 3))
            entry["context"] = feed.get("context", entry["context"])
            entry["slowdown"] = feed.get("slowdown", entry["slowdown"])
        out.append(entry)

    # Leaves and joins as the launcher saw them: a device whose latest event is a leave is away. A join's
    # round is the first round the restarted worker takes part in, once its feed says it.
    events = [dict(e) for e in read_events(live_dir) if isinstance(e, dict)]
    for e in events:
        e.setdefault("round", None)
        feed = feeds.get(e.get("slot"))
        if e.get("event") == "join" and e["round"] is None and feed:
            e["round"] = feed.get("rejoined_at_round")
    for entry in out:
        mine = [e for e in events if e.get("slot") == entry["slot"]]
        entry["present"] = not mine or mine[-1].get("event") != "leave"
        entry["left"] = sum(e.get("event") == "leave" for e in mine)
        entry["joined"] = sum(e.get("event") == "join" for e in mine)
        if not entry["present"]:
            entry["phase"] = "left (%s)" % mine[-1].get("cause", "")

    # The State Server's slowest device: from the device that saw the latest round. A round a device
    # closed at its --max-local-steps cap names none (-1); the slowest device's own feed names it.
    slowest_rank, slowest_round = None, 0
    for slot in sorted(feeds):
        feed = feeds[slot]
        named = [(rnd, rank) for rnd, rank in (feed or {}).get("slowest", []) if rank >= 0]
        if named:
            rnd, rank = named[-1]
            if rnd > slowest_round:
                slowest_round, slowest_rank = rnd, rank
    slowest_slot = None
    for entry in out:
        if slowest_rank is not None and entry["rank"] == slowest_rank:
            entry["slowest"] = True
            slowest_slot = entry["slot"]

    # The chief's feed: rank 0's; once its device left, the lowest rank present, which takes over its
    # end-of-job duties (mxhet.control.membership.summary_rank) and feeds the evaluated accuracy.
    first = next((e for e in out if e["rank"] == 0 and feeds[e["slot"]]), None)
    if first is not None and not first["present"]:
        ranked = sorted((e for e in out if e["rank"] is not None and e["present"] and feeds[e["slot"]]),
                        key=lambda e: e["rank"])
        first = ranked[0] if ranked else None
    chief = feeds[first["slot"]] if first is not None else None
    accuracy = chief.get("accuracy", []) if chief else []
    fed = [e for e in out if e["fed"]]
    job = {
        "mode": mode or (chief or {}).get("mode", ""),
        "status": status,
        "elapsed_s": round(elapsed_s, 3),
        "training_s": chief.get("elapsed_s") if chief else None,
        "phase": chief.get("phase") if chief else "starting",
        "rounds": max((e["round"] for e in fed), default=0),
        "num_workers": len(out),
        "reporting": len(fed),
        # a device that left reports no more: its last rate is not the job's
        "samples_per_s": round(sum(e["samples_per_s"] or 0.0 for e in fed if e["present"]), 3) if fed else None,
        "accuracy": accuracy[-1][1] if accuracy else None,
        "accuracy_at_s": accuracy[-1][0] if accuracy else None,
        "accuracy_curve": accuracy,
        "loss_curve": chief.get("losses", []) if chief else [],
        "slowest_slot": slowest_slot,
        "slowest_round": slowest_round or None,
        "present": sum(e["present"] for e in out),
        "events": events,
    }
    return {"format": STATE_FORMAT, "job": job, "devices": out}
