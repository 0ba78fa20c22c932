"""Numbers derived from the runs (speedups, ratios) and the Markdown report.

Nothing is extrapolated: a speedup is measured when both modes reached the
target, a lower bound (``> x``) when only ESync did -- Sync's whole training
time over ESync's time to target -- an upper bound (``< x``) when only Sync
did, and absent when neither did.
"""
import math
import os

from . import presets, stats


def variant_of(run):
    """The run's Table 1 variant (``sync-fast`` runs as ``sync``; older runs have no ``variant``)."""
    return run.get("variant", run["mode"])


def _find(runs, model, mode, dist="iid"):
    for r in runs:
        if r["model"] == model and variant_of(r) == mode and r["dist"] == dist:
            return r
    return None


def _find_all(runs, model, variant, dist="iid"):
    return [r for r in runs if r["model"] == model and variant_of(r) == variant and r["dist"] == dist]


def cell(runs):
    """One variant of one model over its seeds: time to target (censored runs counted, see
    :mod:`bench.stats`), final accuracy, and whether every time was confirmed on the whole test set."""
    return {"seeds": sorted(r.get("seed", 0) for r in runs),
            "confirmed": bool(runs) and all(r.get("confirmation") is not None for r in runs),
            "time_to_target": stats.time_to_target([r["time_to_target_s"] for r in runs],
                                                   [r["train_time_s"] for r in runs]),
            "final_accuracy": stats.mean_interval([r["final_accuracy"] for r in runs]),
            "train_time_s": stats.mean_interval([r["train_time_s"] for r in runs])}


def speedup_over(fast_runs, slow_runs):
    """:func:`bench.stats.speedup` of ``fast_runs`` over ``slow_runs`` (lists of run records)."""
    return stats.speedup([r["time_to_target_s"] for r in slow_runs], [r["train_time_s"] for r in slow_runs],
                         [r["time_to_target_s"] for r in fast_runs], [r["train_time_s"] for r in fast_runs])


def _log_mean_time(runs):
    """Geometric mean of the runs' times to target, a censored run at its training time."""
    times = [r["time_to_target_s"] if r["time_to_target_s"] is not None else r["train_time_s"] for r in runs]
    return math.exp(sum(math.log(max(t, 1e-9)) for t in times) / len(times))


def best_alternative(runs, model, dist="iid", exclude=("esync",)):
    """The variant a user would pick instead of ESync for ``model``: of every variant with runs on ``dist``
    but those in ``exclude``, the one that reached the target on all its seeds in the shortest (geometric)
    mean time; if none reached it on every seed, the one with the shortest mean time counting censored runs
    at their training time (None when there is no other variant)."""
    candidates = []
    for variant in dict.fromkeys(variant_of(r) for r in runs if r["model"] == model and r["dist"] == dist):
        if variant in exclude:
            continue
        mine = _find_all(runs, model, variant, dist)
        all_reached = all(r["time_to_target_s"] is not None for r in mine)
        candidates.append(((not all_reached, _log_mean_time(mine)), variant))
    return min(candidates)[1] if candidates else None


def speedup(fast, slow):
    """``(value, kind)`` of ``fast`` over ``slow`` in time to target.

    kind is ``measured``, ``lower_bound``, ``upper_bound`` or ``not_reached``
    (value None), or ``missing`` when a run is absent.
    """
    if fast is None or slow is None:
        return None, "missing"
    tf, ts = fast["time_to_target_s"], slow["time_to_target_s"]
    if tf is not None and ts is not None:
        return ts / max(tf, 1e-9), "measured"
    if tf is not None:
        return slow["train_time_s"] / max(tf, 1e-9), "lower_bound"
    if ts is not None:
        return ts / fast["train_time_s"], "upper_bound"
    return None, "not_reached"


#: A hand-written reading of the results, linked from the report when it lies
#: in the output directory or the one above it (``bench/results/discussion.md``).
DISCUSSION = "discussion.md"


def format_speedup(value, kind):
    if value is None:
        return "neither reached" if kind == "not_reached" else "—"
    return {"measured": "%.1f×", "lower_bound": "> %.1f×", "upper_bound": "< %.1f×"}[kind] % value


def _ratio(a, b):
    return a / b if a is not None and b else None


