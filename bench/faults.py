"""``mxhet-bench faults``: what a fault costs, on the cluster and in the simulator.

Three scenarios on one heterogeneous profile (default: ResNet-18 on the ``cpu``
profile, 2 devices at slowdown 10 and 2 at 1), each run to a common budget:

* ``none``: no fault (a plain job, no ``--elastic``: what a user runs);
* ``restart``: one device dies at ``--kill-at`` of the budget (SIGKILL of its
  worker process) and is started again at ``--restart-at``
  (``mxhet-launch --elastic --max-restarts 1 --restart-delay``); in the
  simulator ``--events SLOT:leave@T,SLOT:join@T``;
* ``classic``: the classic recovery. The whole job dies at ``--kill-at`` (every
  process SIGKILLed at once) and is launched again with ``--resume`` from its
  newest checkpoint (``--checkpoint-dir``, every ``--checkpoint-every``
  rounds). Its time to target counts the lost time: the rounds since that
  checkpoint, computed again, and the relaunch. The simulator models it
  exactly instead of killing anything: a resumed run continues bit-identically
  (:mod:`mxhet.sim.checkpoint`), so the classic run is the fault-free one whose
  models after the checkpoint arrive ``lost = (kill - checkpoint) + restart
  cost`` later, run to ``budget - lost`` (see :func:`sim_classic_curve`); the
  restart cost is the cluster's measured relaunch in the same bench, or
  ``--restart-cost``.

Times to target are confirmed on all 10,000 test images (:mod:`bench.confirm`);
with several seeds each figure is a mean with its 95% interval
(:mod:`bench.stats`). Results: ``OUT/faults.json`` (with provenance and the
machine's load before and after), ``OUT/faults.md``, ``OUT/faults.png``.
"""
import json
import math
import os
import shutil
import signal
import sys
import time

from tqdm import tqdm

from mxhet.errors import ConfigError

from . import confirm, profiles, stats
from .experiment import RESUME, comma_list, failures_block, load_finished, run_dir
from .provenance import provenance
from .runner import JobFailed, JobSpec, machine_info, run_with_bar

SCENARIOS = ("none", "restart", "classic")
ENGINES = ("cluster", "sim")   # in this order: the simulator's restart cost is the cluster's measured one
VICTIMS = ("fast", "slow")
ELASTIC_BENCH_MODES = ("esync", "localsgd", "async")
DEFAULT_RESTART_COST_S = 30.0
"""The simulator's restart cost of the classic recovery when no cluster relaunch was measured (s)."""
FAULT_FILE = "fault.json"
"""What the bench did to a run (kill and training-start times), in the run's directory."""


def add_parser(sub):
    p = sub.add_parser("faults", help="time to target and final accuracy with no fault, with one device killed "
                                      "and restarted, and with the whole job killed and resumed from its "
                                      "checkpoint; cluster and simulator")
    p.add_argument("--engines", default="cluster,sim", help="cluster, sim or both (default %(default)s)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="none, restart, classic (default %(default)s)")
    p.add_argument("--mode", default="esync", help="an elastic mode: %s (default %%(default)s)"
                   % ", ".join(ELASTIC_BENCH_MODES))
    p.add_argument("--victim", default="fast", choices=VICTIMS,
                   help="restart: kill a fast device (the one whose loss costs most throughput) or a slow one "
                        "(default %(default)s); never slot 0, the chief")
    p.add_argument("--kill-at", type=float, default=0.3, help="share of the budget at which the fault strikes "
                                                              "(default %(default)s)")
    p.add_argument("--restart-at", type=float, default=0.6,
                   help="restart: share of the budget at which the device is back (default %(default)s)")
    p.add_argument("--checkpoint-every", type=int, default=10,
                   help="classic: rounds between checkpoints (default %(default)s)")
    p.add_argument("--restart-cost", type=float, default=None, metavar="SECONDS",
                   help="classic, simulator: seconds a relaunch costs (default: the cluster's measured relaunch "
                        "in this bench, else %g)" % DEFAULT_RESTART_COST_S)
    p.add_argument("--profile", default="cpu", help="a built-in profile or a JSON file (default %(default)s)")
    p.add_argument("--model", default="resnet18_v1")
    p.add_argument("--input-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--base-iter", type=float, default=0.115,
                   help="seconds of a slowdown-1 iteration, both engines (default: ResNet-18's calibration, "
                        "bench/presets.py)")
    p.add_argument("--budget", type=float, default=100.0, help="training seconds per run (default %(default)s)")
    p.add_argument("--eval-interval", type=float, default=5.0, help="seconds between snapshots (default %(default)s)")
    p.add_argument("--eval-samples", type=int, default=1000, help="test images per curve point (default %(default)s)")
    p.add_argument("--target-accuracy", type=float, default=0.8)
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="simulator runs at once (default %(default)s)")
    p.add_argument("--resume", default="off", choices=RESUME,
                   help="on: reuse finished runs; only: rebuild the report from them (default %(default)s)")
    p.add_argument("--out", default="runs/faults", help="output directory (default %(default)s)")
    return p


