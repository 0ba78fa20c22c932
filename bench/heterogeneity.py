"""``mxhet-bench heterogeneity``: ESync, recommended and as the paper has it, against every alternative a
user has, at three degrees of heterogeneity, in the simulator (issue 31).

Models x profiles x variants x data splits x seeds on the open division's settings (``paper-sim-open`` in
:mod:`bench.presets`): plain SGD, batch 64, every run to a common budget of ``OPEN_EPOCHS`` passes of one
fast device over the training set (no stop at the target), each variant at its best learning rate from the
open division's sweep (``--sweep``; the preset's 0.1 where no sweep is committed), times to target confirmed
on all 10,000 test images (:mod:`bench.confirm`), means and 95% intervals over seeds (:mod:`bench.stats`).
The runs go through :func:`bench.suite.execute` (``--jobs``, ``--resume``, checkpoints, progress bars).
With ``--lrs``, each variant instead runs at its own best rate in each cell: the first seed at every rate of
the list, the other seeds at the best (:func:`sweep_of`, the open division's rule).

Profiles, named by their largest slowdown:

* ``117``: the paper's testbed, 2 devices at 117x beside 4 at 1x (the ``paper-sim`` profile);
* ``10``: 2 at 10x beside 2 at 1x (the ``cpu`` profile);
* ``2``: a mild mix, 2 at 2x beside 2 at 1x (the ``cpu`` profile's shape, so that 10 and 2 differ only in
  the slowdown).

Variants (:data:`VARIANTS`): ESync ``recommended`` (:data:`bench.presets.RECOMMENDED_ARGS`), ``paper``
(no options) and ``needed`` (the recommended flags and :data:`bench.presets.NEEDED_ARGS`, a candidate
for them); the alternatives (:data:`ALTERNATIVES`) ``standalone`` (the fastest device alone),
``fast-only`` (Sync over the slowdown-1 devices), ``async``, ``dcasgd``, ``adsp``, ``dylu`` and ``sync``
(Sync over every device of the profile, each round as long as the slowest device's iteration).

A run that uses no slow device (standalone, fast-only) is the same run in every profile with as many fast
devices: it runs once and is listed under each profile it serves (``shared_by``). A standalone device holds
all the data, so its i.i.d. run serves the non-i.i.d. cells too; a fast-only run's label-sorted split is
over its own devices, so together they hold every label. Both move the slow devices' data to the fast
ones. Every other variant, ``sync`` included, splits the data over all the profile's devices, so that in
a non-i.i.d. cell the fast devices hold only their shards' labels: ``sync`` is the Sync of issue 31's
non-i.i.d. goal (ESync ahead of Sync and Async there), the baseline that leaves each device's data where
it is.

With ``--norm group`` every run of the invocation, every variant's, trains with GroupNorm in place of
BatchNorm; its runs and cells are the model's ``_gn`` label's (:func:`bench.aggregation.model_label`), apart
from the BatchNorm ones, which keep their names.

Snapshots lie on one grid for every variant: every half fast iteration or 10% of the time so far, whichever
is longer, at least 20 real iterations apart. The preset's grid follows the slowest device (6.7 virtual s
at 117x against the standalone run's 0.06 s), which would give the variants' times to target different
resolutions.

Output in ``--out``: ``heterogeneity.json`` (``recommended_args``, each variant's ``lrs``, every run with its
``profile`` and ``variant``; runs recorded by earlier invocations are kept unless run again),
``heterogeneity.md``, ``heterogeneity.png`` and the runs in ``runs/`` (snapshots and checkpoints removed
once the run is confirmed, unless ``--keep-snapshots``: about 2 GB per ResNet-18 run).
"""
import collections
import dataclasses
import json
import math
import os
import shlex
import shutil
import sys
import time

from mxhet.errors import ConfigError

from . import aggregation, presets, profiles, report, runner, stats
from .confirm import recorded as recorded_confirmation   # (--report-only)
from .experiment import comma_list
from .provenance import ROOT, provenance
from .runner import not_run   # (--report-only)

PRESET = "paper-sim-open"
PROFILES = {
    117: profiles.BUILTIN["paper-sim"],
    10: profiles.BUILTIN["cpu"],
    2: profiles.Profile("mild", tuple([profiles.Device("cpu", 2.0, "slow")] * 2
                                      + [profiles.Device("cpu", 1.0, "fast")] * 2)),
}
"""The profiles, keyed by their largest slowdown (what every run's ``profile`` records)."""
VARIANTS = {
    "recommended": ("esync", presets.RECOMMENDED_ARGS),
    "paper": ("esync", ()),
    "standalone": (presets.STANDALONE, ()),
    "fast-only": (presets.FAST_SYNC, ()),
    "async": ("async", ()),
    "dcasgd": ("dcasgd", ()),
    "adsp": ("adsp", ()),
    "dylu": ("dylu", ()),
    "sync": ("sync", ()),
    "needed": ("esync", presets.RECOMMENDED_ARGS + presets.NEEDED_ARGS),
    "normalized": ("esync", presets.NORMALIZED_ARGS),
}
"""variant -> (what :func:`bench.suite.job_spec` runs, extra flags of ``python -m mxhet.sim``). The order is
the report's and the figure's (colours by position): a new variant goes last."""
ALTERNATIVES = ("standalone", "fast-only", "async", "dcasgd", "adsp", "dylu", "sync")
"""What a user could run instead of ESync; the best of them in a cell is what the recommended ESync must beat."""
ESYNC_VARIANTS = ("recommended", "paper", "needed", "normalized")
CANDIDATE_VARIANTS = ("needed", "normalized")
"""ESync options measured for the recommended configuration: run only when ``--variants`` names them."""
DEFAULT_VARIANTS = tuple(v for v in VARIANTS if v not in CANDIDATE_VARIANTS)
NO_SLOW_DEVICE = ("standalone", "fast-only")
NON_IID_RIVALS = ("sync", "async")
"""Issue 31's goal on label-skewed data: 0.80 ahead of these, which leave each device's data where it is (the best
alternative of such a cell may be standalone or fast-only, which move the slow devices' data)."""
SNAPSHOT_SHARE = presets.PRESETS[PRESET].eval_base_share
"""Snapshots every this share of a fast device's iteration (or the preset's growth, whichever is longer)."""
DEFAULT_SWEEP = os.path.join(ROOT, "bench", "results", PRESET)
"""Where the open division's committed sweep (``sweep.json``) is looked for by default."""
DEFAULT_OUT = os.path.join("bench", "results", "heterogeneity")
DEFAULT_COSTS = os.path.join(ROOT, "bench", "results", "paper-sim", "estimate.json")
"""Per-model CPU costs of an iteration, a snapshot and a run's fixed part (``mxhet-bench estimate``)."""
TARGET = presets.PRESETS[PRESET].target_accuracy