def derived(name, result):
    """Extra keys of an experiment's JSON computed from its runs."""
    runs = result["runs"]
    if name == "table1":
        rows = []
        for model in dict.fromkeys(r["model"] for r in runs):
            es, sy, sa = _find(runs, model, "esync"), _find(runs, model, "sync"), _find(runs, model, "local")
            value, kind = speedup(es, sy)
            row = {"model": model, "speedup": value, "speedup_kind": kind,
                   "esync_time_to_target_s": es and es["time_to_target_s"],
                   "sync_time_to_target_s": sy and sy["time_to_target_s"],
                   "esync_accuracy": es and es["final_accuracy"],
                   "sync_accuracy": sy and sy["final_accuracy"],
                   "standalone_accuracy": sa and sa["final_accuracy"],
                   "paper": presets.PAPER_TABLE1.get(model)}
            row.update(seed_statistics(runs, model))
            rows.append(row)
        return {"rows": rows}
    if name == "throughput":
        model = result["figure_model"]
        es, sy, asy = (_find(runs, model, m) for m in ("esync", "sync", "async"))
        return {"ratios": {
            "samples_esync_over_sync": _ratio(es and es["samples_per_s"], sy and sy["samples_per_s"]),
            "samples_esync_over_async": _ratio(es and es["samples_per_s"], asy and asy["samples_per_s"]),
            "bytes_async_over_esync": _ratio(asy and asy["bytes_per_s"], es and es["bytes_per_s"]),
            "paper": presets.PAPER_FIG4}}
    if name == "curves":
        model = result["figure_model"]
        out = {}
        for dist in ("iid", "non-iid"):
            value, kind = speedup(_find(runs, model, "esync", dist), _find(runs, model, "sync", dist))
            out[dist] = {"esync_over_sync": value, "kind": kind}
        return {"speedups": out}
    return {}


def seed_statistics(runs, model):
    """Table 1's statistics over seeds for ``model``: every variant's :func:`cell`, ESync's speedup over
    Sync and over the best alternative (:func:`best_alternative`) with their intervals, and the variants
    ESync loses to (its speedup over them below 1: ``significant`` where the interval's upper end is too;
    and on final accuracy, where its mean is lower: ``significant`` where Welch's 95% interval of the
    difference, ``difference``, lies below 0)."""
    esync = _find_all(runs, model, "esync")
    variants = list(dict.fromkeys(variant_of(r) for r in runs if r["model"] == model and r["dist"] == "iid"))
    cells = {v: cell(_find_all(runs, model, v)) for v in variants}
    best = best_alternative(runs, model)
    over_sync = speedup_over(esync, _find_all(runs, model, "sync"))
    over_best = speedup_over(esync, _find_all(runs, model, best)) if best else dict(
        stats.speedup([], [], [], []))
    loses = []
    for v in variants:
        if v == "esync" or not esync:
            continue
        sp = speedup_over(esync, _find_all(runs, model, v))
        if sp["value"] is not None and sp["value"] < 1 and sp["kind"] in ("measured", "upper_bound"):
            loses.append({"variant": v, "on": "time to target", "speedup": sp,
                          "significant": sp["high"] is not None and sp["high"] < 1})
        mine, theirs = cells["esync"]["final_accuracy"], cells[v]["final_accuracy"]
        if mine["mean"] is not None and theirs["mean"] is not None and mine["mean"] < theirs["mean"]:
            # Welch's interval of the difference, as the heterogeneity bench and bench.claims judge it
            # (two overlapping 95% intervals can still hold a difference beyond its own interval)
            low, high = stats.welch_interval([r["final_accuracy"] for r in esync],
                                             [r["final_accuracy"] for r in _find_all(runs, model, v)])
            loses.append({"variant": v, "on": "final accuracy", "esync": mine["mean"], "other": theirs["mean"],
                          "difference": [low, high], "significant": high is not None and high < 0})
    return {"variants": cells, "speedup_over_sync": over_sync, "best_alternative": best,
            "speedup_over_best": over_best, "esync_loses_to": loses,
            "seeds": sorted({r.get("seed", 0) for r in runs if r["model"] == model})}


def _acc(x):
    return "%.3f" % x if x is not None else "—"


def _t(x):
    return "%.0f s" % x if x is not None else "not reached"


def _table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


ENGINE_TEXT = {
    "cluster": "cluster** (real PS-LITE scheduler, servers, State Server and worker processes on this machine; "
               "times in seconds of wall clock)",
    "sim": "sim** (python -m mxhet.sim: the same policies, State Server and server updaters, real training, "
           "iteration and transfer times from the profile; times in virtual seconds)",
}


