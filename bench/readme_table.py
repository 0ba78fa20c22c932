"""The README's headline results table, generated from the committed bench JSON.

The README quotes one small table: per model, ESync's speedup in time to the
target over Sync (the paper's comparison) and over the best alternative a user
would run instead (the fastest device alone, Sync over the fast devices only,
Async, ...), each with its 95% interval over seeds, in the closed division
(the paper's hyperparameters) and the open one (each method at its best
learning rate), beside the paper's; then where ESync loses. It is written
between two marker lines from the divisions' ``table1.json`` so that it cannot
drift from the results; a division not committed yet reads "not yet
measured". A second block answers the question a user with slow devices asks
(do they help, or should I train on my fast ones alone?) from the committed
``mxhet-bench heterogeneity`` results: per measured cell, ESync's recommended
configuration against the best alternative, and which of issue 31's cells are
still unmeasured. ``--write`` and ``--check`` cover both blocks::

    python -m bench.readme_table --write README.md   # rewrite the block
    python -m bench.readme_table --check README.md   # exit 1 when it differs

``tests/unit/test_docs.py`` runs the check.
"""
import argparse
import json
import os
import sys

from . import presets, stats
from .report import VARIANT_NAMES

BEGIN = "<!-- headline results: generated from bench/results by `python -m bench.readme_table --write README.md` -->"
END = "<!-- end of headline results -->"
#: division -> the committed Table 1 it is read from (relative to the repository)
SOURCES = (("closed", "bench/results/paper-sim-closed/table1.json"),
           ("open", "bench/results/paper-sim-open/table1.json"))
COMMANDS = {"closed": "mxhet-bench all --preset paper-sim --resume --out bench/results/paper-sim-closed",
            "open": "mxhet-bench sweep --preset paper-sim-open --resume --out bench/results/paper-sim-open; "
                    "mxhet-bench all --preset paper-sim-open --resume --out bench/results/paper-sim-open"}
EARLIER = ("bench/results/paper-sim/report.md", "bench/results/report.md")
DISCUSSION = "bench/results/discussion.md"
NOT_MEASURED = "not yet measured"
HET_BEGIN = ("<!-- slow devices: generated from bench/results/heterogeneity by "
             "`python -m bench.readme_table --write README.md` -->")
HET_END = "<!-- end of slow devices -->"
HET_SOURCE = "bench/results/heterogeneity/heterogeneity.json"
HET_REPORT = "bench/results/heterogeneity/heterogeneity.md"
HET_NAMES = {"standalone": "the fastest device alone", "fast-only": "Sync over the fast devices",
             "sync": "Sync over all", "async": "Async", "dcasgd": "DC-ASGD", "adsp": "ADSP", "dylu": "DyLU"}
#: the cells issue 31's goal names: (models, profiles, split, norm)
HET_GOAL = ((("resnet18_v1", "alexnet", "mobilenet1.0"), (117, 10, 2), "iid", "batch"),
            (("resnet50_v1", "resnet50_v2"), (117,), "iid", "batch"),
            (("resnet18_v1",), (117, 10), "non-iid", "group"),
            (("alexnet",), (117, 10), "non-iid", "batch"))


def _load(root):
    """division -> its Table 1 result, or None where it is not committed."""
    results = {}
    for division, path in SOURCES:
        full = os.path.join(root, path)
        if os.path.exists(full):
            with open(full) as f:
                results[division] = json.load(f)
        else:
            results[division] = None
    return results


def _row(result, model):
    if result is None:
        return None
    return next((r for r in result["rows"] if r["model"] == model and "speedup_over_sync" in r), None)


def _cells(result, model):
    """ESync's speedups over Sync and over the best alternative for ``model`` in one division."""
    row = _row(result, model)
    if row is None:
        skipped = result is not None and any(s["model"] == model for s in result.get("skipped", []))
        return ["skipped" if skipped else NOT_MEASURED] * 2
    best = row["best_alternative"]
    over_best = stats.format_speedup(row["speedup_over_best"])
    return [stats.format_speedup(row["speedup_over_sync"]),
            over_best + (" (%s)" % VARIANT_NAMES.get(best, best) if best else "")]


def _certainty(row, loss):
    """How sure a loss is: nothing to add where its interval excludes a tie; otherwise whether the
    intervals hold it or a side has one seed, and so no interval."""
    if loss["significant"]:
        return ""
    if loss["on"] == "time to target":
        one_seed = loss["speedup"].get("low") is None
    else:
        variants = row.get("variants", {})
        one_seed = any(variants.get(v, {}).get("final_accuracy", {}).get("n", 0) < 2
                       for v in ("esync", loss["variant"]))
    return ", no interval (a side has one seed)" if one_seed else ", within the 95% interval"