def fault_times(budget, kill_at, restart_at):
    """``{"kill_s", "restart_s", "restart_delay_s"}``: seconds of training at which the fault strikes and the
    device is back, and the launcher's ``--restart-delay`` between them.

    Raises:
        ConfigError: unless ``budget > 0`` and ``0 < kill_at < restart_at < 1``.
    """
    if not (budget > 0 and math.isfinite(budget)):
        raise ConfigError("--budget must be a finite number of seconds > 0, got %r" % (budget,))
    if not 0 < kill_at < restart_at < 1:
        raise ConfigError("need 0 < --kill-at < --restart-at < 1, got %r and %r" % (kill_at, restart_at))
    kill, back = kill_at * budget, restart_at * budget
    return {"kill_s": kill, "restart_s": back, "restart_delay_s": back - kill}


def victim_slot(slowdowns, victim):
    """The slot the ``restart`` scenario kills: the last device of the fastest (``fast``) or slowest (``slow``)
    class, never slot 0 (PS-LITE rank 0, the chief, which writes the summary).

    Raises:
        ConfigError: when no other slot is of that class.
    """
    if victim not in VICTIMS:
        raise ConfigError("victim must be one of %s, got %r" % (", ".join(VICTIMS), victim))
    factor = min(slowdowns) if victim == "fast" else max(slowdowns)
    slots = [i for i, f in enumerate(slowdowns) if f == factor and i != 0]
    if not slots:
        raise ConfigError("no %s device besides slot 0 (the chief) in slowdowns %s" % (victim, list(slowdowns)))
    return slots[-1]


def checkpoint_time(kill_s, round_s, every):
    """Seconds of the newest checkpoint at or before ``kill_s`` when one is saved every ``every`` rounds of
    ``round_s`` seconds (0 when none was saved yet: the job starts again from its start).

    Raises:
        ConfigError: for a round time or period that is not positive.
    """
    if not (round_s > 0 and every >= 1):
        raise ConfigError("need a round time > 0 and --checkpoint-every >= 1, got %r and %r" % (round_s, every))
    period = every * round_s
    return math.floor(kill_s / period + 1e-9) * period


def sim_classic_curve(curve, kill_s, checkpoint_s, lost_s):
    """The classic recovery's curve from a fault-free run's ``curve`` ``[[t, acc], ...]``: the points up to the
    kill, then the points after the checkpoint again, ``lost_s`` later (they are computed again after the
    relaunch). Returns ``(points, sources)``: the curve and, per point, the index of the ``curve`` point (and
    snapshot) it shows."""
    points, sources = [], []
    for i, (t, acc) in enumerate(curve):
        if t <= kill_s:
            points.append([t, acc])
            sources.append(i)
    for i, (t, acc) in enumerate(curve):
        if t > checkpoint_s:
            points.append([round(t + lost_s, 3), acc])
            sources.append(i)
    return points, sources


def cluster_classic_curve(before, resumed, resumed_at_s):
    """The classic recovery's curve on the cluster: the killed launch's points ``before`` (scored from its
    snapshots), then the resumed launch's ``resumed``, its seconds counted from ``resumed_at_s`` (the kill
    plus the relaunch, seconds of the first launch's training)."""
    return ([list(p) for p in before]
            + [[round(resumed_at_s + t, 3), acc] for t, acc in resumed])


def first_crossing(curve, target):
    """Seconds of the first curve point at or above ``target`` (None if none)."""
    return next((t for t, acc in curve if acc >= target), None)