class RunKey(collections.namedtuple("RunKey", "model profile variant dist seed lr norm", defaults=(None, "batch"))):
    """One run; ``mode`` and ``lr`` are what :func:`bench.suite.job_spec` and ``record_of`` read. ``lr``
    None: the variant's default rate (the preset's for its mode, the sweep's where one is committed).
    ``norm``: ``batch`` (the model's own BatchNorm) or ``group`` (``--norm group``: GroupNorm in its place)."""
    __slots__ = ()

    @property
    def mode(self):
        return VARIANTS[self.variant][0]

    @property
    def label(self):
        """The model's name in run names, rows and cells: ``resnet18_v1_gn`` with GroupNorm."""
        return aggregation.model_label(self.model, self.norm)


def label_of(row):
    """The model label of a JSON row (a row recorded before ``--norm`` existed is a BatchNorm run)."""
    return aggregation.model_label(row["model"], row.get("norm", "batch"))


def fast_devices(profile_key):
    """How many devices of the profile have its smallest slowdown."""
    slowdowns = PROFILES[profile_key].slowdowns
    return slowdowns.count(min(slowdowns))


def run_name(key):
    """``model-117x-variant-dist`` (``model-117x-sync-dist``: Sync over every device); a run without slow
    devices is named by what it runs (``model-standalone-iid``, ``model-fast-only4-iid``); ``-lrX`` for a
    rate other than the variant's default, ``-seedN`` for seeds other than 0 (a run at the default rate
    keeps the name it had before ``--lrs``, so that ``--resume`` keeps it). ``model`` is the key's label:
    ``resnet18_v1_gn`` with GroupNorm, the model's name (as before ``--norm``) with BatchNorm."""
    if key.variant == "standalone":
        where = "standalone"
    elif key.variant == "fast-only":
        where = "fast-only%d" % fast_devices(key.profile)
    else:
        where = "%dx-%s" % (key.profile, key.variant)
    return "%s-%s-%s%s%s" % (key.label, where, key.dist, "-lr%g" % key.lr if key.lr is not None else "",
                             "-seed%d" % key.seed if key.seed else "")


def plan(models, profile_keys, variants, dists, seeds, lrs=None, default_lr=None, norm="batch"):
    """``{run name: (RunKey, [profiles it serves])}`` in running order: seed by seed (the first seed of
    everything first), then model, data split, profile, variant and rate. ``lrs``: every variant at each of
    these rates (None: at its default); ``default_lr``: ``(model, variant) -> rate``, the default (a key at
    it has ``lr`` None); ``norm``: every run's (so that the variants compare on the same network)."""
    out = {}
    for seed in seeds:
        for model in models:
            for dist in dists:
                for p in profile_keys:
                    for variant in variants:
                        for lr in lrs or [None]:
                            if lr is not None and lr == default_lr(model, variant):
                                lr = None
                            key = RunKey(model, p, variant, "iid" if variant == "standalone" else dist, seed, lr,
                                         norm)
                            name = run_name(key)
                            if name not in out:
                                out[name] = (key, [p])
                            elif p not in out[name][1]:
                                out[name][1].append(p)
    return out


def model_record(preset, model):
    """``{"base_iteration_s", "input_size"}`` of ``model``: the preset's fixed virtual iteration and input
    size; the small CNN's from bench/aggregation.py (0.05 s at 28 px), for smoke runs.

    Raises:
        ConfigError: for a model with neither.
    """
    if model in preset.iteration_s:
        return {"base_iteration_s": preset.iteration_s[model], "input_size": preset.input_sizes[model]}
    if model in aggregation.BASE_ITER_S:
        return {"base_iteration_s": aggregation.BASE_ITER_S[model],
                "input_size": aggregation.MODELS[model]["input_size"]}
    raise ConfigError("unknown model %r; known: %s" % (model, ", ".join(known_models(preset))))


def known_models(preset):
    return tuple(preset.iteration_s) + tuple(m for m in aggregation.BASE_ITER_S if m not in preset.iteration_s)


def check_models(preset, models, norm):
    """Refuse a model the bench has no iteration time for, or ``norm`` group for a model without BatchNorm
    layers (alexnet, smallcnn): as ``python -m mxhet.sim --norm group`` refuses it, and a no-op would give
    the BatchNorm runs again under a ``_gn`` name.

    Raises:
        ConfigError: naming the model.
    """
    for model in models:
        model_record(preset, model)
    aggregation.check_norms(models, norm)


def job_spec(key, preset, budget=None, checkpoint_every_min=0.0, resume=False):
    """The :class:`bench.runner.JobSpec` of one run: :func:`bench.suite.job_spec`'s on the key's profile,
    with the key's ``--norm`` and the variant's flags and the common snapshot grid. ``budget``: virtual
    seconds of training (default: the preset's common budget for the model, for every variant: the ``sync``
    variant too, not the preset's 20-fold Sync budget, so that every variant's final accuracy is at the same
    time). A GroupNorm model keeps the BatchNorm model's virtual iteration, budget and learning rates."""
    from . import suite   # imports MXNet: not at the bench parser's import
    extra = VARIANTS[key.variant][1]
    record = model_record(preset, key.model)
    spec = suite.job_spec(key, preset, PROFILES[key.profile], record,
                          budget or preset.budget_for(key.model), engine="sim",
                          checkpoint_every_min=checkpoint_every_min, resume=resume)
    return dataclasses.replace(spec, extra_train_args=tuple(spec.extra_train_args) + aggregation.norm_args(key.norm)
                               + tuple(extra))


def learning_rates(preset, sweep):
    """``(preset, source)``: ``preset`` with each variant's best rate from ``sweep/sweep.json`` and that
    file's path, or ``preset`` unchanged and None when ``sweep`` is None or (the default directory) holds no
    sweep.

    Raises:
        ConfigError: when a directory named explicitly holds no sweep of this preset.
    """
    from . import suite
    if sweep is None:
        return preset, None
    if sweep == DEFAULT_SWEEP and not os.path.exists(os.path.join(sweep, "sweep.json")):
        return preset, None
    return suite.sweep_lrs(preset, sweep), os.path.join(sweep, "sweep.json")