def _evaluation_line(result):
    """How every run was scored (the protocol is the same for every mode)."""
    evals = [r["evaluation"] for r in result["runs"] if r.get("evaluation")]
    if not evals:
        return "Evaluation: the snapshots' own BatchNorm statistics (runs made before precise BN)."
    precise = [e for e in evals if e["batchnorm"] == "precise"]
    text = ("Evaluation, the same for every mode, after training and off its clock: curve points on %d test "
            "images, the final point on %d" % (evals[0]["curve_samples"], evals[0]["final_samples"]))
    if precise:
        text += ("; models with BatchNorm have the statistics of every snapshot recomputed on %d fixed "
                 "training batches of %d images (precise BN) first"
                 % (precise[0]["bn_batches"], precise[0]["bn_batch_size"]))
    return text + "."


def _stopping_line(result):
    """How runs end, and what the whole bench cost in wall time."""
    text = []
    if result.get("engine") == "sim" and any(r.get("stopped_at_cap_s") is not None or r["time_to_target_s"]
                                             and r["train_time_s"] < r.get("time_budget_s", result["time_budget_s"])
                                             for r in result["runs"]):
        text.append("Each run stops at the first snapshot that reaches the target, at the budget in virtual "
                    "time, or once its devices ran %d real iterations in all (a compute cap), whichever "
                    "comes first%s." % (result.get("max_iterations", 0), "".join(
                        "; %s's cap is %d" % (m, c) for m, c in sorted((result.get("iteration_caps") or {}).items()))
                        + ("; a non-i.i.d. run's cap is %d" % result["non_iid_max_iterations"]
                           if result.get("non_iid_max_iterations") else ""))
                    if result.get("max_iterations") else
                    "Each run stops at the first snapshot that reaches the target, or at the budget.")
    if result.get("eval_min_iterations"):
        text.append("A snapshot waits until the devices ran %d real iterations since the last one, so that "
                    "scoring does not outweigh training where iterations are few." % result["eval_min_iterations"])
    resumed = result.get("resumed_runs") or []
    if _ran_none(result):
        text.append("Every run was kept from earlier benches (`--resume`); this invocation ran none and only "
                    "wrote the results.")
    elif result.get("suite_wall_s"):
        text.append("The whole bench took %.0f min of wall time (%d run(s) at once)."
                    % (result["suite_wall_s"] / 60.0, result.get("jobs", 1)))
        if resumed:
            text.append("It went on from a stopped bench, keeping %d finished run(s) (%s)."
                        % (len(result["resumed_runs"]), ", ".join(result["resumed_runs"])))
    walls = [r.get("wall_s") for r in result["runs"]]
    if walls and all(w is not None for w in walls):
        text.append("This experiment's runs took %.0f min of wall time in all, one after the other."
                    % (sum(walls) / 60.0))
    return " ".join(text)


def _header(result):
    m, p = result["machine"], result["profile"]
    devices = ", ".join("%s ×%g" % (d["context"], d["slowdown"]) for d in p["devices"])
    engine = result.get("engine", "cluster")
    prov = result.get("provenance")
    division = {"closed": "Division: **closed** (the paper's hyperparameters: lr %s, batch %d, plain SGD).",
                "open": "Division: **open** (each variant at its best learning rate from the sweep: %s; "
                        "batch %d, plain SGD)."}.get(result.get("division"))
    lines = ["Engine: **%s" % ENGINE_TEXT[engine], ""]
    if division:
        lrs = (", ".join("%s %g" % kv for kv in sorted(result.get("mode_lrs", {}).items()))
               if result["division"] == "open" else
               ", ".join(sorted({"%g" % v for v in (result.get("lrs") or {}).values() if v is not None})))
        lines += [division % (lrs or "see the runs", result["batch_size"]), ""]
    if prov:
        lines += ["Provenance: commit `%s`%s, %s, seeds %s." % (
            (prov["commit"] or "unknown")[:12], " (with uncommitted changes)" if prov["dirty"] else "",
            prov["date"], ", ".join(map(str, prov["seeds"])) or "—"), ""]
    lines += ["Command: `%s`" % " ".join(os.path.basename(a) if i == 0 else a
                                        for i, a in enumerate(result["command"])),
             "",
             "Machine%s: %s, %s cores, %d GPU(s), MXNet %s, Python %s." % (
                 " (that wrote these results; it ran none of the runs)" if _ran_none(result) else "",
                 m["cpu"], m["cores"], m["gpus"], m["mxnet"], m["python"]),
             "",
             "Profile `%s` (%d devices, slowdown per device): %s. Batch %d, plain SGD, seed(s) %s, %.0f s of "
             "training per run%s, target accuracy %.2f." % (
                 p["name"], len(p["devices"]), devices, result["batch_size"],
                 ", ".join(map(str, result.get("seeds") or [result["seed"]])),
                 result["time_budget_s"], "".join(" (%s: %.0f s)" % kv
                                                  for kv in sorted((result.get("time_budgets_s") or {}).items())),
                 result["target_accuracy"]),
             "", _evaluation_line(result),
             "", _stopping_line(result),
             "", "Calibration (one iteration on one core or device; base iteration T: a device of slowdown f "
             "runs an iteration in f × T)%s:" % (
                 "; the preset fixes the times of %s, measured once on an idle bench machine (not this run's), "
                 "so that virtual times do not depend on the load when a bench starts"
                 % ", ".join(result["fixed_iterations"])
                 if result.get("fixed_iterations") else ""), ""]
    rows = []
    for model, c in p["calibration"].items():
        rows.append([model, c["input_size"], ", ".join("%.3f s on %s" % (t, ctx) for ctx, t in
                                                       sorted(c["seconds_per_iteration"].items())),
                     "%.3f s" % c["base_iteration_s"], "%.0f" % c["fast_iterations_in_budget"]])
    lines.append(_table(["model", "input px", "measured per iteration", "T", "fast-device iterations per run"],
                        rows))
    if result["skipped"]:
        lines += ["", "Skipped models:", ""]
        lines += ["- `%s`: %s" % (s["model"], s["reason"]) for s in result["skipped"]]
    return "\n".join(lines)