class FaultHook:
    """Launcher hook: notes when training starts (the chief's first snapshot) and, ``kill_s`` seconds later,
    SIGKILLs the worker in ``slot`` (its process) or, ``slot`` None, every process of the job at once (each
    child's process group)."""

    def __init__(self, snapshot_path, kill_s, slot=None, clock=time.time):
        self.snapshot_path, self.kill_s, self.slot, self.clock = snapshot_path, kill_s, slot, clock
        self.launched_unix = self.train_start_unix = self.kill_unix = None
        self.killed = []

    def started(self, _plan, _supervisor):
        self.launched_unix = self.clock()

    def polled(self, supervisor):
        now = self.clock()
        if self.train_start_unix is None:
            if os.path.exists(self.snapshot_path):
                self.train_start_unix = now
            return
        if self.kill_unix is not None or self.kill_s is None or now - self.train_start_unix < self.kill_s:
            return
        self.kill_unix = now
        for child in supervisor.children:
            if self.slot is None:
                self._kill(os.killpg, child)
            elif child.spec.role == "worker" and child.spec.slot == self.slot:
                self._kill(os.kill, child)

    def _kill(self, kill, child):
        try:
            kill(child.pid, signal.SIGKILL)
            self.killed.append({"name": child.spec.name, "pid": child.pid})
        except ProcessLookupError:
            pass

    def record(self):
        start = self.train_start_unix
        return {"launched_unix": self.launched_unix, "train_start_unix": start, "kill_unix": self.kill_unix,
                "startup_s": start - self.launched_unix if start and self.launched_unix else None,
                "kill_s": self.kill_unix - start if self.kill_unix and start else None, "killed": self.killed}


def _seeds(text):
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise ConfigError("--seeds must be comma-separated integers, got %r" % text) from None
    if not seeds:
        raise ConfigError("--seeds: none given")
    return seeds


def check(args):
    """The bench's settings, checked: ``(engines, scenarios, seeds, profile, times, victim)``.

    Raises:
        ConfigError: naming the bad value.
    """
    engines = comma_list(args.engines, "engines", ENGINES)
    engines = [e for e in ENGINES if e in engines]
    scenarios = comma_list(args.scenarios, "scenarios", SCENARIOS)
    if args.mode not in ELASTIC_BENCH_MODES:
        raise ConfigError("--mode must be an elastic mode (%s), got %r" % (", ".join(ELASTIC_BENCH_MODES), args.mode))
    if "classic" in scenarios and args.mode == "async":
        raise ConfigError("--scenarios classic: async cannot be checkpointed (its workers run rounds of their own)")
    if args.jobs < 1 or args.checkpoint_every < 1 or args.eval_samples < 1 or not args.eval_interval > 0:
        raise ConfigError("--jobs, --checkpoint-every and --eval-samples must be >= 1, --eval-interval > 0")
    if args.restart_cost is not None and not (args.restart_cost >= 0 and math.isfinite(args.restart_cost)):
        raise ConfigError("--restart-cost must be a finite number of seconds >= 0, got %r" % args.restart_cost)
    profile = profiles.load(args.profile)
    times = fault_times(args.budget, args.kill_at, args.restart_at)
    return engines, scenarios, _seeds(args.seeds), profile, times, victim_slot(profile.slowdowns, args.victim)


def base_spec(args, profile, engine, seed, **changes):
    """The fault-free run's :class:`JobSpec`; ``changes`` replace its fields."""
    fields = dict(mode=args.mode, slowdowns=profile.slowdowns, contexts=profile.contexts, model=args.model,
                  time_budget=args.budget, batch_size=args.batch_size, lr=args.lr, seed=seed,
                  target_accuracy=args.target_accuracy, input_size=args.input_size,
                  eval_interval=args.eval_interval, engine=engine,
                  extra_train_args=("--eval-samples", str(args.eval_samples)),
                  launcher_args=("--base-iter", "%g" % args.base_iter, "--omp-threads", "1"))
    fields.update(changes)
    return JobSpec(**fields)