def confirm_and_trim(keep_snapshots=False, ensure=None):
    """``(run_dir, summary) -> confirmation``: :func:`bench.confirm.ensure`, then the run's snapshots and
    checkpoint removed (scored and confirmed; a ResNet-18 run's snapshots take about 2 GB)."""
    if ensure is None:
        from .confirm import ensure

    def confirm_fn(run_dir, summary):
        record = ensure(run_dir, summary)
        if not keep_snapshots:
            for sub in ("snapshots", "checkpoint"):
                shutil.rmtree(os.path.join(run_dir, sub), ignore_errors=True)
        return record
    return confirm_fn


def predict(planned, preset, costs, budget=None):
    """CPU seconds of each planned run on an idle core, at its whole budget, by :mod:`bench.estimate`'s
    model (every device computing all the time, Sync one iteration per device a round; the snapshots on
    this bench's grid; the confirmations) from per-model ``costs`` (``estimate.json``'s); a model without
    costs is left out. Returns ``[{"run", "profiles", "iterations", "snapshots", "cpu_s"}]``."""
    from . import estimate
    rows = []
    for name, (key, profs) in planned.items():
        cost = costs.get(key.model)
        if cost is None:
            continue
        spec = job_spec(key, preset, budget)
        base = model_record(preset, key.model)["base_iteration_s"]
        rate = estimate.iterations_per_s(spec.mode, spec.slowdowns, base)
        iterations = int(rate * spec.time_budget)
        snapshots = estimate.snapshot_count(preset, (1.0,), rate, spec.time_budget, base)   # the fast grid
        cpu = (iterations * cost["iteration_cpu_s"] + cost["fixed_cpu_s"]
               + (max(0, snapshots - cost["fixed_snapshots"])
                  + estimate.CANDIDATES * estimate.CONFIRM_SNAPSHOTS) * cost["snapshot_cpu_s"])
        rows.append({"run": name, "profiles": profs, "iterations": iterations, "snapshots": snapshots,
                     "cpu_s": cpu})
    return rows


# -- results --------------------------------------------------------------------------------------------

def rows_of(records, served, preset, out, stamp):
    """The JSON records of finished runs (``records``: :func:`bench.suite.execute`'s), one per profile a run
    serves, with ``run``, ``profile``, ``variant``, ``shared_by`` and ``recorded`` (commit and date of the
    invocation that recorded it)."""
    from . import suite
    rows = []
    for key, (summary, spec, run_dir) in records.items():
        name = run_name(key)
        base = suite.record_of(summary, key, spec, model_record(preset, key.model), run_dir, out)
        base.update(run=name, variant=key.variant, mode=spec.mode, extra_args=list(VARIANTS[key.variant][1]),
                    norm=key.norm, recorded=stamp)
        for p in served[name]:
            rows.append(dict(base, profile=p, shared_by=sorted(served[name]) if len(served[name]) > 1 else []))
    return rows


def merge(old_rows, new_rows):
    """``old_rows`` with each ``(run, profile)`` of ``new_rows`` replaced or added, less the old rows of a
    variant run with other flags than its current ones (a superseded candidate); a run kept from an
    earlier invocation with the same command (``resumed``) keeps the stamp and the wall seconds (the whole
    job's, not only the simulator's) of the one that made it."""
    # a row of a variant whose flags have changed since (a new recommended candidate) measured something
    # else: it would stand in the report for the variant as it is now
    by = {(r["run"], r["profile"]): r for r in old_rows
          if r["variant"] not in VARIANTS or r.get("extra_args", []) == list(VARIANTS[r["variant"]][1])}
    for r in new_rows:
        before = by.get((r["run"], r["profile"]))
        if before and r.get("resumed") and before.get("command") == r.get("command") and before.get("recorded"):
            r = dict(r, recorded=before["recorded"], wall_s=before.get("wall_s", r.get("wall_s")))
        by[(r["run"], r["profile"])] = r
    return sorted(by.values(), key=lambda r: (label_of(r), r["dist"], -r["profile"], list(VARIANTS).index(r["variant"])
                                              if r["variant"] in VARIANTS else 99, r.get("seed", 0),
                                              r.get("lr") or 0.0))


def variant_runs(rows, model, profile, dist, variant):
    """Every run of one variant in one cell (``model``: a label, :func:`label_of`), at every rate (the
    standalone device's i.i.d. runs serve every split)."""
    return [r for r in rows if label_of(r) == model and r["profile"] == profile and r["variant"] == variant
            and (r["dist"] == dist or variant == "standalone")]


def sweep_of(runs):
    """The learning-rate sweep of one variant in one cell, or None where its runs have one rate only:
    ``{"seed", "lrs": {rate: {"run", "time_to_target_s", "final_accuracy"}}, "best_lr"}``, from the runs of
    the seed that has the most rates (the first seed of ``--lrs``; the lowest of a tie), the best rate by
    the open division's rule (:func:`bench.suite.best_lrs`: the shortest confirmed time to the target, else
    the highest final accuracy; of equal ones the lowest rate)."""
    from . import suite
    by_seed = {}
    for r in runs:
        by_seed.setdefault(r.get("seed", 0), {})[r.get("lr")] = r
    if not by_seed or max(len(at) for at in by_seed.values()) < 2:
        return None
    seed = min(by_seed, key=lambda s: (-len(by_seed[s]), s))
    at = sorted(by_seed[seed].items(), key=lambda kv: (kv[0] is None, kv[0] or 0.0))   # a tie: the lowest
    best = suite.best_lrs({"runs": [dict(r, variant="v", mode="v") for _, r in at]})["v"]
    return {"seed": seed, "best_lr": best,
            "lrs": {"%g" % lr if lr is not None else "unknown": {
                "run": r["run"], "time_to_target_s": r["time_to_target_s"], "final_accuracy": r["final_accuracy"]}
                for lr, r in at}}


def cell_runs(rows, model, profile, dist, variant):
    """The runs of one variant in one cell at its best rate (:func:`sweep_of`; all of them where they have
    one rate only): what the cell's tables, verdict and figure use."""
    runs = variant_runs(rows, model, profile, dist, variant)
    sweep = sweep_of(runs)
    return runs if sweep is None else [r for r in runs if r.get("lr") == sweep["best_lr"]]


def best_alternative(rows, model, profile, dist):
    """The cell's best alternative, or None without one: :func:`bench.report.best_alternative` over
    :data:`ALTERNATIVES` where one reached the target on all its seeds; otherwise the one with the highest
    mean final accuracy (the training times of runs that all went on to the budget rank nothing)."""
    mine = [dict(r, dist=dist, model=model) for v in ALTERNATIVES for r in cell_runs(rows, model, profile, dist, v)]
    by = {}
    for r in mine:
        by.setdefault(r["variant"], []).append(r)
    if not any(all(r["time_to_target_s"] is not None for r in runs) for runs in by.values()):
        return max(by, key=lambda v: sum(r["final_accuracy"] for r in by[v]) / len(by[v]), default=None)
    return report.best_alternative(mine, model, dist, exclude=ESYNC_VARIANTS)