def _table1(result):
    rows = []
    for r in result["rows"]:
        paper = r["paper"] or {}
        rows.append([paper.get("name", r["model"]), format_speedup(r["speedup"], r["speedup_kind"]),
                     "%g×" % paper["speedup"] if paper else "—",
                     _t(r["esync_time_to_target_s"]), _t(r["sync_time_to_target_s"]),
                     _acc(r["esync_accuracy"]), _acc(r["standalone_accuracy"]), _acc(r["sync_accuracy"]),
                     _acc(paper.get("esync")), _acc(paper.get("standalone"))])
    for s in result["skipped"]:
        paper = presets.PAPER_TABLE1.get(s["model"], {})
        rows.append([paper.get("name", s["model"]), "skipped", "%g×" % paper["speedup"] if paper else "—",
                     "", "", "", "", "", _acc(paper.get("esync")), _acc(paper.get("standalone"))])
    return _table(["Model", "Speedup (ours)", "Speedup (paper)", "ESync to %.1f" % result["target_accuracy"],
                   "Sync to %.1f" % result["target_accuracy"], "ESync acc (ours)", "Standalone acc (ours)",
                   "Sync acc (ours)", "ESync acc (paper)", "Standalone acc (paper)"], rows)


VARIANT_NAMES = {"esync": "ESync", "sync": "Sync", "local": "standalone (fastest device)",
                 "sync-fast": "Sync, fast devices only", "async": "Async", "dcasgd": "DC-ASGD", "adsp": "ADSP",
                 "localsgd": "local SGD", "ssp": "SSP"}


def _seconds(summary):
    return stats.format_interval(summary, "%.0f", " s")


def _accuracy(summary):
    return stats.format_interval(summary, "%.3f") if summary["n"] else "not yet measured"


def _losses(row):
    if not row["esync_loses_to"]:
        return "nowhere measured"
    def certainty(x):
        if x["significant"]:
            return ""
        high = x["speedup"]["high"] if "speedup" in x else (x.get("difference") or [None, None])[1]
        return " (no interval: a side has one seed)" if high is None else " (within the 95% interval)"

    return "; ".join("%s on %s%s" % (VARIANT_NAMES.get(x["variant"], x["variant"]), x["on"], certainty(x))
                     for x in row["esync_loses_to"])


