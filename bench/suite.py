"""The paper's experiments: plan the runs, calibrate, run each once, write results.

``table1``, ``curves``, ``throughput`` and ``compute-ratio`` each need a set of
runs, a run being one (model, mode, data distribution) on the preset's
emulated cluster; ``all`` runs the union once and every experiment reads the
runs it needs. A run that fails is recorded with its error and the others go
on.
"""
import collections
import dataclasses
import glob
import json
import os
import shutil
import sys
import threading
import time

from tqdm import tqdm

from mxhet import models as model_zoo
from mxhet.errors import ConfigError
from mxhet.sim.checkpoint import MODES as CHECKPOINT_MODES, without_checkpoint_flags

from . import calibrate, presets, runner
from .metrics import run_record
from . import provenance as provenance_module
from .provenance import provenance
from .runner import JobFailed, JobSpec, machine_info, run_with_bar

EXPERIMENTS = ("table1", "curves", "throughput", "compute-ratio")
SWEEP = "sweep"
"""The open division's learning-rate sweep (not part of ``all``: the other experiments need its result)."""
ENGINES = ("cluster", "sim")

RunKey = collections.namedtuple("RunKey", "model mode dist seed lr", defaults=(0, None))
"""One run: ``mode`` is a mode or a variant (:data:`bench.presets.VARIANTS`); ``lr`` None: the preset's."""


def run_name(key):
    """``model-mode-dist``, then ``-lrX`` for a sweep's run and ``-seedN`` for seeds other than 0 (seed 0
    keeps the name earlier single-seed benches used, so that ``--resume`` keeps their runs)."""
    name = "%s-%s-%s" % tuple(key[:3])
    if key.lr is not None:
        name += "-lr%g" % key.lr
    return name + ("-seed%d" % key.seed if key.seed else "")


def plan(experiments, table_models, figure_model, preset, modes=None, seeds=None):
    """``{experiment: [RunKey, ...]}``; ``modes`` (if given) replaces each experiment's modes, ``seeds``
    (if given) every model's seeds.

    Table 1 runs the table variants and the standalone run for every model,
    once per seed; Figure 3 the curve variants on both distributions and the
    standalone run; Figures 4 and 5 every distributed mode, i.i.d., on the
    figure model, with its first seed; the sweep (open division) each of its
    modes at each of its learning rates on its model, first seed.
    """
    def chosen(default):
        return tuple(m for m in (modes or default))

    def seeds_of(model, dist="iid"):
        return tuple(seeds) if seeds else preset.seeds_for(model, dist)

    out = {}
    for name in experiments:
        keys = []
        if name == "table1":
            for model in table_models:
                keys += [RunKey(model, m, "iid", s) for m in chosen(preset.table_modes_for(model)
                                                                     + (presets.STANDALONE,))
                         for s in seeds_of(model)]
        elif name == "curves" and figure_model:
            for dist in ("iid", "non-iid"):
                keys += [RunKey(figure_model, m, dist, s)
                         for m in chosen(preset.curve_modes + (presets.STANDALONE,))
                         if not (m == presets.STANDALONE and dist != "iid")  # one device has no split
                         for s in seeds_of(figure_model, dist)]
        elif name in ("throughput", "compute-ratio") and figure_model:
            keys += [RunKey(figure_model, m, "iid", seeds_of(figure_model)[0]) for m in chosen(preset.modes)]
        elif name == SWEEP:
            sweep = preset.lr_sweep
            if not sweep:
                raise ConfigError("preset %r has no learning-rate sweep (the open division's has)" % preset.name)
            keys += [RunKey(sweep["model"], m, "iid", seeds_of(sweep["model"])[0], lr)
                     for m in chosen(sweep["modes"]) for lr in sweep["lrs"]]
        elif name not in EXPERIMENTS:
            raise ConfigError("unknown experiment %r" % name)
        out[name] = keys
    return out