def verdict(recommended, best):
    """Whether the recommended ESync reaches the target no later than the best alternative, from their runs.

    Returns:
        ``{"no_later", "speedup", "late_by_s", "accuracy_gap", "text"}``: ``no_later`` True, False or None
        (undecided: censored runs on both sides or a bound that does not settle it, or a side missing);
        ``speedup`` :func:`bench.stats.speedup` of recommended over the best alternative; ``late_by_s`` the
        difference of mean times (censored runs at their training time) where it is later; ``accuracy_gap``
        recommended's mean final accuracy minus the best alternative's, ``accuracy_gap_interval`` its 95%
        Welch interval (None where a side has one seed).
    """
    out = {"no_later": None, "speedup": None, "late_by_s": None, "accuracy_gap": None, "accuracy_gap_interval": None}
    if not recommended or not best:
        return dict(out, text="not yet measured" if not recommended else "no alternative measured")
    sp = report.speedup_over(recommended, best)
    mine, theirs = (stats.time_to_target([r["time_to_target_s"] for r in runs], [r["train_time_s"] for r in runs])
                    for runs in (recommended, best))
    finals = [[r["final_accuracy"] for r in runs] for runs in (recommended, best)]
    acc = [stats.mean_interval(f)["mean"] for f in finals]
    low, high = stats.welch_interval(*finals)
    out.update(speedup=sp, accuracy_gap=acc[0] - acc[1],
               accuracy_gap_interval=None if low is None else [low, high])
    kind, value = sp["kind"], sp["value"]
    if kind == "measured" or (kind == "lower_bound" and value >= 1) or (kind == "upper_bound" and value < 1):
        out["no_later"] = value >= 1
    if out["no_later"] is False and mine["mean"] is not None and theirs["mean"] is not None:
        out["late_by_s"] = mine["mean"] - theirs["mean"]
    if kind == "unknown":
        text = "undecided: neither reached %.2f on every seed" % TARGET
    elif out["no_later"] is None:
        text = "undecided: %s (censored runs)" % stats.format_speedup(sp)
    elif out["no_later"]:
        text = "**no later**: %s as fast%s" % (stats.format_speedup(sp), _significance(sp, 1))
    else:
        text = "**later** by %s: %s as fast%s" % (
            "%.1f s" % out["late_by_s"] if out["late_by_s"] is not None else "an unknown time",
            stats.format_speedup(sp), _significance(sp, -1))
    # a final accuracy at a constant rate is one draw from a model that still moves: a gap is a gap only
    # beyond its interval over seeds (Welch's, the difference of means)
    if low is None:
        gap = "%+.3f (%.3f vs %.3f; no interval: a side has one seed)" % (out["accuracy_gap"], acc[0], acc[1])
    else:
        gap = "%+.3f [%+.3f, %+.3f] (%.3f vs %.3f; %s)" % (
            out["accuracy_gap"], low, high, acc[0], acc[1],
            "within the 95% interval" if low <= 0 <= high else "the 95% interval excludes 0")
    text += "; final accuracy %s" % gap
    return dict(out, text=text)


def capacity_bound(profile_key):
    """How much faster than Sync over the fast devices alone a job can be that also uses the slow ones'
    capacity, at the same cost per sample: the profile's total throughput over its fast devices'
    (sum of 1/slowdown over the devices, over the number of fastest ones): 1.1 at 10x (10, 10, 1, 1), 1.004
    at 117x, 1.5 at 2x."""
    slowdowns = PROFILES[profile_key].slowdowns
    fastest = min(slowdowns)
    return sum(fastest / s for s in slowdowns) / fast_devices(profile_key)


def capacity(recommended, fast_only, profile_key):
    """Recommended ESync against Sync over the fast devices only: ``speedup`` (:func:`bench.report.speedup_over`),
    the ``bound`` (:func:`capacity_bound`) and ``of_bound``, the measured speedup over the bound (None
    without both runs). Above 1 the gain is more than the slow devices' capacity: it also comes from
    exchanging less often than Sync's every step."""
    bound = capacity_bound(profile_key)
    if not recommended or not fast_only:
        return {"bound": bound, "speedup": None, "of_bound": None}
    sp = report.speedup_over(recommended, fast_only)
    return {"bound": bound, "speedup": sp,
            "of_bound": sp["value"] / bound if sp["kind"] == "measured" and sp["value"] is not None else None}


def _significance(sp, sign):
    if sp["low"] is None:
        return " (no interval: a side has one seed)"
    if (sign > 0 and sp["low"] > 1) or (sign < 0 and sp["high"] < 1):
        return " (the 95% interval excludes 1)"
    return " (within the 95% interval)"


def cells(rows):
    """Every (model label, profile, split) with runs: each variant's :func:`bench.report.cell` at its best
    rate with its ``sweep`` (:func:`sweep_of`) and ``best_lr``, the best alternative and the
    :func:`verdict`. A cell's ``model`` is the label (:func:`label_of`: a GroupNorm model's cell apart from
    its BatchNorm one) and ``norm`` its runs' normalization."""
    out = []
    # a cell is where some variant uses the slow devices: a standalone run serves the non-i.i.d. cells of
    # its model without making an i.i.d. one of its own
    keys = {(label_of(r), r.get("norm", "batch"), r["profile"], r["dist"])
            for r in rows if r["variant"] not in NO_SLOW_DEVICE}
    for model, norm, profile, dist in sorted(keys, key=lambda k: (k[0], k[3], -k[2])):
        variants = {}
        for v in VARIANTS:
            runs = cell_runs(rows, model, profile, dist, v)
            if runs:
                sweep = sweep_of(variant_runs(rows, model, profile, dist, v))
                lrs = {r.get("lr") for r in runs}
                variants[v] = dict(report.cell(runs), sweep=sweep,
                                   best_lr=sweep["best_lr"] if sweep else lrs.pop() if len(lrs) == 1 else None)
        best = best_alternative(rows, model, profile, dist)
        recommended = cell_runs(rows, model, profile, dist, "recommended")
        cell = {"model": model, "norm": norm, "profile": profile, "dist": dist, "variants": variants,
                "best_alternative": best,
                "capacity": capacity(recommended, cell_runs(rows, model, profile, dist, "fast-only"), profile),
                "verdict": verdict(recommended, cell_runs(rows, model, profile, dist, best) if best else [])}
        if dist != "iid":
            cell["goal"] = {v: verdict(recommended, cell_runs(rows, model, profile, dist, v)) for v in NON_IID_RIVALS}
        out.append(cell)
    return out