def _fresh(directory):
    """Remove a previous attempt's files (its first snapshot would look like this run's training start)."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)


def _save_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def _load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Bench:
    """The runs of one ``mxhet-bench faults`` call, in order, with their rows and failures."""

    def __init__(self, args):
        self.args = args
        self.engines, self.scenarios, self.seeds, self.profile, self.times, self.victim = check(args)
        self.rows, self.failures = [], []
        self.measured_restart = []   # the cluster's relaunch seconds, classic runs (the simulator's cost)

    # -- one run --------------------------------------------------------------------------------------------------
    def _run(self, label, spec, hook=None, expect_failure=False):
        """The summary of run ``label`` (reused under --resume), or None when it failed (noted)."""
        directory = run_dir(self.args.out, label)
        fault_path = os.path.join(directory, FAULT_FILE)
        if self.args.resume != "off":
            summary = load_finished(directory)
            fault = _load_json(fault_path)
            if summary is not None or (expect_failure and fault and fault.get("kill_s") is not None):
                return summary if summary is not None else {"fault": fault}
            if self.args.resume == "only":
                self.failures.append({"label": label, "error": "not run (nothing finished in %s)" % directory})
                return None
        _fresh(directory)
        hooks = (hook,) if hook is not None else ()
        try:
            summary = run_with_bar(spec, directory, "%-22s" % label, hooks=hooks)
        except JobFailed as exc:
            if not expect_failure or hook is None or hook.kill_unix is None:
                self.failures.append({"label": label, "error": str(exc)})
                tqdm.write("FAILED: %s" % exc, file=sys.stderr)
                return None
            summary = None
        if hook is not None:
            _save_json(fault_path, hook.record())
        return summary if summary is not None else {"fault": hook.record()}

    def _confirmed(self, directory, summary):
        """The run's confirmed time to target (all test images) and its confirmation record."""
        try:
            record = confirm.ensure(directory, summary)
        except ConfigError as exc:
            self.failures.append({"label": os.path.basename(directory), "error": "confirmation: %s" % exc})
            return None, None
        return record["time_to_target_s"], record

    def _row(self, engine, scenario, seed, directory, summary, **extra):
        confirmed, record = self._confirmed(directory, summary)
        digests = sorted({w.get("final_model_sha256") for w in summary.get("workers", [])} - {None})
        row = {"engine": engine, "scenario": scenario, "seed": seed, "mode": summary["mode"],
               "time_to_target_s": confirmed, "curve_time_to_target_s": first_crossing(summary["curve"],
                                                                                        self.args.target_accuracy),
               "confirmed": record is not None, "final_accuracy": summary["final_accuracy"],
               "train_time_s": summary["train_time_s"], "curve": summary["curve"],
               "digests": len(digests), "workers": len(summary.get("workers", [])),
               "rounds": max((w.get("rounds", 0) for w in summary.get("workers", [])), default=0),
               "elastic": summary.get("elastic"), "run_dir": os.path.relpath(directory, self.args.out)}
        row.update(extra)
        self.rows.append(row)
        return row

    # -- the scenarios ----------------------------------------------------------------------------------------------
    def run(self):
        for engine in self.engines:
            for seed in self.seeds:
                for scenario in self.scenarios:
                    getattr(self, "_%s_%s" % (engine, scenario))(seed)
                self._write()

    def _label(self, engine, scenario, seed, part=""):
        return "%s-%s%s-s%d" % (scenario, engine, part, seed)

    def _plain(self, engine, scenario, seed, spec, hook=None, **extra):
        label = self._label(engine, scenario, seed)
        summary = self._run(label, spec, hook)
        if summary is not None:
            self._row(engine, scenario, seed, run_dir(self.args.out, label), summary, **extra)
        return summary

    def _cluster_none(self, seed):
        self._plain("cluster", "none", seed, base_spec(self.args, self.profile, "cluster", seed))

    def _cluster_restart(self, seed):
        a, t = self.args, self.times
        spec = base_spec(a, self.profile, "cluster", seed)
        spec.launcher_args += ("--elastic", "--max-restarts", "1", "--restart-delay", "%g" % t["restart_delay_s"])
        directory = run_dir(a.out, self._label("cluster", "restart", seed))
        hook = FaultHook(os.path.join(directory, "snapshots", "000000.params"), t["kill_s"], slot=self.victim)
        summary = self._plain("cluster", "restart", seed, spec, hook, victim_slot=self.victim)
        if summary is not None:
            job = _load_json(os.path.join(directory, "job.json")) or {}
            self.rows[-1].update(fault=_load_json(os.path.join(directory, FAULT_FILE)),
                                 worker_restarts=job.get("worker_restarts"))

    def _cluster_classic(self, seed):
        a, t = self.args, self.times
        first, second = self._label("cluster", "classic", seed, "-a"), self._label("cluster", "classic", seed, "-b")
        checkpoints = os.path.join(a.out, "runs", self._label("cluster", "classic", seed, "-checkpoints"))
        flags = ("--checkpoint-dir", os.path.abspath(checkpoints), "--checkpoint-every", str(a.checkpoint_every))
        spec = base_spec(a, self.profile, "cluster", seed)
        spec.extra_train_args += flags
        dir_a, dir_b = run_dir(a.out, first), run_dir(a.out, second)
        reuse_a = a.resume != "off" and (_load_json(os.path.join(dir_a, FAULT_FILE)) or {}).get("kill_s") is not None
        if not reuse_a and a.resume != "only":
            shutil.rmtree(checkpoints, ignore_errors=True)
        hook = FaultHook(os.path.join(dir_a, "snapshots", "000000.params"), t["kill_s"])
        killed = self._run(first, spec, hook, expect_failure=True)
        if killed is None:
            return
        fault = killed.get("fault") or _load_json(os.path.join(dir_a, FAULT_FILE))
        if not fault or fault.get("kill_s") is None:
            self.failures.append({"label": first, "error": "the job ended before the kill at %.0f s" % t["kill_s"]})
            return
        # the checkpoint the resumed launch starts from, noted before it writes checkpoints of its own
        ck_path = os.path.join(dir_a, "checkpoint.json")
        ck = _load_json(ck_path)
        if ck is None:
            ck = dict(zip(("round", "seconds"), _checkpoint_of(checkpoints, len(self.profile.slowdowns), dir_a)))
            _save_json(ck_path, ck)
        # the resumed launch trains until the common budget, its start-up estimated by the first launch's
        budget_b = max(2 * a.eval_interval, a.budget - fault["kill_s"] - (fault["startup_s"] or 0.0))
        spec_b = base_spec(a, self.profile, "cluster", seed, time_budget=round(budget_b, 1))
        # no checkpoint before the kill: the classic recovery starts the job again from its start
        spec_b.extra_train_args += flags + (("--resume",) if ck["round"] is not None else ())
        hook_b = FaultHook(os.path.join(dir_b, "snapshots", "000000.params"), None)
        resumed = self._run(second, spec_b, hook_b)
        if resumed is None:
            return
        fault_b = _load_json(os.path.join(dir_b, FAULT_FILE)) or {}
        relaunch_s = fault_b["train_start_unix"] - fault["kill_unix"] if fault_b.get("train_start_unix") else None
        if relaunch_s is None:
            self.failures.append({"label": second, "error": "no training start seen: cannot place it in time"})
            return
        self.measured_restart.append(relaunch_s)
        before = self._score_killed(dir_a, dir_b, resumed)
        if before is None:
            return
        resumed_at = fault["kill_s"] + relaunch_s
        curve = cluster_classic_curve(before["curve"], resumed["curve"], resumed_at)
        snapshots = before["snapshots"] + _snapshot_files(dir_b, resumed)
        ck_round, ck_s = ck["round"], ck["seconds"]
        combined = self._combine("cluster", seed, resumed, dir_b, curve, snapshots,
                                 resumed_at + resumed["train_time_s"])
        self._row("cluster", "classic", seed, combined, _load_json(os.path.join(combined, "summary.json")),
                  fault=fault, relaunch_s=relaunch_s, checkpoint_round=ck_round, checkpoint_s=ck_s,
                  lost_s=fault["kill_s"] - (ck_s or 0.0) + relaunch_s,
                  resumed_budget_s=spec_b.time_budget)

    def _score_killed(self, dir_a, dir_b, resumed):
        """The killed launch's snapshots, scored like every curve point (child process; cached)."""
        path = os.path.join(dir_a, "scored.json")
        scored = _load_json(path)
        if scored is None:
            import subprocess
            proc = subprocess.run([sys.executable, "-m", "bench.faults", "score", dir_a, dir_b],
                                  capture_output=True, text=True, timeout=3600)
            scored = _load_json(path)
            if proc.returncode != 0 or scored is None:
                self.failures.append({"label": os.path.basename(dir_a),
                                      "error": "scoring its snapshots failed: %s" % proc.stderr[-2000:]})
                return None
        return scored

    def _combine(self, engine, seed, like, like_dir, curve, snapshots, train_time):
        """A run directory for the classic recovery as one run: ``summary.json`` (``like``'s, with this curve),
        its snapshots, one per point, linked in order, and the worker records of ``like_dir`` (the run that
        finished), so :mod:`bench.confirm` confirms it as any run."""
        directory = run_dir(self.args.out, self._label(engine, "classic", seed))
        _fresh(directory)
        os.makedirs(os.path.join(directory, "snapshots"))
        for name in os.listdir(like_dir):
            if name.startswith("worker-") and name.endswith(".json"):
                shutil.copyfile(os.path.join(like_dir, name), os.path.join(directory, name))
        for i, source in enumerate(snapshots):
            target = os.path.join(directory, "snapshots", "%06d.params" % i)
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
        summary = dict(like, curve=curve, train_time_s=train_time,
                       time_to_target_s=first_crossing(curve, self.args.target_accuracy))
        _save_json(os.path.join(directory, "summary.json"), summary)
        return directory

    def _sim_none(self, seed):
        self._plain("sim", "none", seed, base_spec(self.args, self.profile, "sim", seed))

    def _sim_restart(self, seed):
        t, v = self.times, self.victim
        spec = base_spec(self.args, self.profile, "sim", seed,
                         sim_args=("--events", "%d:leave@%g,%d:join@%g" % (v, t["kill_s"], v, t["restart_s"])))
        self._plain("sim", "restart", seed, spec, victim_slot=v)

    def _sim_classic(self, seed):
        a, t = self.args, self.times
        free = next((r for r in self.rows if (r["engine"], r["scenario"], r["seed"]) == ("sim", "none", seed)), None)
        if free is None:   # the round time comes from the fault-free run
            self._sim_none(seed)
            free = next((r for r in self.rows if (r["engine"], r["scenario"], r["seed"]) == ("sim", "none", seed)),
                        None)
            if free is None:
                return
            self.rows.pop()   # only run for its round time; not asked for
        label = self._label("sim", "classic", seed, "-run")
        plan_path = os.path.join(run_dir(a.out, label), "classic.json")
        planned = _load_json(plan_path) if a.resume != "off" else None
        if planned is None:
            cost, source = self.restart_cost()
            round_s = free["train_time_s"] / max(1, free["rounds"])
            ck_s = checkpoint_time(t["kill_s"], round_s, a.checkpoint_every)
            planned = {"relaunch_s": cost, "relaunch_source": source, "round_s": round_s, "checkpoint_s": ck_s,
                       "lost_s": t["kill_s"] - ck_s + cost}
        cost, source, round_s, ck_s, lost = (planned[k] for k in ("relaunch_s", "relaunch_source", "round_s",
                                                                   "checkpoint_s", "lost_s"))
        spec = base_spec(a, self.profile, "sim", seed, time_budget=round(max(a.eval_interval, a.budget - lost), 3))
        summary = self._run(label, spec)
        if summary is None:
            return
        _save_json(plan_path, planned)   # what this run was made for, for --resume
        curve, sources = sim_classic_curve(summary["curve"], t["kill_s"], ck_s, lost)
        files = _snapshot_files(run_dir(a.out, label), summary)
        combined = self._combine("sim", seed, summary, run_dir(a.out, label), curve, [files[i] for i in sources],
                                 summary["train_time_s"] + lost)
        self._row("sim", "classic", seed, combined, _load_json(os.path.join(combined, "summary.json")),
                  checkpoint_s=ck_s, checkpoint_round=round(ck_s / round_s), round_s=round_s, relaunch_s=cost,
                  relaunch_source=source, lost_s=lost, fault={"kill_s": t["kill_s"]})

    def restart_cost(self):
        """The simulator's relaunch seconds and where they come from."""
        if self.args.restart_cost is not None:
            return self.args.restart_cost, "--restart-cost"
        if self.measured_restart:
            return (sum(self.measured_restart) / len(self.measured_restart),
                    "measured: the cluster's relaunch in this bench (mean of %d)" % len(self.measured_restart))
        return DEFAULT_RESTART_COST_S, "default (no cluster relaunch measured)"

    # -- results ----------------------------------------------------------------------------------------------------
    def result(self, started, load_before):
        a = self.args
        command = ["mxhet-bench"] + list(getattr(a, "argv", sys.argv[1:]))
        prov = provenance(command, seeds=self.seeds, contexts=self.profile.contexts)
        prov["load_before"], prov["load_after"] = load_before, list(os.getloadavg())
        return {"experiment": "faults", "command": command, "machine": machine_info(self.profile.contexts),
                "provenance": prov,
                "settings": dict({k: getattr(a, k) for k in (
                    "engines", "scenarios", "mode", "victim", "kill_at", "restart_at", "checkpoint_every",
                    "restart_cost", "profile", "model", "input_size", "lr", "batch_size", "base_iter", "budget",
                    "eval_interval", "eval_samples", "target_accuracy", "seeds")},
                    slowdowns=list(self.profile.slowdowns), victim_slot=self.victim, **self.times),
                "restart_cost": dict(zip(("seconds", "source"), self.restart_cost())),
                "runs": self.rows, "summary": summarise(self.rows), "failures": self.failures,
                "started_unix": started, "wall_s": time.time() - started}

    def _write(self):
        if not hasattr(self, "_started"):
            return
        result = self.result(self._started, self._load_before)
        _save_json(os.path.join(self.args.out, "faults.json"), result)
        with open(os.path.join(self.args.out, "faults.md"), "w") as f:
            f.write(format_report(result))