def best_lrs(result):
    """variant -> the best learning rate of a sweep's result: the shortest confirmed time to the target,
    else (no rate reached it) the best final accuracy."""
    best = {}
    for run in result["runs"]:
        variant = run.get("variant", run["mode"])
        t = run["time_to_target_s"]
        rank = (0, t) if t is not None else (1, -run["final_accuracy"])
        if variant not in best or rank < best[variant][0]:
            best[variant] = (rank, run["lr"])
    return {v: lr for v, (_, lr) in best.items()}


def sweep_lrs(preset, out):
    """The open division's learning rates: ``preset`` with ``mode_lrs`` from ``out/sweep.json``.

    Raises:
        ConfigError: when the sweep has not been run (or not for this preset).
    """
    path = os.path.join(out, "%s.json" % SWEEP)
    if not os.path.exists(path):
        raise ConfigError("preset %s takes each variant's learning rate from its sweep, and %s does not exist: "
                          "run `mxhet-bench sweep --preset %s --out %s` first" % (preset.name, path, preset.name,
                                                                                   out))
    with open(path) as f:
        result = json.load(f)
    if result.get("preset") != preset.name:
        raise ConfigError("%s is a sweep of preset %r, not %r" % (path, result.get("preset"), preset.name))
    return dataclasses.replace(preset, mode_lrs=dict(preset.mode_lrs, **result["best_lrs"]))


def unique_runs(planned):
    """Every planned run once, in first-planned order."""
    seen, order = set(), []
    for keys in planned.values():
        for key in keys:
            if key not in seen:
                seen.add(key)
                order.append(key)
    return order


def check_contexts(profile):
    """Raise ConfigError when the profile names GPUs that MXNet cannot see."""
    import mxnet as mx
    from mxhet.config import parse_context

    from mxhet.config import mx_context
    needed = [parse_context(c)[1] for c in profile.contexts if parse_context(c)[0] == "gpu"]
    if needed:
        have = mx.context.num_gpus()
        if max(needed) >= have:
            raise ConfigError("profile %r puts devices on gpu(%d) but MXNet sees %d GPU(s) here; use a CPU "
                              "preset (--preset cpu) or a --profile file with contexts that exist"
                              % (profile.name, max(needed), have))
        for index in sorted(set(needed)):
            mx_context("gpu(%d)" % index)   # a GPU this MXNet build has no kernels for


def calibrate_models(preset, profile, models, budget, measure=calibrate.measure, cores=None, log=print,
                     engine="cluster"):
    """Measure each model and compute its base iteration time ``T``.

    On the cluster, ``T`` is the smallest at which every emulated device fits
    this machine; in the simulator, where devices take turns, the fastest
    device's own measured iteration time.

    Returns:
        ``(calibration, skipped)``: ``{model: record}`` for the models to run,
        and ``[{"model", "reason", ...}]`` for those the preset cannot run.
    """
    cores = cores or os.cpu_count() or 1
    calibration, skipped = {}, []
    for model in models:
        size = preset.input_sizes.get(model) or model_zoo.default_input_size(model)
        seconds = {}
        try:
            for context in sorted(set(profile.contexts)):
                seconds[context] = measure(model, size, preset.batch_size, context)
        except Exception as exc:  # noqa: BLE001  (reported, the other models go on)
            skipped.append({"model": model, "reason": "calibration failed: %s" % str(exc).strip()[-500:]})
            log("skipped %s: calibration failed" % model)
            continue
        base, limit = calibrate.base_iteration([(d.context, d.slowdown) for d in profile.devices], seconds,
                                               cores if engine == "cluster" else float("inf"), preset.utilization)
        record = {"input_size": size, "seconds_per_iteration": seconds, "cpu_cores": cores,
                  "utilization": preset.utilization, "base_iteration_s": base, "base_iteration_limit": limit,
                  "fast_iterations_in_budget": budget / base, "time_budget_s": budget}
        if budget / base < preset.min_fast_iterations:
            reason = ("one iteration takes %s here, so the emulated cluster's base iteration is %.2f s and a "
                      "%.0f s run gives each fast device %.0f iterations; the %s preset needs at least %d"
                      % (", ".join("%.2f s on %s" % (t, c) for c, t in sorted(seconds.items())), base, budget,
                         budget / base, preset.name, preset.min_fast_iterations))
            skipped.append(dict(record, model=model, reason=reason))
            log("skipped %s: %s" % (model, reason))
            continue
        calibration[model] = record
        log("calibrated %s at %d px: %s per iteration -> base iteration T = %.3f s (%s)"
            % (model, size, ", ".join("%.3f s on %s" % (t, c) for c, t in sorted(seconds.items())), base, limit))
    return calibration, skipped