WHY_FILE = "why.json"
"""In the bench's output directory: ``{"<model> <profile>x <dist>": {"why": text, "evidence": [paths]}}``, written
by hand from the runs that explain a cell where the recommended ESync loses; the report prints it under the cell."""


def load_why(out):
    """The explanations of ``out``'s :data:`WHY_FILE` (none where there is no file).

    Raises:
        ValueError: the file is not an object of ``{"why": str, "evidence": [str]}`` entries.
    """
    path = os.path.join(out, WHY_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        why = json.load(f)
    if not isinstance(why, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("why"), str) and isinstance(e.get("evidence", []), list)
            for e in why.values()):
        raise ValueError("%s: expected {\"<model> <profile>x <dist>\": {\"why\": text, \"evidence\": [paths]}}"
                         % path)
    return why


def cell_key(cell):
    """A cell's key in :data:`WHY_FILE`, e.g. ``resnet18_v1_gn 10x non-iid``."""
    return "%s %dx %s" % (cell["model"], cell["profile"], cell["dist"])


def loses(cell):
    """True where the recommended ESync loses the cell: later than the best alternative (or than a rival of
    the label-skewed goal), or lower in final accuracy beyond the 95% interval."""
    verdicts = [cell["verdict"]] + list((cell.get("goal") or {}).values())
    if any(v.get("no_later") is False for v in verdicts):
        return True
    return any(v.get("accuracy_gap_interval") is not None and v["accuracy_gap_interval"][1] < 0 for v in verdicts)


def why_line(cell, why):
    """The report's sentence on why the recommended ESync loses ``cell`` (None where it does not lose)."""
    if not loses(cell):
        return None
    entry = why.get(cell_key(cell))
    if entry is None:
        return "Why it loses: not yet analysed (no entry `%s` in %s)." % (cell_key(cell), WHY_FILE)
    evidence = ", ".join("[%s](%s)" % (e, os.path.relpath(e, DEFAULT_OUT)) for e in entry.get("evidence", ()))
    return "Why it loses: %s%s" % (entry["why"], " (the runs: %s)" % evidence if evidence else "")


def goal_line(cell):
    """Issue 31's goal for a label-skewed cell, one sentence: the recommended ESync against each of
    :data:`NON_IID_RIVALS` (the cell's ``goal``), or None for an i.i.d. cell."""
    if not cell.get("goal"):
        return None
    return ("Issue 31's goal on label-skewed data (%.2f ahead of %s, which leave each device's data in place): "
            % (TARGET, " and ".join("`%s`" % v for v in NON_IID_RIVALS))
            + "; ".join("against `%s`: %s" % (v, cell["goal"][v]["text"]) for v in NON_IID_RIVALS) + ".")


def _interval(summary, fmt):
    return stats.format_interval(summary, fmt) if summary.get("n") else "—"


def _sweep_table(c):
    """The cell's learning-rate sweep (variant x rate: time to target and final accuracy of the sweep's
    seed, the best rate in bold), or nothing where no variant has one."""
    swept = {v: cell["sweep"] for v, cell in c["variants"].items() if cell.get("sweep")}
    if not swept:
        return []
    rates = sorted({float(lr) for sw in swept.values() for lr in sw["lrs"]})
    lines = ["Learning-rate sweep (seed %s; time to %.2f in virtual s, else not reached, and final accuracy; "
             "the best rate in bold, the one the table below uses):" % (
                 ",".join(map(str, sorted({sw["seed"] for sw in swept.values()}))), TARGET), "",
             "| variant | %s |" % " | ".join("lr %g" % lr for lr in rates), "|---|%s" % ("---|" * len(rates))]
    for v, sw in swept.items():
        row = []
        for lr in rates:
            at = sw["lrs"].get("%g" % lr)
            text = "—" if at is None else "%s, %.3f" % (
                "%.1f s" % at["time_to_target_s"] if at["time_to_target_s"] is not None else "not reached",
                at["final_accuracy"])
            row.append("**%s**" % text if at is not None and lr == sw["best_lr"] else text)
        lines.append("| %s | %s |" % (v, " | ".join(row)))
    return lines + [""]


NON_IID_NOTE = (
    "In a non-iid cell every variant but standalone and fast-only splits the training set, sorted by label, "
    "over all the profile's devices, so the fast devices hold only their shards' labels; standalone is its "
    "i.i.d. run (one device with all the data) and fast-only sorts the whole set over the fast devices alone, "
    "so both assume the slow devices' data can move to the fast ones. `sync` (Sync over every device) is the "
    "Sync baseline that leaves each device's data in place.")
"""The report's paragraph on what a non-i.i.d. cell compares (only in a report with such a cell)."""


