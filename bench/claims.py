"""Which of the ESync paper's claims hold at its own settings, each with our numbers (issue 36).

:func:`paper_claims` reads the results of one ``mxhet-bench`` invocation of the closed division (Table 1 over
seeds, Figure 3's curves, Figure 4's ratios, Figure 5's computing-time ratios) and :func:`markdown` renders
them for the report. A claim's verdict is one of :data:`VERDICTS`: it holds or does not where the 95%
interval settles it, is not settled where the interval spans the line (or a side has one seed), and is not
yet measured where the invocation ran the experiment but not the runs the claim needs. A claim whose
experiment the invocation did not run is left out.
"""
from . import presets, report, stats

HOLDS, FAILS, OPEN, MISSING = "holds", "does not hold", "not settled", "not yet measured"
VERDICTS = (HOLDS, FAILS, OPEN, MISSING)
BALANCED = 0.9
"""Figure 5's claim (every device computes nearly all the time under ESync) holds where every device's
computing-time ratio is at least this."""


def _faster(sp):
    """The verdict on "A reaches the target sooner than B" from :func:`bench.report.speedup_over` of A over B."""
    if sp["kind"] in ("missing", "unknown") or sp["value"] is None:
        return MISSING
    if sp["low"] is None:
        return OPEN
    if sp["low"] > 1 and sp["kind"] in ("measured", "lower_bound"):
        return HOLDS
    if sp["high"] < 1 and sp["kind"] in ("measured", "upper_bound"):
        return FAILS
    return OPEN


def _not_slower(sp):
    """The verdict on "A is about as fast as B": it fails only where A is slower beyond the interval."""
    verdict = _faster(sp)
    return HOLDS if verdict == OPEN and sp["low"] is not None else verdict


def _accuracy_gap(runs, model):
    """ESync's final accuracy minus the standalone device's over seeds: ``(mean, low, high, n_esync, n_alone)``
    with Welch's 95% interval (None without runs; low and high None with one seed on a side)."""
    mine = [r["final_accuracy"] for r in report._find_all(runs, model, "esync")]
    alone = [r["final_accuracy"] for r in report._find_all(runs, model, "local")]
    if not mine or not alone:
        return None
    low, high = stats.welch_interval(mine, alone)
    return sum(mine) / len(mine) - sum(alone) / len(alone), low, high, len(mine), len(alone)


def _gap_text(gap):
    mean, low, high, n, m = gap
    text = "%+.3f" % mean
    text += " [%+.3f, %+.3f]" % (low, high) if low is not None else " (no interval: a side has one seed)"
    return text + " (ESync %d seeds, standalone %d)" % (n, m)


def _table1_claims(table1):
    claims = []
    for row in table1["rows"]:
        model = row["model"]
        paper = presets.PAPER_TABLE1.get(model)
        if not paper:
            continue
        name = paper["name"]
        sp = row["speedup_over_sync"]
        verdict = _faster(sp)
        note = ""
        if sp.get("low") is not None:
            where = ("inside" if sp["low"] <= paper["speedup"] <= sp["high"] else
                     "below" if paper["speedup"] < sp["low"] else "above")
            note = "; the paper's %g× is %s our interval" % (paper["speedup"], where)
        claims.append({"claim": "ESync reaches %.1f sooner than Sync on %s (Table 1: %g×)"
                                % (table1["target_accuracy"], name, paper["speedup"]),
                       "ours": stats.format_speedup(sp) + note, "verdict": verdict})
        gap = _accuracy_gap(table1["runs"], model)
        if gap is None:
            verdict, ours = MISSING, MISSING
        else:
            mean, low, high = gap[:3]
            verdict = OPEN if low is None else FAILS if high < 0 else HOLDS
            ours = "ESync minus standalone " + _gap_text(gap)
        claims.append({"claim": "ESync ends at the standalone device's accuracy or above on %s (Table 1: %.3f "
                                "against %.3f)" % (name, paper["esync"], paper["standalone"]),
                       "ours": ours, "verdict": verdict})
    figure = table1.get("figure_model")
    if figure in {row["model"] for row in table1["rows"]}:
        runs = table1["runs"]
        esync = report._find_all(runs, figure, "esync")
        name = presets.PAPER_TABLE1.get(figure, {}).get("name", figure)
        for variant, text, judge in (
                ("local", "ESync reaches the standalone device's accuracy in the shortest time: before the "
                          "standalone device reaches %.1f (%s, i.i.d.; §5, Figure 3)", _faster),
                ("async", "ESync trains about as fast as Async (%.1f on %s, i.i.d.; §5, Figure 3)", _not_slower)):
            other = report._find_all(runs, figure, variant)
            sp = report.speedup_over(esync, other) if esync and other else {"kind": "missing", "value": None}
            claims.append({"claim": text % (table1["target_accuracy"], name),
                           "ours": ("ESync over %s: %s" % (report.VARIANT_NAMES[variant], stats.format_speedup(sp))
                                    if sp["kind"] != "missing" else MISSING),
                           "verdict": judge(sp)})
    return claims