def _table1_seeds(result):
    """Table 1 over seeds: ESync's time to target and speedups with 95% intervals, the best alternative,
    converged accuracies and where ESync loses; then every variant's cell."""
    head = ["Model", "seeds", "ESync to %.1f" % result["target_accuracy"], "vs Sync", "best alternative",
            "vs best alternative", "ESync acc", "standalone acc", "Sync (fast only) acc", "ESync loses to"]
    rows, cells = [], []
    for r in result["rows"]:
        paper = r["paper"] or {}
        v = r["variants"]
        missing = {"n": 0}
        rows.append([paper.get("name", r["model"]), ",".join(map(str, r["seeds"])),
                     _seconds(v["esync"]["time_to_target"]) if "esync" in v else "not yet measured",
                     stats.format_speedup(r["speedup_over_sync"]),
                     VARIANT_NAMES.get(r["best_alternative"], r["best_alternative"] or "—"),
                     stats.format_speedup(r["speedup_over_best"]),
                     _accuracy(v.get("esync", {}).get("final_accuracy", missing)),
                     _accuracy(v.get("local", {}).get("final_accuracy", missing)),
                     _accuracy(v.get("sync-fast", {}).get("final_accuracy", missing)), _losses(r)])
        for variant, c in v.items():
            cells.append([paper.get("name", r["model"]), VARIANT_NAMES.get(variant, variant),
                          ",".join(map(str, c["seeds"])), "%d/%d" % (c["time_to_target"]["reached"] or 0,
                                                                     len(c["seeds"])),
                          _seconds(c["time_to_target"]), _accuracy(c["final_accuracy"]),
                          "%.0f s" % c["train_time_s"]["mean"], "yes" if c["confirmed"] else "no"])
    return (_table(head, rows) + "\n\n" +
            _table(["Model", "variant", "seeds", "reached", "time to %.1f (mean [95%% interval])"
                    % result["target_accuracy"], "final accuracy (all test images)", "budget",
                    "confirmed on all test images"], cells))


def _runs_table(result):
    rows = []
    for r in result["runs"]:
        reached = _t(r["time_to_target_s"])
        if r.get("confirmation") and r["time_to_target_s"] != r.get("curve_time_to_target_s"):
            reached += " (1,000-image curve: %s)" % _t(r.get("curve_time_to_target_s"))
        if r["time_to_target_s"] is None and r.get("stopped_at_cap_s") is not None:
            reached = "not reached (compute cap at %.0f s)" % r["stopped_at_cap_s"]
        rows.append([r["model"], variant_of(r), r["dist"], r.get("seed", 0), reached, _acc(r["final_accuracy"]),
                     "%.0f" % r["samples_per_s"], "%.2f" % (r["bytes_per_s"] / 1e6),
                     " ".join("%.2f" % x for x in r["compute_ratio"]),
                     " ".join("%.1f" % x for x in r["local_iters_mean"])])
    return _table(["model", "mode", "data", "seed", "time to %.1f" % result["target_accuracy"], "final acc",
                   "samples/s", "MB/s", "compute ratio per device", "local iterations per round"], rows)


def _ran_none(result):
    """True when the invocation only wrote the results of runs kept from earlier benches."""
    resumed = result.get("resumed_runs") or []
    return bool(resumed) and len(resumed) >= len(result["runs"])


def _failures(results):
    lines = []
    for name, result in results.items():
        for f in result["failures"]:
            run = f.get("run") or "%s-%s-%s" % (f["model"], f["mode"], f["dist"])   # (JSONs before the name)
            lines.append("- %s: `%s` failed: %s" % (name, run, f["error"].splitlines()[0][:300]))
    return lines