def markdown(doc):
    """The report: settings, then per model, profile and split each variant's time to target and final
    accuracy over seeds and the verdict against the best alternative, the figure, costs and failures."""
    prov = doc["provenance"]
    lines = ["# mxhet-bench heterogeneity", "",
             "ESync with the recommended flags (`%s`) and as the paper has it (`--sync esync`, no options) "
             "against what a user could run instead, at three degrees of heterogeneity, in the simulator "
             "(virtual seconds). Issue 31." % " ".join(doc["recommended_args"]), "",
             "Provenance: commit `%s`%s, %s, seeds %s. Command: `%s`." % (
                 (prov["commit"] or "unknown")[:12], " (with uncommitted changes)" if prov["dirty"] else "",
                 prov["date"], ", ".join(map(str, prov["seeds"])) or "—",
                 " ".join(shlex.quote(a) for a in prov["command"])), "",
             "Machine: %s, %s cores, MXNet %s, Python %s." % (
                 prov["machine"]["cpu"], prov["machine"]["cores"], prov["machine"]["mxnet"],
                 prov["machine"]["python"]), "", "Profiles (slowdown per device; the fastest device's "
             "iteration is the model's fixed virtual base iteration):", ""]
    for p in doc["profiles"]:
        lines.append("- **%dx** (`%s`): %s" % (p["profile"], p["name"], ", ".join(
            "%g" % d["slowdown"] for d in p["devices"])))
    lines += ["", "Settings: the open division's (`%s`): batch %d, plain SGD, every run to its budget (%s), "
              "snapshots on one grid for every variant (every %.1f fast iteration or 10%% of the time so far, "
              "whichever is longer, at least 20 real iterations apart), i.i.d. split unless the cell says "
              "non-iid. Learning rates: %s." % (
                  doc["preset"], doc["batch_size"], ", ".join("%s %.0f s" % kv for kv in
                                                             sorted(doc["budgets_s"].items())),
                  SNAPSHOT_SHARE, doc["lr_source"]), ""]
    if any(c.get("norm", "batch") != "batch" for c in doc["cells"]):
        lines += ["A model named `_gn` (e.g. `resnet18_v1_gn`) has GroupNorm layers in place of its BatchNorm "
                  "ones (`--norm group`) in every variant of its cells, standalone and fast-only included; it "
                  "keeps the BatchNorm model's virtual iteration, budget and learning rates.", ""]
    lines += ["Time to %.2f: the first snapshot that holds on all 10,000 test images (bench/confirm.py), mean "
              "over seeds with a 95%% Student-t interval; a seed that never reached it counts at its training "
              "time and makes the mean a lower bound (`>`, with how many reached). Final accuracy: the model at "
              "the budget on all test images. The best alternative is the variant of %s that reached the "
              "target on all its seeds soonest (geometric mean), or, where none did, the one with the highest "
              "final accuracy; speedups are ratios of geometric means with "
              "Welch's interval on log times (bench/stats.py). A run without slow devices (standalone, "
              "fast-only) is one run listed under every profile with as many fast devices. A run may train "
              "past its budget: the simulator ends it once the round or push under way is done (column "
              "`trained`)." % (
                  TARGET, ", ".join(ALTERNATIVES)), ""]
    if any(c["dist"] != "iid" for c in doc["cells"]):
        lines += [NON_IID_NOTE, ""]
    lrs = doc["lrs"]
    for c in doc["cells"]:
        lines += ["## %s, %dx, %s" % (c["model"], c["profile"], c["dist"]), ""]
        lines += _sweep_table(c)
        lines += ["| variant | lr | seeds | reached | time to %.2f (virtual s) | confirmed | final accuracy | "
                  "trained (virtual s) | wall s per run |" % TARGET, "|---|---|---|---|---|---|---|---|---|"]
        for v, cell in c["variants"].items():
            runs = cell_runs(doc["runs"], c["model"], c["profile"], c["dist"], v)
            walls = [r["wall_s"] for r in runs if r.get("wall_s") is not None]
            lines.append("| %s%s | %s | %s | %d/%d | %s | %s | %s | %.1f | %s |" % (
                v, " (best alternative)" if v == c["best_alternative"] else "",
                "%g" % cell["best_lr"] if cell.get("best_lr") is not None else
                "%g" % lrs[c["model"]][v] if v in lrs.get(c["model"], {}) else "—",
                ",".join(map(str, cell["seeds"])), cell["time_to_target"]["reached"] or 0, len(cell["seeds"]),
                _interval(cell["time_to_target"], "%.1f"), "yes" if cell["confirmed"] else "no",
                _interval(cell["final_accuracy"], "%.3f"), cell["train_time_s"]["mean"],
                "%.0f" % (sum(walls) / len(walls)) if walls else "—"))
        lines += ["", "Recommended against the best alternative (%s): %s" % (
            c["best_alternative"] or "none", c["verdict"]["text"]), ""]
        goal = goal_line(c)
        if goal:
            lines += [goal, ""]
        why = why_line(c, doc.get("why") or {})
        if why:
            lines += [why, ""]
        lines += [_capacity_line(c), ""]
    if doc.get("figure"):
        lines += ["## Time to %.2f against the degree of heterogeneity" % TARGET, "",
                  "One panel per model and split, one line per variant: the mean over seeds with its 95% "
                  "interval; hollow circle: not every seed reached the target (a lower bound); hollow "
                  "triangle: none did (at the training time).", "",
                  "![time to target](%s)" % doc["figure"], ""]
    lines += ["## Failed or unfinished runs (this invocation)", ""]
    lines += ["- `%s`: %s" % (f["run"], f["error"].splitlines()[0][:300]) for f in doc["failures"]] or ["None."]
    return "\n".join(lines) + "\n"


def _capacity_line(cell):
    """The slow devices' capacity: recommended ESync against Sync over the fast devices only, and the bound."""
    cap = cell.get("capacity") or {"bound": capacity_bound(cell["profile"]), "speedup": None}
    head = ("Against Sync over the fast devices only: all devices together have %.3gx the fast ones' throughput, "
            "the bound on the speedup at the same cost per sample" % cap["bound"])
    sp = cap["speedup"]
    if sp is None:
        return head + "; not measured (a side has no run)."
    text = "%s; measured %s%s" % (head, stats.format_speedup(sp), _significance(sp, 1))
    if cap.get("of_bound") is not None:
        text += ", %.2f of the bound%s" % (
            cap["of_bound"], " (beyond it: the gain also comes from exchanging less often than Sync's every step)"
            if cap["of_bound"] > 1 else "")
    return text + "."


def write(out, doc):
    """Write ``heterogeneity.json``, the figure and ``heterogeneity.md`` into ``out``."""
    from . import plots, suite
    figure = plots.heterogeneity(doc, os.path.join(out, "heterogeneity.png"))
    doc["figure"] = os.path.basename(figure) if figure else None
    suite.write_json(os.path.join(out, "heterogeneity.json"), doc)
    with open(os.path.join(out, "heterogeneity.md"), "w") as f:
        f.write(markdown(doc))


# -- the bench ------------------------------------------------------------------------------------------