def _snapshot_files(directory, summary):
    """A finished run's snapshot files, one per curve point."""
    from .rescore import snapshot_paths
    return snapshot_paths(directory, summary)


def _checkpoint_of(root, num_slots, killed_dir):
    """``(round, seconds)`` of the newest complete checkpoint the resumed launch started from: its round and
    when its global model was written, in seconds of the killed launch's training (its first snapshot's
    time as the start); (None, None) when there is none."""
    from mxhet import checkpoint
    rounds = checkpoint.complete_rounds(root, num_slots)
    if not rounds:
        return None, None
    newest = max(rounds)
    try:
        written = os.path.getmtime(os.path.join(checkpoint.round_dir(root, newest), "global.params"))
        start = os.path.getmtime(os.path.join(killed_dir, "snapshots", "000000.params"))
    except OSError:
        return newest, None
    return newest, round(written - start, 3)


def summarise(rows):
    """Per engine and scenario: the time to target and the final accuracy over seeds (mean, 95% interval)."""
    out = []
    for engine in ENGINES:
        for scenario in SCENARIOS:
            runs = [r for r in rows if r["engine"] == engine and r["scenario"] == scenario]
            if not runs:
                continue
            out.append({"engine": engine, "scenario": scenario, "seeds": [r["seed"] for r in runs],
                        "time_to_target": stats.time_to_target([r["time_to_target_s"] for r in runs],
                                                               [r["train_time_s"] for r in runs]),
                        "final_accuracy": stats.mean_interval([r["final_accuracy"] for r in runs])})
    return out