def job_spec(key, preset, profile, record, budget, seed=None, extra_launcher=(), engine="cluster",
             checkpoint_every_min=0, resume=False):
    """The job of one run, on the ``cluster`` (launcher) or the ``sim`` engine (``seed``, if given,
    replaces the key's). The standalone variant runs the fastest device alone; ``sync-fast`` runs Sync
    over the devices of the smallest slowdown only. A simulator run saves a checkpoint every
    ``checkpoint_every_min`` wall minutes (0: none) and, with ``resume``, continues from the one it finds."""
    base = record["base_iteration_s"]
    mode = key.mode
    if key.mode == presets.STANDALONE:
        device = profile.fastest()
        slowdowns, contexts = (device.slowdown,), (device.context,)
    elif key.mode == presets.FAST_SYNC:
        fastest = min(d.slowdown for d in profile.devices)
        fast = [d for d in profile.devices if d.slowdown == fastest]
        slowdowns, contexts, mode = tuple(d.slowdown for d in fast), tuple(d.context for d in fast), "sync"
    else:
        slowdowns, contexts = profile.slowdowns, profile.contexts
    return JobSpec(
        mode=mode, slowdowns=slowdowns, contexts=contexts, model=key.model, time_budget=budget,
        batch_size=preset.batch_size, lr=key.lr if key.lr is not None else preset.lr_for(key.model, key.mode),
        dist=key.dist, seed=key.seed if seed is None else seed,
        target_accuracy=preset.target_accuracy, input_size=record["input_size"],
        eval_interval=preset.eval_interval(budget, base * max(slowdowns), base * min(slowdowns)),
        startup_allowance=preset.startup_allowance,
        extra_train_args=("--eval-samples", str(preset.eval_samples)) + _mode_train_args(mode), engine=engine,
        sim_args=_sim_args(preset, key.model, key.dist)
        + (_checkpoint_args(checkpoint_every_min, resume) if mode in CHECKPOINT_MODES else ())
        if engine == "sim" else (),
        launcher_args=("--base-iter", "%.6f" % base, "--omp-threads", "1") + _mode_args(mode, slowdowns, base,
                                                                                        budget)
        + tuple(extra_launcher))


def _sim_args(preset, model, dist="iid"):
    """Simulator-only options of a preset for ``model`` on ``dist`` data."""
    args = ("--stop-at-target",) if preset.stop_at_target else ()
    cap = preset.cap_for(model, dist)
    if cap:
        args += ("--max-iterations", str(cap))
    if preset.eval_min_iterations:
        args += ("--eval-min-iterations", str(preset.eval_min_iterations))
    return args + (("--eval-growth", "%g" % preset.eval_growth) if preset.eval_growth else ())


def _checkpoint_args(every_min, resume):
    """``python -m mxhet.sim``'s checkpoint flags (not part of the command a run records)."""
    if not every_min:
        return ()
    return ("--checkpoint-every-min", "%g" % every_min) + (("--resume",) if resume else ())


def _mode_train_args(mode):
    """Training options of a mode beyond the preset's. gcada and cada run AMSGrad on the servers, which
    ignores the preset's SGD learning rate; their default α (the G-CADA paper's 0.01, for its linear model)
    leaves a CNN at chance after the few iterations of a short run, Adam's usual 0.001 learns. cada runs
    as distributed AMSGrad (D = 1): lazy CADA (D = 10, c = 2) computes a fresh gradient in about one
    iteration in five and stays near chance in a smoke run's seconds (it is tested in
    tests/integration/test_model_contract.py and tests/unit/test_sim.py)."""
    if mode == "gcada":
        return ("--step-size", "0.001")
    if mode == "cada":
        return ("--step-size", "0.001", "--max-delay", "1")
    return ()