def run_bench(models, profile_keys, variants, dists, seeds, out, seeds_best=False, jobs=1, resume=True,
              budget=None, sweep=DEFAULT_SWEEP, command=None, run=runner.run_with_bar, confirm_fn=None,
              checkpoint_every_min=10.0, keep_snapshots=False, lrs=None, norm="batch", reuse=(), log=print):
    """Run the bench and write its results; returns the JSON document.

    ``lrs``: the first seed runs every variant at each of these rates; each variant's best in each cell
    (:func:`sweep_of`) is the one its other seeds run at and the cell's tables use (None: every variant at
    its default rate). ``seeds_best``: every variant on the first seed, then the other seeds for the
    recommended ESync and each cell's best alternative (at each alternative's best rate) only. ``budget``:
    virtual seconds per run (default: the preset's per model). ``confirm_fn``: as
    :func:`bench.suite.execute`'s (default :func:`confirm_and_trim`). ``norm``: every run's (``group``:
    the runs and cells are the model's ``_gn`` label's). ``reuse``: other benches' output directories
    whose finished runs a planned run may be (:class:`bench.suite.Reusable`).

    Raises:
        ConfigError: for an unknown model, a sweep directory without a sweep, ``norm`` group for a model
            without BatchNorm layers.
    """
    from . import suite
    preset, lr_path = learning_rates(presets.get(PRESET), sweep)
    check_models(preset, models, norm)
    seeds = list(dict.fromkeys(seeds))
    confirm_fn = confirm_fn or confirm_and_trim(keep_snapshots)
    os.makedirs(out, exist_ok=True)
    runner.share_cores(jobs, ["cpu"])
    path = os.path.join(out, "heterogeneity.json")
    rows = json.load(open(path))["runs"] if os.path.exists(path) else []
    commit = provenance(command)
    stamp = {"commit": commit["commit"], "dirty": commit["dirty"], "date": commit["date"]}
    failures = []
    reusable = suite.Reusable(reuse) if reuse else None

    def go(planned):
        keys = [key for key, _ in planned.values()]
        log("%d run(s): %s" % (len(keys), ", ".join(planned)))
        served = {name: profs for name, (_, profs) in planned.items()}
        records, failed = suite.execute(
            keys, lambda k: job_spec(k, preset, budget, checkpoint_every_min, resume), out, run=run, jobs=jobs,
            resume=resume, confirm_fn=confirm_fn, name=run_name, reuse=reusable)
        # --report-only: a run an earlier invocation recorded (its row is kept by merge) is not unfinished, even
        # where its directory was never committed
        recorded = {r["run"] for r in rows} if run is runner.not_run else set()
        failures.extend({"run": run_name(k), "error": e} for k, e in failed.items() if run_name(k) not in recorded)
        return merge(rows, rows_of(records, served, preset, out, stamp))

    def default_lr(model, variant):
        return preset.lr_for(model, VARIANTS[variant][0])

    full = plan(models, profile_keys, variants, dists, seeds, norm=norm)
    if lrs or (seeds_best and len(seeds) > 1):
        rows = go(plan(models, profile_keys, variants, dists, seeds[:1], lrs, default_lr, norm) if lrs else
                  {n: kp for n, kp in full.items() if kp[0].seed == seeds[0]})
        wanted = {(model, p, dist, v) for model in models for p in profile_keys for dist in dists
                  for v in ("recommended", best_alternative(rows, aggregation.model_label(model, norm), p, dist))}

        def chosen(key, profs):   # a standalone run serves the non-i.i.d. cells too
            cell_dists = dists if key.variant == "standalone" else [key.dist]
            return not seeds_best or any((key.model, p, d, key.variant) in wanted
                                         for p in profs for d in cell_dists)

        def at_best(key, profs):   # a run serving several profiles has the same rows, so one best, in each
            runs = variant_runs(rows, key.label, profs[0], key.dist, key.variant)
            sweep = sweep_of(runs)
            # a variant whose first seed ran at one rate only (one rate in --lrs, or the others not run yet)
            # has no sweep, but that rate is still the one its other seeds run at
            first = {r.get("lr") for r in runs if r.get("seed", 0) == seeds[0]}
            best = (sweep["best_lr"] if sweep else first.pop() if len(first) == 1 else None) if lrs else None
            return key._replace(lr=None if best is None or best == default_lr(key.model, key.variant) else best)
        later = [(at_best(k, profs), profs) for k, profs in full.values()
                 if k.seed != seeds[0] and chosen(k, profs)]
        if later:
            rows = go({run_name(k): (k, profs) for k, profs in later})
    else:
        rows = go(full)
    lr_list = lrs
    labels = {label_of(r): r["model"] for r in rows}   # per label: a GroupNorm model runs at its model's rates
    lrs = {m: {v: preset.lr_for(labels[m], VARIANTS[v][0]) for v in VARIANTS} for m in sorted(labels)}
    doc = {"experiment": "heterogeneity", "preset": PRESET, "division": preset.division,
           "provenance": provenance(command, {r.get("seed", 0) for r in rows}),
           "recommended_args": list(presets.RECOMMENDED_ARGS),
           "variants": {v: {"mode": m, "args": list(a)} for v, (m, a) in VARIANTS.items()},
           "alternatives": list(ALTERNATIVES),
           "profiles": [dict(PROFILES[p].as_dict(), profile=p) for p in sorted(PROFILES, reverse=True)],
           "lrs": lrs, "lr_source": ("each variant's best from %s (the recommended and the paper's ESync: "
                                     "ESync's)" % os.path.relpath(lr_path, ROOT) if lr_path else
                                     "the %s preset's %s for every variant (no sweep committed: `mxhet-bench "
                                     "sweep --preset %s`)" % (PRESET, ", ".join(sorted(
                                         {"%g" % x for per in lrs.values() for x in per.values()})), PRESET))
           + ("; with --lrs %s, each variant in each cell at its best of these (the first seed's sweep: "
              "the shortest confirmed time to %.2f, else the highest final accuracy)" % (
                  ",".join("%g" % x for x in lr_list), TARGET) if lr_list else ""),
           "lr_sweep": list(lr_list) if lr_list else None,
           "budgets_s": {m: budget or preset.budget_for(labels[m]) for m in sorted(labels)}, "norm": norm,
           "batch_size": preset.batch_size, "target_accuracy": TARGET, "snapshot_share": SNAPSHOT_SHARE,
           "runs": rows, "failures": failures}
    doc["cells"] = cells(rows)
    doc["why"] = load_why(out)
    write(out, doc)
    return doc


