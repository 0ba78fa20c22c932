"""The README's headline results table, generated from the committed bench JSON.

The README quotes one small table (ESync's speedup over Sync per model, on
both engines, beside the paper's). It is written between two marker lines
from ``bench/results/paper-sim/table1.json`` and ``bench/results/table1.json``
so that it cannot drift from the results::

    python -m bench.readme_table --write README.md   # rewrite the block
    python -m bench.readme_table --check README.md   # exit 1 when it differs

``tests/unit/test_docs.py`` runs the check.
"""
import argparse
import json
import os
import sys

from . import presets
from .report import format_speedup

BEGIN = "<!-- headline results: generated from bench/results by `python -m bench.readme_table --write README.md` -->"
END = "<!-- end of headline results -->"
#: engine -> the committed Table 1 it is read from (relative to the repository)
SOURCES = (("sim", "bench/results/paper-sim/table1.json"), ("cluster", "bench/results/table1.json"))
REPORTS = ("bench/results/paper-sim/report.md", "bench/results/report.md")
DISCUSSION = "bench/results/discussion.md"


def _load(root):
    results = {}
    for engine, path in SOURCES:
        with open(os.path.join(root, path)) as f:
            results[engine] = json.load(f)
    return results


def _cell(result, model):
    """ESync's speedup over Sync for ``model`` in one Table 1 result."""
    for row in result["rows"]:
        if row["model"] == model:
            return format_speedup(row["speedup"], row["speedup_kind"])
    if any(s["model"] == model for s in result["skipped"]):
        return "skipped"
    return "not run"


def _profile(result):
    slow = [d["slowdown"] for d in result["profile"]["devices"]]
    return "%d devices, %d of them %gx slower" % (len(slow), sum(1 for f in slow if f > 1), max(slow))


def _command(result):
    return " ".join(a for a in result["command"] if a)


def render(root="."):
    """The block (markers included) for the results committed under ``root``.

    Raises:
        OSError, KeyError, ValueError: when a source JSON is missing or malformed.
    """
    results = _load(root)
    sim, cluster = results["sim"], results["cluster"]
    target = sim["target_accuracy"]
    if cluster["target_accuracy"] != target:
        raise ValueError("the two Table 1 results use different targets: %r and %r"
                         % (target, cluster["target_accuracy"]))
    rows = ["| Model | Paper | Simulator (paper's profile) | Real cluster (this machine) |",
            "|---|---|---|---|"]
    for model in presets.PAPER_ORDER:
        paper = presets.PAPER_TABLE1[model]
        rows.append("| %s | %g× | %s | %s |" % (paper["name"], paper["speedup"], _cell(sim, model),
                                               _cell(cluster, model)))
    notes = [
        "ESync's speedup over Sync in time to %.1f test accuracy on Fashion-MNIST (`> x`: Sync did not "
        "reach it, so x is a lower bound; `< x`: ESync did not reach it before its run ended, so x is an "
        "upper bound)." % target,
        "Simulator: %s, virtual seconds, `%s`." % (_profile(sim), _command(sim)),
        "Real cluster: %s, wall-clock seconds on a shared %d-core CPU machine, `%s`."
        % (_profile(cluster), cluster["machine"]["cores"], _command(cluster)),
        "Accuracies, curves and every run: %s; what differs from the paper, and why: [%s](%s)."
        % (", ".join("[%s](%s)" % (p, p) for p in REPORTS), DISCUSSION, DISCUSSION),
    ]
    return "\n".join([BEGIN, ""] + rows + [""] + notes + ["", END])


def _split(text, path):
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("%s has no headline results block (the lines %r ... %r)" % (path, BEGIN, END))
    return text[:start], text[start:end + len(END)], text[end + len(END):]


def check(readme, root="."):
    """True when ``readme``'s block equals :func:`render` for ``root``."""
    with open(readme) as f:
        return _split(f.read(), readme)[1] == render(root)


def write(readme, root="."):
    """Rewrite ``readme``'s block; returns True when it changed."""
    with open(readme) as f:
        text = f.read()
    before, old, after = _split(text, readme)
    new = render(root)
    if new != old:
        with open(readme, "w") as f:
            f.write(before + new + after)
    return new != old


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
