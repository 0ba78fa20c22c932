"""The README and docs/ stay true to the repository.

* The README's headline results table is the one generated from the committed
  bench JSON (``python -m bench.readme_table``), so it cannot drift from them,
  and every number in it is one of those JSON's numbers (at the precision
  shown), so the generator cannot print one it made up.
* Every relative link in README.md, docs/*.md and the results' discussion
  names a file inside the repository that exists, and a section of it that
  exists (the issue found a link pointing outside the repository).
"""
import glob
import json
import os
import re

import pytest

from bench import readme_table, stats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ([os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        + [os.path.join(ROOT, "bench", "results", "discussion.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path):
    """The section anchors of a Markdown file, as GitHub makes them from its headings."""
    with open(path) as f:
        headings = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_readme_headline_table_is_the_one_generated_from_the_results():
    assert readme_table.check(os.path.join(ROOT, "README.md"), ROOT), (
        "README.md's headline results differ from bench/results; run "
        "python -m bench.readme_table --write README.md")


def _run(model, variant, seed, ttt, acc, budget=1000.0):
    return {"model": model, "mode": "sync" if variant == "sync-fast" else variant, "variant": variant,
            "dist": "iid", "seed": seed, "time_to_target_s": ttt, "train_time_s": budget, "final_accuracy": acc,
            "confirmation": {"time_to_target_s": ttt}}


def _closed_result():
    """A closed division's Table 1 as the bench writes it, from made-up runs over three seeds."""
    from bench import report
    runs = []
    for seed in range(3):
        runs += [_run("resnet18_v1", "esync", seed, 100.0 + 7 * seed, 0.871 + 0.002 * seed),
                 _run("resnet18_v1", "sync", seed, 4000.0 + 300 * seed, 0.902, budget=20000.0),
                 _run("resnet18_v1", "local", seed, 61.0 + 5 * seed, 0.913 - 0.001 * seed),
                 _run("resnet18_v1", "sync-fast", seed, None if seed == 2 else 150.0, 0.89)]
    result = {"runs": runs, "target_accuracy": 0.8, "seeds": [0, 1, 2], "skipped": [],
              "command": ["mxhet-bench", "table1", "--preset", "paper-sim"]}
    result.update(report.derived("table1", result))
    return result


def _numbers(text):
    """Every number written in ``text`` (thousands separators dropped), model names, links and commands apart."""
    from bench import presets
    for paper in presets.PAPER_TABLE1.values():
        text = text.replace(paper["name"], "")
    text = re.sub(r"`[^`]*`|\([^)]*\)\]?|\[[^\]]*\]|<!--.*?-->", "", text)
    return {n.replace(",", "") for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)}


def _json_numbers(obj, out):
    """Every number in ``obj``, formatted as the README may write it."""
    if isinstance(obj, dict):
        for v in obj.values():
            _json_numbers(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _json_numbers(v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out.update({"%g" % obj, "%.0f" % obj, "%.1f" % obj, "%.2f" % obj, "%.3f" % obj, "%.4f" % obj,
                    str(obj)})
    return out


#: settings the notes state (not measurements): target 0.8, all 10,000 test images (vs 1,000), 6 devices,
#: 2 at 117x, lr 0.001 or 0.1, batch 64, 95% intervals
SETTINGS = {"0.8", "10000", "1000", "6", "2", "117", "0.001", "0.1", "64", "95"}


def test_every_number_in_the_block_comes_from_a_committed_json_or_the_paper(tmp_path):
    from bench import presets
    closed = _closed_result()
    path = tmp_path / readme_table.SOURCES[0][1]
    os.makedirs(path.parent)
    path.write_text(json.dumps(closed))
    block = readme_table.render(str(tmp_path))
    allowed = _json_numbers(json.loads(path.read_text()), set()) | SETTINGS
    allowed |= {"%g" % p["speedup"] for p in presets.PAPER_TABLE1.values()}
    assert _numbers(block) - allowed == set()
    resnet = next(line for line in block.splitlines() if line.startswith("| ResNet-18-v1 |"))
    row = closed["rows"][0]
    assert "%.2f×" % row["speedup_over_sync"]["value"] in resnet and "(standalone (fastest device))" in resnet
    assert resnet.count("not yet measured") == 2                # the open division is not committed
    assert "Where ESync loses (open division: not yet measured):" in block
    losses = block.split("Where ESync loses")[1].split("\n\n")[1].splitlines()   # the table, a row per rival
    standalone = next(line for line in losses if "| standalone (fastest device) |" in line)
    assert "| %s |" % stats.format_speedup(next(x for x in row["esync_loses_to"] if x["variant"] == "local"
                                               and x["on"] == "time to target")["speedup"]) in standalone
    assert "against" in standalone.split("|")[5]                 # and ends more accurate
    assert next(line for line in losses if "| Sync |" in line).split("|")[4].strip() == "no"   # not sooner
    # and the committed block: every number from the committed JSON (or the paper)
    committed = readme_table.render(ROOT)
    allowed = set(SETTINGS) | {"%g" % p["speedup"] for p in presets.PAPER_TABLE1.values()}
    for source in [source for _, source in readme_table.SOURCES] + [readme_table.ESTIMATE]:
        if os.path.exists(os.path.join(ROOT, source)):
            with open(os.path.join(ROOT, source)) as f:
                allowed |= _json_numbers(json.load(f), set())
    assert _numbers(committed) - allowed == set()


def test_the_table_follows_the_json(tmp_path):
    before = readme_table.render(str(tmp_path))
    assert "not yet measured" in before and "| AlexNet | 27× | not yet measured |" in before
    closed = _closed_result()
    path = tmp_path / readme_table.SOURCES[0][1]
    os.makedirs(path.parent)
    path.write_text(json.dumps(closed))
    after = readme_table.render(str(tmp_path))
    assert after != before

    readme = tmp_path / "README.md"
    slow = readme_table.render_heterogeneity(str(tmp_path))
    readme.write_text("# x\n\n" + before + "\n\nmid\n\n" + slow + "\n\nmore\n")
    assert not readme_table.check(str(readme), str(tmp_path))
    assert readme_table.write(str(readme), str(tmp_path))
    assert readme_table.check(str(readme), str(tmp_path))
    assert readme.read_text().startswith("# x\n\n") and readme.read_text().endswith("\n\nmore\n")
    assert "\n\nmid\n\n" + slow + "\n\nmore" in readme.read_text()   # the other block is left as it was


def _heterogeneity_result():
    """A heterogeneity bench's JSON as far as the README reads it: one cell, made-up runs over seeds."""
    from bench import stats
    def variant(seeds, times, accuracies):
        return {"seeds": seeds, "time_to_target": stats.time_to_target(times, [540.0] * len(times)),
                "final_accuracy": stats.mean_interval(accuracies)}
    return {"target_accuracy": 0.8, "recommended_args": ["--round-deadline", "8", "--round-length", "8"],
            "provenance": {"commit": "0123456789ab", "date": "2026-11-28T04:00:00+00:00"},
            "profiles": [{"profile": 10, "devices": [{"slowdown": s} for s in (10, 10, 1, 1)]},
                         {"profile": 2, "devices": [{"slowdown": s} for s in (2, 2, 1, 1)]}],
            "cells": [{"model": "resnet18_v1", "norm": "batch", "profile": 10, "dist": "iid",
                       "best_alternative": "standalone",
                       "variants": {"recommended": variant([0, 1, 2], [12.14, 14.69, 13.35], [0.9037, 0.9044, 0.905]),
                                    "standalone": variant([0, 1, 2], [16.16, 16.16, 13.35], [0.908, 0.907, 0.911]),
                                    "async": variant([0], [21.5], [0.901])},
                       "verdict": {"speedup": {"value": 1.13, "low": 0.91, "high": 1.41}, "accuracy_gap": -0.005,
                                   "text": "**no later**: 1.13× [0.91, 1.41] as fast; final accuracy -0.005"}}]}


def test_the_slow_devices_block_follows_the_heterogeneity_json(tmp_path):
    before = readme_table.render_heterogeneity(str(tmp_path))
    assert "Not yet measured" in before and "|" not in before
    doc = _heterogeneity_result()
    path = tmp_path / readme_table.HET_SOURCE
    os.makedirs(path.parent)
    path.write_text(json.dumps(doc))
    block = readme_table.render_heterogeneity(str(tmp_path))
    row = next(line for line in block.splitlines() if line.startswith("| resnet18_v1 | 10x | iid |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    rec, alt = doc["cells"][0]["variants"]["recommended"], doc["cells"][0]["variants"]["standalone"]
    assert cells[3] == "0, 1, 2" and cells[4] == "%.1f [%.1f, %.1f]" % (
        rec["time_to_target"]["mean"], rec["time_to_target"]["low"], rec["time_to_target"]["high"])
    assert cells[6:8] == ["the fastest device alone", "0, 1, 2"]
    assert cells[8].startswith("%.1f [" % alt["time_to_target"]["mean"])
    assert cells[10] == doc["cells"][0]["verdict"]["text"]
    assert "10x: 10, 10, 1, 1." in block and "2x:" not in block   # the profiles of the measured cells only
    # the measured cell is not listed as missing; the goal's others are, each once
    missing = block.split("not yet measured (")[1]
    assert "resnet18_v1 10x iid" not in missing and "alexnet 117x iid" in missing
    assert "resnet18_v1_gn 10x non-iid" in missing and missing.startswith("14 of 15)")
    # every number from the JSON, the profiles' names or the goal's count
    text = re.sub(r"resnet18_v1(_gn)?|resnet50_v[12]|mobilenet1\.0", "", block)
    allowed = {n.lstrip("-") for n in _json_numbers(doc, set())} | {"14", "15", "95", "10000", "31", "117"}
    assert _numbers(text) - allowed <= {"2026", "11", "28"}   # and the date


def test_a_label_skewed_cell_says_under_the_table_how_it_stands_against_sync_and_async(tmp_path):
    doc = _heterogeneity_result()
    iid = doc["cells"][0]
    skewed = dict(iid, model="resnet18_v1_gn", dist="non-iid", best_alternative="fast-only",
                  goal={"sync": {"text": "**later** by 73.9 s: 0.68× as fast"},
                        "async": {"text": "**later** by 40.4 s: 0.83× as fast"}})
    doc["cells"].append(skewed)
    path = tmp_path / readme_table.HET_SOURCE
    os.makedirs(path.parent)
    path.write_text(json.dumps(doc))
    block = readme_table.render_heterogeneity(str(tmp_path))
    assert ("can move). resnet18_v1_gn, 10x, non-iid: against Sync over all: **later** by 73.9 s: 0.68× as fast; "
            "against Async: **later** by 40.4 s: 0.83× as fast.") in block
    assert "resnet18_v1, 10x, iid:" not in block     # an i.i.d. cell has no such goal
    assert "Where the recommended configuration loses" not in block   # no verdict says it loses
    skewed["goal"]["sync"]["no_later"] = False
    path.write_text(json.dumps(doc))
    block = readme_table.render_heterogeneity(str(tmp_path))
    assert ("Where the recommended configuration loses (resnet18_v1_gn 10x non-iid), why is not yet analysed "
            "([the report](%s))." % readme_table.HET_REPORT) in block
    doc["why"] = {"resnet18_v1_gn 10x non-iid": {"why": "half the labels", "evidence": []}}
    path.write_text(json.dumps(doc))
    assert "says why, from the runs that show it." in readme_table.render_heterogeneity(str(tmp_path))
    doc["cells"].append(dict(skewed, model="alexnet"))
    path.write_text(json.dumps(doc))
    assert ("Where the recommended configuration loses (resnet18_v1_gn 10x non-iid, alexnet 10x non-iid), [the "
            "report](%s) says why for resnet18_v1_gn 10x non-iid; not yet analysed for alexnet 10x non-iid."
            % readme_table.HET_REPORT) in readme_table.render_heterogeneity(str(tmp_path))
    path.write_text(json.dumps(_heterogeneity_result()))
    assert "label-skewed" not in readme_table.render_heterogeneity(str(tmp_path))


def test_a_loss_says_whether_its_intervals_hold_it_or_a_side_has_one_seed():
    speed = {"value": 0.45, "low": None, "high": None}
    row = {"variants": {"esync": {"final_accuracy": {"n": 1}}, "local": {"final_accuracy": {"n": 3}}}}
    time_loss = {"variant": "local", "on": "time to target", "speedup": speed, "significant": False}
    accuracy_loss = {"variant": "local", "on": "final accuracy", "esync": 0.876, "other": 0.888, "significant": False}
    assert readme_table._certainty(row, time_loss) == ", no interval (a side has one seed)"
    assert readme_table._certainty(row, accuracy_loss) == ", no interval (a side has one seed)"
    three = {"variants": {v: {"final_accuracy": {"n": 3}} for v in ("esync", "local")}}
    assert readme_table._certainty(three, dict(time_loss, speedup=dict(speed, low=0.3, high=1.2))) == \
        ", within the 95% interval"
    assert readme_table._certainty(three, accuracy_loss) == ", within the 95% interval"
    assert readme_table._certainty(three, dict(accuracy_loss, significant=True)) == ""


def test_two_accuracies_print_with_the_decimals_that_tell_them_apart():
    assert readme_table._digits_apart(0.8812, 0.8771) == 3
    assert readme_table._digits_apart(0.87712, 0.87681) == 4
    assert readme_table._digits_apart(0.877, 0.877) == 5   # equal: no more than 5 decimals


def test_a_readme_without_the_block_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    with pytest.raises(ValueError, match="no generated block"):
        readme_table.check(str(readme), ROOT)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_name_files_inside_the_repository(doc):
    with open(doc) as f:
        text = f.read()
    bad = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue                                   # a web address or an anchor on the same page
        path = os.path.normpath(os.path.join(os.path.dirname(doc), target.split("#")[0]))
        if os.path.commonpath([path, ROOT]) != ROOT:
            bad.append("%s (outside the repository)" % target)
        elif not os.path.exists(path):
            bad.append("%s (no such file)" % target)
        elif "#" in target and path.endswith(".md") and target.split("#", 1)[1] not in _anchors(path):
            bad.append("%s (no such section)" % target)
    assert not bad, "%s: %s" % (os.path.relpath(doc, ROOT), "; ".join(bad))


def test_the_readme_links_the_references():
    with open(os.path.join(ROOT, "README.md")) as f:
        assert "(docs/references.md)" in f.read()


def test_the_cost_of_the_missing_cells_comes_from_the_calibrated_estimate(tmp_path):
    assert "Why cells are missing" not in readme_table.render(str(tmp_path))     # no estimate committed
    path = tmp_path / readme_table.ESTIMATE
    os.makedirs(path.parent)
    path.write_text(json.dumps({"presets": [{}], "calibrated": None}))         # not calibrated (no --measured)
    assert "Why cells are missing" not in readme_table.render(str(tmp_path))
    path.write_text(json.dumps({"calibrated": {"finished": 10, "remaining": 148, "remaining_wall_h": 301.1,
                                               "remaining_cpu_h": 252.2}}))
    line = next(line for line in readme_table.render(str(tmp_path)).splitlines() if "Why cells" in line)
    assert "10 runs have finished; the remaining 148 need about 252 CPU hours" in line and "; 301 h at" in line