def _mode_args(mode, slowdowns, base, budget):
    """Launcher options scaled to the emulated cluster's speed."""
    if mode == "adsp":
        # a checkpoint period in which the slowest device commits at least once
        period = max(2.0, 1.5 * max(slowdowns) * base)
        return ("--adsp-period", "%.3f" % period, "--adsp-epoch", "%.1f" % max(4 * period, budget / 3))
    return ()


def _portable(argv, out):
    """A run's command without this machine's paths: ``python``, paths relative to ``out``."""
    root = os.path.abspath(out)
    return ["python" if a == sys.executable else
            os.path.relpath(a, root) if os.path.isabs(a) and a.startswith(root) else a for a in argv]


def record_of(summary, key, spec, record, run_dir, out_dir):
    """The bench's JSON record of one finished run (``run_dir`` relative to ``out_dir``)."""
    rec = run_record(summary)
    rec["command"] = _portable(without_checkpoint_flags(summary.get("command") or []), out_dir)
    rec["variant"] = key.mode
    confirmation = summary.get("confirmation")
    if confirmation is not None:   # a time to target counts only when confirmed on the whole test set
        rec.update(curve_time_to_target_s=rec["time_to_target_s"], time_to_target_s=confirmation["time_to_target_s"],
                   confirmation=confirmation)
    workers = sorted(summary["workers"], key=lambda w: w["slot"])
    rec.update(standalone=key.mode == presets.STANDALONE, input_size=spec.input_size, lr=spec.lr,
               batch_size=spec.batch_size, seed=spec.seed, time_budget_s=spec.time_budget,
               base_iteration_s=record["base_iteration_s"], contexts=[w["context"] for w in workers],
               overruns=[w.get("overruns", 0) for w in workers],
               iterations=[w["iterations"] for w in workers], run_dir=os.path.relpath(run_dir, out_dir),
               wall_s=_wall_s(summary), resumed=bool(summary.get("resumed")))
    return rec


def _wall_s(summary):
    """A run's wall seconds: every session's where a simulator run was resumed from a checkpoint."""
    kept = (summary.get("sim") or {}).get("checkpoint") or {}
    return summary["sim"]["wall_s"] if kept.get("resumed_at_s") else summary.get("wall_s")


def _without(argv, flag):
    """``argv`` without ``flag`` and its value, and that value (or None)."""
    if flag not in argv:
        return argv, None
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:], float(argv[i + 1])


def same_run(done, wanted, ended_at, reached_target=False):
    """True if a simulator run made with arguments ``done`` that ended at
    ``ended_at`` virtual seconds is the run ``wanted`` asks for: the same
    arguments, or the same but the budget, when the run ended before its own
    budget (at the target or the compute cap) and within the wanted one --
    the budget only says when to stop, so the run would have gone the same.
    Likewise a run that stopped at the target (``reached_target``) before its
    compute cap (``--max-iterations``) is the same under a larger cap or none."""
    if done == wanted:
        return True
    (done_rest, done_budget), (wanted_rest, wanted_budget) = _without(done, "--time-budget"), \
        _without(wanted, "--time-budget")
    (done_rest, done_cap), (wanted_rest, wanted_cap) = _without(done_rest, "--max-iterations"), \
        _without(wanted_rest, "--max-iterations")
    if done_rest != wanted_rest or None in (done_budget, wanted_budget, ended_at):
        return False
    if done_cap != wanted_cap and not (reached_target and done_cap and (not wanted_cap or wanted_cap > done_cap)):
        return False
    return ended_at < done_budget and ended_at <= wanted_budget


def finished_run(spec, run_dir):
    """The summary of a simulator run already finished in ``run_dir`` with
    ``spec``'s command (what ``--resume`` reuses; the directory it wrote to may
    since have moved, e.g. copied from a results directory), or None."""
    path = os.path.join(run_dir, "summary.json")
    if spec.engine != "sim" or not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    argv = without_checkpoint_flags(spec.launch_argv(run_dir))
    reached = (summary.get("sim") or {}).get("stopped_at_target_s") is not None
    if not same_run(_canonical((summary.get("sim") or {}).get("command") or []), _canonical(argv),
                    summary.get("train_time_s"), reached):
        return None
    summary["command"], summary["wall_s"], summary["resumed"] = argv, summary["sim"]["wall_s"], True
    return summary