def _digits_apart(a, b, at_least=3, at_most=5):
    """Decimals enough to print two accuracies apart (0.8771 against 0.8768, not 0.877 against 0.877)."""
    digits = at_least
    while digits < at_most and "%.*f" % (digits, a) == "%.*f" % (digits, b):
        digits += 1
    return digits


LOSS_HEADER = ("| Division | Model | Loses to | Reaches %.1f sooner: ESync's speedup over it | Ends more accurate: "
               "ESync's final accuracy against its |", "|---|---|---|---|---|")
"""The "Where ESync loses" table (the target's %-field): a row per division, model and variant that beats
ESync on either count."""


def _losses(results, target):
    """"Where ESync loses", from every division's Table 1: table rows (division, model, the variant, the time
    and the accuracy it wins on, each with how sure it is), and a line for each division with none."""
    rows, lines = [], []
    for division, _ in SOURCES:
        result = results[division]
        if result is None:
            lines.append("%s division: %s." % (division.capitalize(), NOT_MEASURED))
            continue
        found = 0
        for row in result["rows"]:
            by_variant = {}
            for x in row.get("esync_loses_to", []):
                by_variant.setdefault(x["variant"], {})[x["on"]] = x
            name = (row["paper"] or {}).get("name", row["model"])
            for variant, on in by_variant.items():
                cells = ["no", "no"]
                x = on.get("time to target")
                if x is not None:
                    cells[0] = stats.format_speedup(x["speedup"]) + _certainty(row, x)
                x = on.get("final accuracy")
                if x is not None:
                    low, high = x.get("difference") or (None, None)
                    digits = _digits_apart(x["other"], x["esync"])
                    cells[1] = "%.*f against %.*f%s%s" % (
                        digits, x["esync"], digits, x["other"],
                        " (difference %+.*f [%+.*f, %+.*f])" % (digits, x["esync"] - x["other"], digits, low,
                                                                digits, high) if low is not None else "",
                        _certainty(row, x))
                rows.append("| %s | %s | %s | %s | %s |" % (
                    division.capitalize(), name, VARIANT_NAMES.get(variant, variant), cells[0], cells[1]))
                found += 1
        if not found:
            if not any("esync" in row.get("variants", {}) for row in result["rows"]):
                text = "%s (no ESync run is in yet)" % NOT_MEASURED   # nothing to lose or win
            else:
                text = "ESync loses to no variant measured"
            lines.append("%s division: %s." % (division.capitalize(), text))
    return ([LOSS_HEADER[0] % target, LOSS_HEADER[1]] + rows if rows else []), lines