def add_parser(sub):
    p = sub.add_parser("heterogeneity", help="ESync (recommended, paper) vs standalone, fast-only Sync, Async, "
                                             "DC-ASGD, ADSP, DyLU and Sync at 117x, 10x and 2x (simulator)")
    preset = presets.get(PRESET)
    p.add_argument("--models", default=",".join(preset.default_models()),
                   help="comma-separated models (default %(default)s; smallcnn for a smoke run)")
    p.add_argument("--profiles", default="117,10,2", help="of 117, 10, 2: the largest slowdown of the profile "
                                                        "(default %(default)s)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help="of %s (default %%(default)s: all but the candidates %s)"
                        % (", ".join(VARIANTS), ", ".join(CANDIDATE_VARIANTS)))
    p.add_argument("--dists", default="iid", help="iid, non-iid or both (default %(default)s)")
    p.add_argument("--norm", choices=sorted(aggregation.NORM_SUFFIX), default="batch",
                   help="every run's normalization layers (group: GroupNorm for BatchNorm, for every variant; the "
                        "runs and cells are named MODEL_gn; only models with BatchNorm; default %(default)s)")
    p.add_argument("--seeds", default=",".join(map(str, preset.seeds)), help="default %(default)s")
    p.add_argument("--seeds-best", action="store_true",
                   help="every variant on the first seed; the other seeds only for recommended and each cell's "
                        "best alternative")
    p.add_argument("--budget", type=float, default=None,
                   help="virtual seconds of training per run (default: the open division's, %d passes of one "
                        "fast device)" % presets.OPEN_EPOCHS)
    p.add_argument("--sweep", default=DEFAULT_SWEEP,
                   help="directory of the open division's sweep.json (each variant's learning rate; 'none': the "
                        "preset's; default %(default)s where it exists)")
    p.add_argument("--lrs", default=None,
                   help="comma-separated learning rates: the first seed runs every variant at each, the other "
                        "seeds each variant at its best in each cell (the sweep's rule: shortest confirmed time "
                        "to the target, else highest final accuracy); default: each variant at its one rate")
    p.add_argument("--jobs", type=int, default=1, help="simulator runs at once (default %(default)s)")
    p.add_argument("--resume", nargs="?", const="on", default="on", choices=("on", "off"),
                   help="keep runs finished in --out with the same command and continue checkpointed ones "
                        "(default %(default)s)")
    p.add_argument("--checkpoint-every-min", type=float, default=10.0,
                   help="wall minutes between a run's checkpoints (0: none; default %(default)s)")
    p.add_argument("--keep-snapshots", action="store_true", help="keep each run's snapshots once confirmed")
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default %(default)s)")
    p.add_argument("--report-only", action="store_true",
                   help="run and score nothing: write the JSON, report and figure from the runs finished and "
                        "confirmed in --out (the others are listed as not finished)")
    p.add_argument("--reuse", action="append", default=[], metavar="DIR",
                   help="another bench's output directory (e.g. the open division's): a run not finished in "
                        "--out that is one of its finished runs (the same command) is copied from there instead "
                        "of run again; repeatable")
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs with their predicted CPU cost (from --costs) and stop")
    p.add_argument("--costs", default=DEFAULT_COSTS,
                   help="per-model CPU costs measured by `mxhet-bench estimate` (default %(default)s)")
    return p


def parse_lrs(text):
    """The learning rates of ``--lrs``: comma-separated positive finite numbers, in order, without repeats.

    Raises:
        ConfigError: naming ``--lrs`` and the bad text (empty, not a number, not positive and finite).
    """
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = None
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError("--lrs %r: a comma-separated list of positive finite learning rates" % (text,))
    return list(dict.fromkeys(values))


def dry_run(planned, preset, costs_path, budget, jobs):
    """Print every planned run's command-line name, the profiles it serves and its predicted CPU cost (a
    GroupNorm run's from its model's costs, measured with BatchNorm: GroupNorm's iterations cost more)."""
    from . import estimate
    with open(costs_path) as f:
        costs = json.load(f)["costs"]
    rows = {r["run"]: r for r in predict(planned, preset, costs, budget)}
    for name, (key, profs) in planned.items():
        r = rows.get(name)
        print("%-44s profiles %-10s %s" % (name, ",".join(map(str, profs)), "%6d iterations %3d snapshots "
              "%6.1f CPU min" % (r["iterations"], r["snapshots"], r["cpu_s"] / 60) if r else "no measured cost"))
    total = sum(r["cpu_s"] for r in rows.values())
    span, _ = estimate.makespan([r["cpu_s"] for r in rows.values()], jobs)
    print("%d run(s): %.1f CPU h on an idle machine, %.1f h at --jobs %d (a loaded machine takes longer)%s"
          % (len(planned), total / 3600, span / 3600, jobs,
             "; GroupNorm runs at the BatchNorm model's costs, an underestimate (docs/bench.md)" if any(
                 key.norm != "batch" for key, _ in planned.values()) else ""))
    rate = estimate.cpu_rate()
    if rate:
        print("at the CPU rate of the divisions' finished runs (%.2fx their prediction, %s): about %.1f CPU h"
              % (rate, os.path.relpath(estimate.CALIBRATED, ROOT), total * rate / 3600))


def run(args):
    preset = presets.get(PRESET)
    models = comma_list(args.models, "models", known_models(preset))
    profile_keys = comma_list(args.profiles, "profiles", tuple(PROFILES), int)
    variants = comma_list(args.variants, "variants", tuple(VARIANTS))
    dists = comma_list(args.dists, "dists", ("iid", "non-iid"))
    seeds = comma_list(args.seeds, "seeds", range(0, 2 ** 31), int)
    if args.jobs < 1 or (args.budget is not None and not args.budget > 0) or not args.checkpoint_every_min >= 0:
        raise ConfigError("--jobs must be >= 1, --budget > 0 and --checkpoint-every-min >= 0; got %r, %r and %r"
                          % (args.jobs, args.budget, args.checkpoint_every_min))
    lrs = parse_lrs(args.lrs) if args.lrs is not None else None
    if args.dry_run:
        check_models(preset, models, args.norm)
        preset, _ = learning_rates(preset, None if args.sweep == "none" else args.sweep)
        if lrs:
            dry_run(plan(models, profile_keys, variants, dists, seeds[:1], lrs,
                         lambda model, variant: preset.lr_for(model, VARIANTS[variant][0]), args.norm), preset,
                    args.costs, args.budget, args.jobs)
            if len(seeds) > 1:
                print("not listed: seeds %s, each variant at its best rate in each cell, which the sweep above "
                      "chooses%s" % (",".join(map(str, seeds[1:])), " (the recommended ESync and each cell's "
                                     "best alternative only)" if args.seeds_best else ""))
            return 0
        dry_run(plan(models, profile_keys, variants, dists, seeds[:1] if args.seeds_best else seeds,
                     norm=args.norm), preset, args.costs, args.budget, args.jobs)
        return 0
    started = time.monotonic()
    doc = run_bench(models, profile_keys, variants, dists, seeds, args.out, seeds_best=args.seeds_best,
                    jobs=args.jobs, resume=args.resume == "on" or args.report_only, budget=args.budget,
                    sweep=None if args.sweep == "none" else args.sweep,
                    command=["mxhet-bench"] + list(getattr(args, "argv", None) or sys.argv[1:]),
                    checkpoint_every_min=args.checkpoint_every_min, keep_snapshots=args.keep_snapshots, lrs=lrs,
                    norm=args.norm, reuse=args.reuse,
                    **(dict(run=not_run, confirm_fn=recorded_confirmation) if args.report_only else {}))
    print(markdown(doc))
    print("wrote %s (%.0f min)" % (os.path.join(args.out, "heterogeneity.md"), (time.monotonic() - started) / 60),
          file=sys.stderr)
    return 1 if doc["failures"] and not args.report_only else 0