def markdown(results, out_dir):
    """The Markdown report of one ``mxhet-bench`` invocation."""
    first = next(iter(results.values()))
    lines = ["# mxhet-bench: preset `%s`" % first["preset"], "", _header(first), ""]
    if "table1" in results and len(results["table1"].get("seeds") or [0]) > 1:
        lines += ["## Table 1: ESync against Sync and against the best alternative, over seeds", "",
                  "Times to target: the first snapshot whose accuracy reaches the target on all test images "
                  "(candidates from the curve, confirmed in order), mean over seeds with a 95% Student-t "
                  "interval; a seed that never reached it counts at its training time and makes the mean a "
                  "lower bound (`>`, with how many reached). Speedups: ratio of geometric mean times, with "
                  "Welch's 95% interval on log times (see bench/stats.py). The best alternative is the "
                  "variant other than ESync that reached the target fastest. Accuracies: the final model on "
                  "all test images, at the common budget.", "",
                  _table1_seeds(results["table1"]), ""]
    elif "table1" in results:
        lines += ["## Table 1: speedup of ESync over Sync and final accuracy", "",
                  "Speedup: Sync's time to the target over ESync's. `> x` means Sync did not reach the target "
                  "within its run, and x is its whole training time over ESync's time (a lower bound).", "",
                  _table1(results["table1"]), ""]
        if os.path.exists(os.path.join(out_dir, "table1.png")):
            lines += ["![Table 1](table1.png)", ""]
    from . import claims   # (here, not at the top: claims imports this module)
    lines += claims.markdown(claims.paper_claims(results))
    if "curves" in results:
        r = results["curves"]
        sp = r["speedups"]
        lines += ["## Figure 3: test accuracy over time (%s)" % r["figure_model"], "",
                  "ESync over Sync to %.1f: i.i.d. %s, non-i.i.d. %s (paper, ResNet, i.i.d.: about 7×)." % (
                      r["target_accuracy"], format_speedup(sp["iid"]["esync_over_sync"], sp["iid"]["kind"]),
                      format_speedup(sp["non-iid"]["esync_over_sync"], sp["non-iid"]["kind"])), ""]
        if os.path.exists(os.path.join(out_dir, "fig3-curves.png")):
            lines += ["![Figure 3](fig3-curves.png)", ""]
    if "throughput" in results:
        r = results["throughput"]
        q = r["ratios"]
        fmt = lambda x: "%.1f×" % x if x is not None else "—"  # noqa: E731
        lines += ["## Figure 4: samples and bytes per second (%s)" % r["figure_model"], "",
                  _table(["ratio", "ours", "paper"], [
                      ["ESync / Sync samples per second", fmt(q["samples_esync_over_sync"]),
                       "%g×" % q["paper"]["samples_esync_over_sync"]],
                      ["ESync / Async samples per second", fmt(q["samples_esync_over_async"]),
                       "%g×" % q["paper"]["samples_esync_over_async"]],
                      ["Async / ESync bytes per second", fmt(q["bytes_async_over_esync"]),
                       "%g×" % q["paper"]["bytes_async_over_esync"]]]), ""]
        if os.path.exists(os.path.join(out_dir, "fig4-throughput.png")):
            lines += ["![Figure 4](fig4-throughput.png)", ""]
    if "compute-ratio" in results:
        r = results["compute-ratio"]
        lines += ["## Figure 5: computing-time ratio per device (%s)" % r["figure_model"], "",
                  "Compute time (including the emulated slowdown) over compute plus waiting and "
                  "communication, per device in profile order.", ""]
        if os.path.exists(os.path.join(out_dir, "fig5-compute-ratio.png")):
            lines += ["![Figure 5](fig5-compute-ratio.png)", ""]
    if "sweep" in results:
        r = results["sweep"]
        rows = [[VARIANT_NAMES.get(variant_of(x), variant_of(x)), "%g" % x["lr"], _t(x["time_to_target_s"]),
                 _acc(x["final_accuracy"]), "best" if r.get("best_lrs", {}).get(variant_of(x)) == x["lr"] else ""]
                for x in sorted(r["runs"], key=lambda x: (variant_of(x), x["lr"]))]
        lines += ["## Learning-rate sweep (open division)", "",
                  "Each variant's best learning rate on %s, one seed: the shortest time to %.1f confirmed on "
                  "all test images, else the best final accuracy. The open division's runs use it for every "
                  "model." % (", ".join(sorted({x["model"] for x in r["runs"]})), r["target_accuracy"]), "",
                  _table(["variant", "lr", "time to %.1f" % r["target_accuracy"], "final accuracy", ""], rows),
                  ""]
    seen, all_runs = set(), []
    for result in results.values():
        for run in result["runs"]:
            if run["key"] not in seen:
                seen.add(run["key"])
                all_runs.append(run)
    lines += ["## Every run", "", _runs_table({"runs": all_runs, "target_accuracy": first["target_accuracy"]}), ""]
    overruns = [(r["key"], r["overruns"], r["iterations"]) for r in all_runs if any(r.get("overruns", []))]
    if overruns:
        lines += ["Iterations slower than their emulated speed (CPU contention), per device: "
                  + "; ".join("%s %s of %s" % (k, "/".join(map(str, o)), "/".join(map(str, i)))
                              for k, o, i in overruns), ""]
    fails = _failures(results)
    lines += ["## Failed runs", ""] + (fails or ["None."]) + [""]
    for directory in (out_dir, os.path.dirname(os.path.abspath(out_dir))):
        if os.path.exists(os.path.join(directory, DISCUSSION)):  # the committed results' reading
            link = os.path.relpath(os.path.join(directory, DISCUSSION), os.path.abspath(out_dir))
            lines += ["What these results show, and what differs from the paper: [%s](%s)." % (link, link), ""]
            break
    return "\n".join(lines)