def _claims_line(root, closed):
    """One line counting the verdicts on the paper's claims (bench.claims) in the closed division, read from
    its committed JSONs beside ``table1.json``; nothing before that division is committed."""
    if closed is None:
        return []
    from . import claims
    directory = os.path.join(root, os.path.dirname(SOURCES[0][1]))
    results = {"table1": closed}
    for name in ("curves", "throughput", "compute-ratio"):
        path = os.path.join(directory, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                results[name] = json.load(f)
    judged = claims.paper_claims(results)
    if not judged:
        return []
    counts = ", ".join("%d %s" % (n, v) for v in claims.VERDICTS
                       for n in [sum(c["verdict"] == v for c in judged)] if n)
    report = os.path.join(os.path.dirname(SOURCES[0][1]), "report.md")
    return ["The paper's own claims at its settings (closed division), each judged by its 95%% interval: %s; "
                "which, with the numbers: [%s](%s#the-papers-claims-at-its-own-settings)." % (counts, report, report)]


ESTIMATE = "bench/results/divisions-estimate/estimate.json"


def _cost_line(root):
    """What the divisions' unfinished runs cost at the finished runs' rates (``ESTIMATE``, written by
    ``mxhet-bench estimate --measured``); none where it is missing or was not calibrated."""
    path = os.path.join(root, ESTIMATE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        doc = json.load(f)
    totals = doc.get("calibrated")
    if not totals:
        return []
    md = os.path.splitext(ESTIMATE)[0] + ".md"
    return ["Why cells are missing: the divisions are long on the 2-core bench machine. %d runs have finished; "
                "the remaining %d need about %.0f CPU hours at the finished runs' rates (about as many hours one "
                "at a time on a machine doing nothing else; %.0f h at the pace the finished ones had beside other "
                "work), and run in the background across sessions: [%s](%s)." % (
                    totals["finished"], totals["remaining"], totals["remaining_cpu_h"], totals["remaining_wall_h"],
                    md, md)]


def _seeds(result):
    return ", ".join(map(str, result.get("seeds") or [result.get("seed", 0)]))


def render(root="."):
    """The block (markers included) for the results committed under ``root``.

    Raises:
        OSError, KeyError, ValueError: when a source JSON is malformed.
    """
    results = _load(root)
    targets = {r["target_accuracy"] for r in results.values() if r is not None}
    if len(targets) > 1:
        raise ValueError("the divisions' Table 1 results use different targets: %s" % sorted(targets))
    target = targets.pop() if targets else 0.8
    rows = ["| Model | Paper: vs Sync | Closed: vs Sync | Closed: vs best alternative | Open: vs Sync | "
            "Open: vs best alternative |", "|---|---|---|---|---|---|"]
    for model in presets.PAPER_ORDER:
        paper = presets.PAPER_TABLE1[model]
        rows.append("| %s | %g× | %s |" % (paper["name"], paper["speedup"], " | ".join(
            _cells(results["closed"], model) + _cells(results["open"], model))))
    # each paragraph on one line: the README is a front door of about 100 lines
    about = (
        "ESync's speedup in time to %.1f test accuracy on Fashion-MNIST in the simulator (the paper's profile: "
        "6 devices, 2 of them 117x slower, virtual seconds): the ratio of geometric mean times over seeds "
        "with its 95%% interval; a time counts only when the snapshot reaches %.1f on all 10,000 test "
        "images (`> x`: a slower variant did not reach it on every seed, so x is a lower bound; `< x`: ESync "
        "did not). The best alternative is whichever other variant (the fastest device alone, Sync over "
        "the fast devices only, Async, DC-ASGD, ADSP, local SGD, Sync) reached it soonest. "
        "Closed division: the paper's hyperparameters (lr 0.001, batch 64, plain SGD); open division: each "
        "variant at its best learning rate from a committed sweep. See [docs/bench.md](docs/bench.md)."
        % (target, target))
    divisions = []
    for division, path in SOURCES:
        result = results[division]
        if result is None:
            divisions.append("%s division: %s (`%s`)." % (division.capitalize(), NOT_MEASURED, COMMANDS[division]))
        else:
            divisions.append("%s division: seeds %s, `%s`; every run: [%s](%s)." % (
                division.capitalize(), _seeds(result), " ".join(a for a in result["command"] if a),
                os.path.join(os.path.dirname(path), "report.md"), os.path.join(os.path.dirname(path),
                                                                                "report.md")))
    loss_rows, loss_lines = _losses(results, target)
    if loss_rows:
        others = "; ".join(line.rstrip(".") for line in loss_lines)   # divisions with nothing to tabulate
        losses = ["Where ESync loses%s:" % (" (%s%s)" % (others[0].lower(), others[1:]) if others else ""),
                  ""] + loss_rows
    else:
        losses = [" ".join(["Where ESync loses."] + loss_lines)]
    notes = [about, "", " ".join(divisions + _cost_line(root)), ""] + losses + ["",
             " ".join(_claims_line(root, results["closed"]) + [
                 "Earlier single-seed results (lr 0.1, crossings on 1,000 test images, no baselines beyond Sync), "
                 "kept for the record: %s; what differs from the paper, and why: [%s](%s)."
                 % (", ".join("[%s](%s)" % (p, p) for p in EARLIER), DISCUSSION, DISCUSSION)])]
    return "\n".join([BEGIN, ""] + rows + [""] + notes + ["", END])


def render_heterogeneity(root="."):
    """The slow-devices block (markers included): per cell of the committed heterogeneity results,
    the recommended ESync against the best alternative; then the goal's cells not measured yet.

    Raises:
        OSError, KeyError, ValueError: when the source JSON is malformed.
    """
    path = os.path.join(root, HET_SOURCE)
    doc = None
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    lines = [HET_BEGIN, ""]
    if doc is None:
        lines += ["%s (`mxhet-bench heterogeneity`, [docs/bench.md](docs/bench.md))." % NOT_MEASURED.capitalize(),
                  "", HET_END]
        return "\n".join(lines)
    target = doc["target_accuracy"]
    lines += ["ESync's recommended configuration (`--sync esync %s`, a candidate being measured) against the "
              "best of what you could run instead: the fastest device alone, Sync over the fast devices only, "
              "Async, DC-ASGD, ADSP, DyLU, Sync over all. Simulator, virtual seconds to %.2f test accuracy "
              "(confirmed on all 10,000 test images) and final accuracy at the budget, each the mean over "
              "seeds with its 95%% interval. Profiles (each device's slowdown): %s." % (
                  " ".join(doc["recommended_args"]), target, "; ".join(
                      "%dx: %s" % (p["profile"], ", ".join("%g" % d["slowdown"] for d in p["devices"]))
                      for p in doc.get("profiles", []) if p["profile"] in {c["profile"] for c in doc["cells"]})),
              "",
              "| model | profile | data | recommended: seeds | time | final accuracy | best alternative | seeds | "
              "time | final accuracy | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    measured = set()
    for c in doc["cells"]:
        rec = c["variants"].get("recommended")
        if rec is None:
            continue
        best = c.get("best_alternative")
        alt = c["variants"].get(best) if best else None
        measured.add((c["model"], c["profile"], c["dist"]))
        lines.append("| %s | %dx | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            c["model"], c["profile"], c["dist"], ", ".join(map(str, rec["seeds"])),
            stats.format_interval(rec["time_to_target"], "%.1f"),
            stats.format_interval(rec["final_accuracy"], "%.3f"),
            HET_NAMES.get(best, best) if alt else "none", ", ".join(map(str, alt["seeds"])) if alt else "—",
            stats.format_interval(alt["time_to_target"], "%.1f") if alt else "—",
            stats.format_interval(alt["final_accuracy"], "%.3f") if alt else "—",
            c["verdict"]["text"].replace("|", "/")))
    skewed = ["%s, %dx, %s: against %s." % (c["model"], c["profile"], c["dist"], "; against ".join(
        "%s: %s" % (HET_NAMES.get(v, v), c["goal"][v]["text"]) for v in c["goal"]))
        for c in doc["cells"] if c.get("goal") and c["variants"].get("recommended")]
    if skewed:
        lines += ["", " ".join(["On label-skewed data issue 31 asks for %.2f ahead of Sync and Async over the "
                                "devices where the data lies (the alternatives above that run without the slow "
                                "devices assume their data can move)." % target] + skewed)]
    from .heterogeneity import cell_key, loses
    lost = [c for c in doc["cells"] if c["variants"].get("recommended") and loses(c)]
    if lost:
        why = doc.get("why") or {}
        explained = [cell_key(c) for c in lost if cell_key(c) in why]
        unexplained = [cell_key(c) for c in lost if cell_key(c) not in why]
        where = "Where the recommended configuration loses (%s), " % ", ".join(cell_key(c) for c in lost)
        if not unexplained:
            text = "[the report](%s) says why, from the runs that show it." % HET_REPORT
        elif not explained:
            text = "why is not yet analysed ([the report](%s))." % HET_REPORT
        else:
            text = "[the report](%s) says why for %s; not yet analysed for %s." % (
                HET_REPORT, ", ".join(explained), ", ".join(unexplained))
        lost_line = where + text + " "
    else:
        lost_line = ""
    goal = [(m + ("_gn" if norm == "group" else ""), p, dist)
            for models, profiles, dist, norm in HET_GOAL for m in models for p in profiles]
    missing = [k for k in goal if k not in measured]
    prov = doc["provenance"]
    lines += ["", lost_line + "A verdict of one seed on either side has no interval and settles nothing. Every run and the "
              "learning-rate sweeps: [%s](%s) (commit `%s`, %s)." % (HET_REPORT, HET_REPORT,
                                                                    (prov["commit"] or "unknown")[:7],
                                                                    prov["date"][:10])
              + " Cells issue 31 names that are %s (%d of %d): %s." % (
                  NOT_MEASURED, len(missing), len(goal),
                  ", ".join("%s %dx %s" % k for k in missing) or "none"), "", HET_END]
    return "\n".join(lines)


BLOCKS = ((BEGIN, END, render), (HET_BEGIN, HET_END, render_heterogeneity))


def _split(text, path, begin=BEGIN, end_marker=END):
    start, end = text.find(begin), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError("%s has no generated block (the lines %r ... %r)" % (path, begin, end_marker))
    return text[:start], text[start:end + len(end_marker)], text[end + len(end_marker):]


def check(readme, root="."):
    """True when each of ``readme``'s generated blocks equals its render for ``root``."""
    with open(readme) as f:
        text = f.read()
    return all(_split(text, readme, begin, end)[1] == fn(root) for begin, end, fn in BLOCKS)


def write(readme, root="."):
    """Rewrite ``readme``'s generated blocks; returns True when one changed."""
    with open(readme) as f:
        text = f.read()
    new_text = text
    for begin, end, fn in BLOCKS:
        before, _, after = _split(new_text, readme, begin, end)
        new_text = before + fn(root) + after
    if new_text != text:
        with open(readme, "w") as f:
            f.write(new_text)
    return new_text != text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.readme_table", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="README", help="rewrite the block in README")
    action.add_argument("--check", metavar="README", help="exit 1 when README's block differs from the results")
    parser.add_argument("--root", default=".", help="the repository (default: the working directory)")
    args = parser.parse_args(argv)
    if args.write:
        print("%s: %s" % (args.write, "updated" if write(args.write, args.root) else "already up to date"))
        return 0
    if check(args.check, args.root):
        return 0
    print("%s: the headline results differ from bench/results; run python -m bench.readme_table --write %s"
          % (args.check, args.check), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