class Reusable:
    """Finished simulator runs of other benches' output directories (``--reuse DIR``), each read once: a
    planned run not finished in ``--out`` takes one of them that is the same run (:func:`same_run`: the same
    command wherever it wrote) instead of running again -- the heterogeneity bench's 117x runs are the open
    division's, under other names.

    Raises:
        ConfigError: for a directory without ``runs/``.
    """

    def __init__(self, dirs):
        self.runs = []   # (run directory, canonical command, virtual seconds trained, stopped at the target)
        for d in dirs:
            if not os.path.isdir(os.path.join(d, "runs")):
                raise ConfigError("--reuse %s: no runs/ directory there" % d)
            for path in sorted(glob.glob(os.path.join(d, "runs", "*", "summary.json"))):
                with open(path) as f:
                    summary = json.load(f)
                sim = summary.get("sim") or {}
                if sim.get("command"):
                    self.runs.append((os.path.dirname(path), _canonical(sim["command"]),
                                      summary.get("train_time_s"), sim.get("stopped_at_target_s") is not None))

    def take(self, spec, run_dir):
        """Copy the first run that is ``spec``'s (its JSON files: summary, confirmation, workers) into
        ``run_dir``; returns its summary as :func:`finished_run` gives it (``reused_from``: where it was),
        or None."""
        if spec.engine != "sim":
            return None
        wanted = _canonical(spec.launch_argv(run_dir))
        for path, done, ended_at, reached in self.runs:
            if same_run(done, wanted, ended_at, reached):
                os.makedirs(run_dir, exist_ok=True)
                for name in glob.glob(os.path.join(path, "*.json")):
                    shutil.copy2(name, run_dir)
                summary = finished_run(spec, run_dir)
                if summary is not None:
                    summary["reused_from"] = path
                return summary
        return None


def _canonical(argv):
    return [str(a) for a in runner.canonical(without_checkpoint_flags(argv))]