SCENARIO_TEXT = {"none": "no fault", "restart": "one device killed, restarted",
                 "classic": "whole job killed, resumed from its checkpoint"}


def format_report(result):
    """The markdown report of a finished (or partly finished) bench."""
    s = result["settings"]
    p = result["provenance"]
    lines = ["# mxhet-bench faults", "",
             "Command: `%s`" % " ".join(result["command"]), "",
             "Commit %s%s, %s; machine: %s, %s cores (shared: cluster timings are noisy; load average %s before, "
             "%s after)." % (p["commit"], " (dirty)" if p["dirty"] else "", p["date"], result["machine"]["cpu"],
                             result["machine"]["cores"], "/".join("%.1f" % x for x in p["load_before"]),
                             "/".join("%.1f" % x for x in p["load_after"])), "",
             "%s on the `%s` profile (slowdowns %s, T = %g s), %s at %s px, batch %d, lr %g, seeds %s; every run "
             "to %g s of training (times to %.2f confirmed on all 10,000 test images; curve points on %d)."
             % (s["mode"], s["profile"], ",".join("%g" % f for f in s["slowdowns"]), s["base_iter"], s["model"],
                s["input_size"] or "its default", s["batch_size"], s["lr"], s["seeds"], s["budget"], s["target_accuracy"],
                s["eval_samples"]), "",
             "* restart: slot %d (a %s device) SIGKILLed at %.0f s, started again at %.0f s "
             "(`--elastic --max-restarts 1 --restart-delay %g`; simulator `--events`);"
             % (s["victim_slot"], s["victim"], s["kill_s"], s["restart_s"], s["restart_delay_s"]),
             "* classic: every process SIGKILLed at %.0f s, launched again with `--resume` from the newest "
             "checkpoint (every %d rounds); the simulator's classic run is the fault-free one with the models after "
             "the checkpoint %s later (relaunch: %.1f s, %s)."
             % (s["kill_s"], s["checkpoint_every"], "(kill - checkpoint) + relaunch",
                result["restart_cost"]["seconds"], result["restart_cost"]["source"]), "",
             "| engine | scenario | seeds | time to %.2f (s) | final accuracy | lost time (s) | notes |"
             % s["target_accuracy"], "|---|---|---|---|---|---|---|"]
    for agg in result["summary"]:
        runs = [r for r in result["runs"] if r["engine"] == agg["engine"] and r["scenario"] == agg["scenario"]]
        lost = [r.get("lost_s") for r in runs if r.get("lost_s") is not None]
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            agg["engine"], SCENARIO_TEXT[agg["scenario"]], ",".join(map(str, agg["seeds"])),
            stats.format_interval(agg["time_to_target"], "%.1f"),
            stats.format_interval(agg["final_accuracy"], "%.4f"),
            "%.1f" % (sum(lost) / len(lost)) if lost else "", "; ".join(_notes(r) for r in runs)))
    lines += ["", "![accuracy against time](faults.png)", ""] + failures_block(result["failures"])
    return "\n".join(lines)