def _curve_claims(curves):
    non_iid = curves["speedups"].get("non-iid", {})
    value, kind = non_iid.get("esync_over_sync"), non_iid.get("kind", "missing")
    if kind == "missing":
        return [{"claim": "On non-i.i.d. data ESync reaches %.1f sooner than Sync, without loss of accuracy, "
                          "while Async's accuracy is impaired (§5, Figure 3)" % curves["target_accuracy"],
                 "ours": MISSING, "verdict": MISSING}]
    verdict = HOLDS if kind in ("measured", "lower_bound") and value > 1 else (
        FAILS if kind in ("measured", "upper_bound") and value < 1 else OPEN)
    return [{"claim": "On non-i.i.d. data ESync reaches %.1f sooner than Sync (§5, Figure 3)"
                      % curves["target_accuracy"],
             "ours": "%s (one seed, no interval)" % report.format_speedup(value, kind), "verdict": verdict}]


def _throughput_claims(throughput):
    q = throughput["ratios"]
    claims = []
    for key, text in (("samples_esync_over_sync", "ESync processes more samples per second than Sync"),
                      ("samples_esync_over_async", "ESync processes more samples per second than Async"),
                      ("bytes_async_over_esync", "Async sends more bytes per second than ESync")):
        ours = q.get(key)
        claims.append({"claim": "%s (§5, Figure 4: %g×)" % (text, q["paper"][key]),
                       "ours": "%.1f× (the mean run of each mode; no interval)" % ours if ours is not None else MISSING,
                       "verdict": MISSING if ours is None else HOLDS if ours > 1 else FAILS})
    return claims


def _compute_ratio_claims(result):
    esync = [r for r in result["runs"] if r["mode"] == "esync" and r["dist"] == "iid" and r.get("compute_ratio")]
    claim = ("ESync balances computing time: every device computes nearly all the time (at least %.0f%% here; "
             "§5, Figure 5)" % (100 * BALANCED))
    if not esync:
        return [{"claim": claim, "ours": MISSING, "verdict": MISSING}]
    lowest = min(min(r["compute_ratio"]) for r in esync)
    sync = [r for r in result["runs"] if report.variant_of(r) == "sync" and r["dist"] == "iid"
            and r.get("compute_ratio")]
    ours = "the lowest device's ratio under ESync %.2f" % lowest
    if sync:
        ours += ", under Sync %.2f" % min(min(r["compute_ratio"]) for r in sync)
    return [{"claim": claim, "ours": ours, "verdict": HOLDS if lowest >= BALANCED else FAILS}]


def paper_claims(results):
    """The paper's claims that ``results`` (experiment name -> result, one invocation) can judge, in the
    paper's order: a list of ``{"claim", "ours", "verdict"}``; empty outside the closed division."""
    table1 = results.get("table1")
    if not table1 or table1.get("division") != "closed":
        return []
    claims = _table1_claims(table1)
    if "curves" in results:
        claims += _curve_claims(results["curves"])
    if "throughput" in results:
        claims += _throughput_claims(results["throughput"])
    if "compute-ratio" in results:
        claims += _compute_ratio_claims(results["compute-ratio"])
    return claims


def markdown(claims):
    """The report's section: a sentence of counts, then one row per claim."""
    if not claims:
        return []
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    lines = ["## The paper's claims at its own settings", "",
             "Each claim of the ESync paper these runs can judge, at the paper's hyperparameters (the closed "
             "division): %s. A claim holds or does not where the 95%% interval settles it (Welch's interval of "
             "the difference for accuracies, of the log-time ratio for speedups); it is not settled where the "
             "interval spans the line or a side has one seed." % ", ".join(
                 "%d %s" % (counts[v], v) for v in VERDICTS if counts[v]), ""]
    lines.append("| claim (the paper) | ours | verdict |")
    lines.append("|---|---|---|")
    for c in claims:
        lines.append("| %s | %s | **%s** |" % (c["claim"], c["ours"], c["verdict"]))
    return lines + [""]