def experiment_records(out):
    """``{run name: (record, file name)}``: every run the experiment JSONs of ``out`` (``table1.json``, ...)
    record, from the first file that does where several do."""
    recorded = {}
    for name in EXPERIMENTS + (SWEEP,):
        path = os.path.join(out, "%s.json" % name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for rec in json.load(f).get("runs", []):
                if rec.get("key"):
                    recorded.setdefault(rec["key"], (rec, os.path.basename(path)))
    return recorded


def recorded_runs(out, spec_for, keys, confirmed):
    """The runs of ``keys`` whose directory under ``out/runs`` holds no summary but which an earlier
    invocation recorded in an experiment JSON of ``out`` (``table1.json``, ...) with the command ``spec_for``
    gives now: ``{key: record}`` (the record marked ``kept_from``: the file it came from). A bench's run directories are its own; its committed
    experiment JSON is what a fresh clone has of a run whose directory was not committed, and a re-render
    must not drop it, nor a resumed bench run it again. ``confirmed``: keep only records that carry their
    confirmation on the whole test set."""
    recorded = experiment_records(out)
    kept = {}
    for key in keys:
        run_dir = os.path.join(out, "runs", run_name(key))
        found = recorded.get(run_name(key))
        if found is None or os.path.exists(os.path.join(run_dir, "summary.json")):
            continue
        rec, source = found
        if confirmed and not rec.get("confirmation"):
            continue
        spec = spec_for(key)
        if spec.engine == "sim" and same_run(_canonical(rec.get("command") or []),
                                             _canonical(spec.launch_argv(run_dir)), rec.get("train_time_s")):
            kept[key] = dict(rec, resumed=True, kept_from=source)
    return kept


def stamp_provenance(run_dir, summary, spec, code=None):
    """Record in a run just finished where it was made: ``code``, the commit its process started on (see
    :func:`bench.provenance.provenance`; a run resumed from a checkpoint may have made its earlier part on
    others), the date and machine that finished it, its command and seed, in its ``summary.json`` (and in
    ``summary``); nothing where the run wrote no summary file."""
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        written = json.load(f)
    record = provenance(command=spec.launch_argv(run_dir), seeds=[spec.seed], contexts=spec.contexts, code=code)
    summary["provenance"] = written["provenance"] = record
    write_json(path, written)


def execute(keys, spec_for, out, run=run_with_bar, jobs=1, resume=False, confirm_fn=None, name=run_name,
            reuse=None):
    """Run every key once; returns ``(records, failures)``, both keyed by RunKey.

    Args:
        spec_for: ``key -> JobSpec``.
        run: ``(spec, run_dir, desc, position, leave) -> summary``; raises JobFailed.
        jobs: runs at once (each its own process; for the simulator, whose runs
            are independent single processes).
        resume: keep a simulator run already finished with the same command.
        confirm_fn: ``(run_dir, summary) -> confirmation record`` (:func:`bench.confirm.ensure`),
            run after each run on its slot; the record goes into the summary as ``confirmation``.
        name: ``key -> run name`` (its directory under ``out/runs``; default :func:`run_name`).
        reuse: a :class:`Reusable`: a run not finished in ``out`` takes the same run from there.

    Raises:
        ValueError: if ``jobs`` < 1.
    """
    if jobs < 1:
        raise ValueError("jobs must be >= 1, got %r" % (jobs,))
    records, failures = {}, {}
    width = max([len(name(k)) for k in keys] + [1])
    lock = threading.Lock()
    free_rows = list(range(jobs, 0, -1))  # tqdm rows under the overall bar

    with tqdm(total=len(keys), desc="all runs", unit="run", position=0,
              bar_format="{desc} {bar} {n_fmt}/{total_fmt} runs [{elapsed} elapsed, ETA {remaining}]") as overall:
        def one(key):
            spec = spec_for(key)
            run_dir = os.path.join(out, "runs", name(key))
            with lock:
                row = free_rows.pop()
            try:
                summary = finished_run(spec, run_dir) if resume else None
                if summary is None and reuse is not None:
                    summary = reuse.take(spec, run_dir)
                if summary is None:
                    code = provenance_module.git_state()   # what the run's process loads as it starts
                    summary = run(spec, run_dir, name(key).ljust(width), row, False)
                    stamp_provenance(run_dir, summary, spec, code)
                if confirm_fn is not None:
                    summary["confirmation"] = confirm_fn(run_dir, summary)
                with lock:
                    records[key] = (summary, spec, run_dir)
                    ttt = (summary["confirmation"] or {}).get("time_to_target_s") if "confirmation" in summary \
                        else summary["time_to_target_s"]
                    tqdm.write("%s: final accuracy %.4f, time to %.2f%s: %s" % (
                        name(key), summary["final_accuracy"], spec.target_accuracy,
                        " (confirmed on all test images)" if "confirmation" in summary else "",
                        "%.1f s" % ttt if ttt is not None else "not reached"))
            except (JobFailed, OSError, ValueError, KeyError, ConfigError) as exc:
                with lock:
                    failures[key] = "%s: %s" % (type(exc).__name__, exc)
                    tqdm.write("FAILED %s: %s" % (name(key), exc), file=sys.stderr)
            finally:
                with lock:
                    free_rows.append(row)
                    overall.update(1)

        runner.run_each(keys, one, jobs)
    return records, failures


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


@dataclasses.dataclass
class SuiteResult:
    """What :func:`run_suite` produced: the experiment dicts and file paths."""
    experiments: dict
    files: list
    failures: int


def run_suite(experiments, preset, profile, out, models=None, modes=None, budget=None, seed=None,
              command=None, measure=calibrate.measure, run=run_with_bar, log=print, engine=None, jobs=1,
              wall_s=None, resume=False, only=None, seeds=None, confirm_fn=None, checkpoint_every_min=0,
              reuse=()):
    """Calibrate, run the union of the experiments' runs, write JSON, report and figures.

    ``seeds`` (or one ``seed``) replaces the preset's seeds for every model.
    ``confirm_fn``: how a run's time to target is confirmed on the whole test set (default, where the preset
    confirms: :func:`bench.confirm.ensure`; a rebuild passes what was recorded).

    ``engine``: ``cluster`` (real processes) or ``sim`` (virtual time); default the preset's.
    ``jobs``: simulator runs at once, each with one compute thread (:func:`bench.runner.share_cores`).
    ``wall_s``: the bench's wall time to record (default: measured here; a rebuild passes the original's).
    ``resume``: keep simulator runs already finished in ``out`` with the same command, and continue
    those a checkpoint kept (``checkpoint_every_min``: wall minutes between a simulator run's
    checkpoints, 0: none; see docs/bench.md).
    ``only``: run names to keep from the plan (a rebuild keeps the runs the original bench made).
    ``reuse``: other benches' output directories whose finished runs a planned run may be (:class:`Reusable`),
    or whose experiment JSONs record it (:func:`recorded_runs`: a run directory not committed there).
    """
    from . import plots, report

    started = time.monotonic()
    code = provenance_module.git_state()   # the code this bench process runs (the checkout may move on)
    if seeds is None and seed is not None:
        seeds = (seed,)
    if preset.lr_sweep and SWEEP not in experiments:
        preset = sweep_lrs(preset, out)   # the open division: each variant at its best learning rate
    if confirm_fn is None and preset.confirm:
        from . import confirm
        confirm_fn = confirm.ensure
    models = tuple(models or preset.default_models())
    opted_out = [m for m in preset.models if m in preset.opt_in and m not in models]
    budgets = {m: budget or preset.budget_for(m) for m in set(models) | {preset.figure_model}}
    fixed_budget = budget
    budget = budget or preset.time_budget
    engine = engine or preset.engine
    runner.share_cores(jobs, profile.contexts)
    if engine not in ENGINES:
        raise ConfigError("engine must be one of %s, got %r" % (ENGINES, engine))
    check_contexts(profile)
    os.makedirs(out, exist_ok=True)
    needs_figures = any(e != "table1" for e in experiments)
    candidates = list(models if "table1" in experiments else ())
    if SWEEP in experiments and preset.lr_sweep and preset.lr_sweep["model"] not in candidates:
        candidates.append(preset.lr_sweep["model"])
        budgets.setdefault(preset.lr_sweep["model"], fixed_budget or preset.budget_for(preset.lr_sweep["model"]))
    figure_model = preset.figure_model if preset.figure_model in models else models[0]
    if needs_figures and figure_model not in candidates:
        candidates.append(figure_model)
    if engine == "sim" and preset.iteration_s and measure is calibrate.measure:
        measured = measure

        def measure(model, size, batch, context):  # noqa: F811  (the preset's fixed times first)
            fixed = preset.iteration_s.get(model)
            return fixed if fixed is not None else measured(model, size, batch, context)
        log("base iterations from the preset where it fixes them: %s"
            % ", ".join("%s %.3f s" % kv for kv in sorted(preset.iteration_s.items())))
    log("calibrating %d model(s) on profile %s (%d devices)" % (len(candidates), profile.name, len(profile.devices)))
    calibration = {}
    skipped = [{"model": m, "reason": preset.opt_in[m]} for m in opted_out] if "table1" in experiments else []
    for model in candidates:  # one at a time: each model's own budget
        one, not_run = calibrate_models(preset, profile, [model], budgets.get(model, budget), measure=measure,
                                        log=log, engine=engine)
        calibration.update(one)
        skipped += not_run
    if needs_figures and figure_model not in calibration:
        runnable = [m for m in models if m in calibration]
        figure_model = runnable[0] if runnable else None
    table_models = [m for m in models if m in calibration] if "table1" in experiments else []
    planned = plan(experiments, table_models, figure_model, preset, modes, seeds)
    if only is not None:
        planned = {name: [k for k in keys if run_name(k) in only] for name, keys in planned.items()}
    keys = unique_runs(planned)
    others = {m: b for m, b in budgets.items() if b != budget and m in calibration}
    log("%d run(s) of %.0f s training each%s: %s" % (
        len(keys), budget, "".join(" (%s: %.0f s)" % kv for kv in sorted(others.items())),
        ", ".join(run_name(k) for k in keys)))

    def budget_of(key):
        return fixed_budget or preset.budget_of(key.model, key.mode)

    def spec_for(k):
        return job_spec(k, preset, profile, calibration[k.model], budget_of(k), engine=engine,
                        checkpoint_every_min=checkpoint_every_min, resume=resume)
    kept = recorded_runs(out, spec_for, keys, bool(confirm_fn)) if resume else {}
    for directory in reuse:   # a reused bench's runs that it keeps only in its experiment JSON
        rest = [k for k in keys if k not in kept
                and not os.path.exists(os.path.join(out, "runs", run_name(k), "summary.json"))]
        kept.update({k: dict(rec, kept_from=os.path.join(directory, rec["kept_from"]))
                     for k, rec in recorded_runs(directory, spec_for, rest, bool(confirm_fn)).items()})
    if kept:
        log("%d run(s) kept from the experiment JSON of an earlier invocation (their run directories are not "
            "in %s): %s" % (len(kept), out, ", ".join(run_name(k) for k in keys if k in kept)))
    records, failures = execute(
        [k for k in keys if k not in kept], spec_for, out,
        run=run, jobs=jobs, resume=resume, confirm_fn=confirm_fn, reuse=Reusable(reuse) if reuse else None)
    used_seeds = sorted({k.seed for k in keys})

    common = {"engine": engine, "jobs": jobs, "suite_wall_s": wall_s or round(time.monotonic() - started, 1),
              "resumed_runs": sorted([run_name(k) for k, (summary, _, _) in records.items() if summary.get("resumed")]
                                     + [run_name(k) for k in kept]),
              "max_iterations": preset.max_iterations if engine == "sim" else 0, "preset": preset.name,
              "iteration_caps": {m: preset.cap_for(m) for m in sorted(set(models) & set(preset.iteration_caps))}
              if engine == "sim" else {},
              "non_iid_max_iterations": preset.non_iid_max_iterations if engine == "sim" else 0,
              "eval_min_iterations": preset.eval_min_iterations if engine == "sim" else 0,
              "fixed_iterations": sorted(preset.iteration_s) if engine == "sim" else [],
              "command": list(command or sys.argv), "machine": machine_info(profile.contexts),
              "provenance": provenance(command or sys.argv, used_seeds, profile.contexts, code=code),
              "division": preset.division, "seeds": used_seeds, "confirmed": bool(confirm_fn),
              "mode_lrs": dict(preset.mode_lrs), "lrs": {m: preset.lrs.get(m) for m in sorted(calibration)},
              "mode_time_budgets_s": {} if fixed_budget else
              {v: {m: b for m, b in per.items() if m in calibration} for v, per in preset.mode_time_budgets.items()},
              "profile": dict(profile.as_dict(), calibration=calibration), "target_accuracy": preset.target_accuracy,
              "seed": used_seeds[0] if used_seeds else 0, "time_budget_s": budget, "time_budgets_s": others, "batch_size": preset.batch_size, "figure_model": figure_model,
              "skipped": skipped}
    results, files = {}, []
    for name in experiments:
        runs = []
        for k in planned[name]:
            if k in records:
                summary, spec, run_dir = records[k]
                runs.append(dict(record_of(summary, k, spec, calibration[k.model], run_dir, out), key=run_name(k)))
            elif k in kept:
                runs.append(kept[k])
        fails = [{"model": k.model, "mode": k.mode, "dist": k.dist, "run": run_name(k), "error": failures[k]}
                 for k in planned[name] if k in failures]
        result = dict(common, experiment=name, runs=runs, failures=fails)
        result.update(report.derived(name, result))
        if name == SWEEP:
            result["best_lrs"] = best_lrs(result)
        results[name] = result
        path = os.path.join(out, "%s.json" % name)
        write_json(path, result)
        files.append(path)
    files += plots.draw_all(results, out)
    report_path = os.path.join(out, "report.md")
    with open(report_path, "w") as f:
        f.write(report.markdown(results, out))
    files.append(report_path)
    return SuiteResult(results, files, len(failures))