def _notes(row):
    notes = []
    if row["scenario"] == "classic":
        if row.get("checkpoint_round") is not None:
            notes.append("resumed from round %s (%s s)" % (row["checkpoint_round"],
                                                           "%.1f" % row["checkpoint_s"] if row.get("checkpoint_s")
                                                           is not None else "?"))
        if row.get("relaunch_s") is not None:
            notes.append("relaunch %.1f s" % row["relaunch_s"])
    if row["scenario"] == "restart" and row.get("elastic"):
        events = row["elastic"].get("events") or (row["elastic"].get("membership") or {}).get("events") or []
        notes.append(", ".join("%s round %s" % (e.get("event"), e.get("round")) for e in events))
    if row.get("workers"):
        notes.append("%d digest(s) over %d workers" % (row["digests"], row["workers"]))
    if not row["confirmed"]:
        notes.append("unconfirmed")
    return ", ".join(n for n in notes if n)


def plot(result, path):
    """Accuracy against time, one line per scenario, one panel per engine; the fault's times marked."""
    from .plots import _plt, _save
    plt = _plt()
    engines = [e for e in ENGINES if any(r["engine"] == e for r in result["runs"])]
    if not engines:
        return None
    s = result["settings"]
    fig, axes = plt.subplots(1, len(engines), figsize=(6 * len(engines), 4), squeeze=False)
    colors = {"none": "tab:blue", "restart": "tab:orange", "classic": "tab:red"}
    for ax, engine in zip(axes[0], engines):
        for r in result["runs"]:
            if r["engine"] != engine:
                continue
            ax.plot([t for t, _ in r["curve"]], [a for _, a in r["curve"]], color=colors[r["scenario"]],
                    label="%s (seed %d)" % (SCENARIO_TEXT[r["scenario"]], r["seed"]), marker=".")
        ax.axvline(s["kill_s"], color="grey", linestyle="--", label="fault (%.0f s)" % s["kill_s"])
        ax.axvline(s["restart_s"], color="grey", linestyle=":", label="device back (%.0f s)" % s["restart_s"])
        ax.axhline(s["target_accuracy"], color="black", linewidth=0.5)
        ax.set_title("%s, %s on %s (%s)" % (s["mode"], s["model"], s["profile"], engine))
        ax.set_xlabel("virtual seconds" if engine == "sim" else "seconds")
        ax.set_ylabel("test accuracy")
        ax.legend(fontsize=7)
    return _save(fig, path)


def run(args):
    try:
        bench = Bench(args)
    except ConfigError as exc:
        print("mxhet-bench faults: error: %s" % exc, file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    bench._started, bench._load_before = time.time(), list(os.getloadavg())
    if args.jobs > 1:
        from .runner import share_cores
        share_cores(args.jobs, bench.profile.contexts)
    bench.run()
    result = bench.result(bench._started, bench._load_before)
    _save_json(os.path.join(args.out, "faults.json"), result)
    try:
        plot(result, os.path.join(args.out, "faults.png"))
    except Exception as exc:   # the figure is a convenience; the JSON and the report are the results
        print("mxhet-bench faults: no figure: %s" % exc, file=sys.stderr)
    report = format_report(result)
    with open(os.path.join(args.out, "faults.md"), "w") as f:
        f.write(report)
    print(report)
    return 1 if result["failures"] else 0


def score_killed(killed_dir, like_dir):
    """Score the snapshots a killed launch left (its snapshot index) as every curve point is scored, the last
    on all test images, with the settings of the finished run in ``like_dir``; writes ``scored.json``:
    ``{"curve", "snapshots"}``."""
    import types

    import mxnet as mx

    from mxhet import train

    from .rescore import evaluation_setup
    with open(os.path.join(like_dir, "summary.json")) as f:
        like = json.load(f)
    snapshots, _ = train.read_snapshot_index(os.path.join(killed_dir, "snapshots"))
    if not snapshots:
        raise ConfigError("%s: the killed launch left no snapshot" % killed_dir)
    args, _config, net, train_set = evaluation_setup(like, killed_dir)
    # no worker records to merge: the killed launch wrote none
    config = types.SimpleNamespace(num_slots=0, elastic=False, data_dir=_config.data_dir)
    scored = train.evaluate_run(args, config, like["mode"], snapshots,
                                mx.cpu(), like["input_size"], snapshots[-1][0], [], train_set=train_set,
                                eval_net=net)
    _save_json(os.path.join(killed_dir, "scored.json"),
               {"curve": scored["curve"], "snapshots": [os.path.abspath(p) for _, p in snapshots]})


def main(argv=None):
    """``python -m bench.faults score KILLED_DIR LIKE_DIR``: the child process that scores a killed launch."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] != "score":
        print("usage: python -m bench.faults score KILLED_DIR LIKE_DIR", file=sys.stderr)
        return 2
    score_killed(argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
