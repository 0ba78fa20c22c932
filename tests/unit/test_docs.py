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
import shutil

import pytest

from bench import readme_table

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


NUMBER = re.compile(r"(?<![\w.\-/])\d[\d,]*(?:\.\d+)?")


def _json_numbers(value, found):
    """Every number in a JSON value: numeric values, and the numbers inside strings (command lines)."""
    if isinstance(value, bool):
        return found
    if isinstance(value, (int, float)):
        found.add(float(value))
    elif isinstance(value, str):
        found.update(float(n.replace(",", "")) for n in NUMBER.findall(value))
    elif isinstance(value, dict):
        for v in value.values():
            _json_numbers(v, found)
    elif isinstance(value, list):
        for v in value:
            _json_numbers(v, found)
    return found


def _unbacked(block, numbers):
    """The numbers written in ``block`` that no number in ``numbers`` gives at the precision shown."""
    text = LINK.sub("]", block)                              # link targets are paths, not results
    bad = []
    for token in NUMBER.findall(text):
        plain = token.replace(",", "")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        if not any("%.*f" % (decimals, n) == plain for n in numbers):
            bad.append(token)
    return bad


def _block(text):
    start, end = text.index(readme_table.BEGIN), text.index(readme_table.END)
    return text[start + len(readme_table.BEGIN):end]


def test_every_number_in_the_headline_block_comes_from_the_committed_json():
    numbers = set()
    for _, path in readme_table.SOURCES:
        with open(os.path.join(ROOT, path)) as f:
            _json_numbers(json.load(f), numbers)
    with open(os.path.join(ROOT, "README.md")) as f:
        block = _block(f.read())
    assert NUMBER.findall(block), "no number found in the headline block"
    assert _unbacked(block, numbers) == []
    # and the check would see one that is not there
    assert _unbacked(block.replace("|", "| 66.4× |", 1), numbers) == ["66.4"]


def _copy_results(tmp_path):
    for _, path in readme_table.SOURCES:
        os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
        shutil.copy(os.path.join(ROOT, path), tmp_path / path)


def _edit(tmp_path, path, edit):
    with open(tmp_path / path) as f:
        data = json.load(f)
    edit(data)
    with open(tmp_path / path, "w") as f:
        json.dump(data, f)


def test_the_table_follows_the_json(tmp_path):
    _copy_results(tmp_path)
    before = readme_table.render(str(tmp_path))
    sim, cluster = (path for _, path in readme_table.SOURCES)

    def faster(data):
        row = next(r for r in data["rows"] if r["model"] == "resnet18_v1")
        row["speedup"], row["speedup_kind"] = 123.4, "measured"
    _edit(tmp_path, sim, faster)
    _edit(tmp_path, cluster, lambda data: data.update(rows=[r for r in data["rows"] if r["model"] != "alexnet"]))
    after = readme_table.render(str(tmp_path))
    assert after != before
    resnet = next(line for line in after.splitlines() if line.startswith("| ResNet-18-v1 |"))
    assert "123.4×" in resnet
    alexnet = next(line for line in after.splitlines() if line.startswith("| AlexNet |"))
    assert alexnet.rstrip(" |").endswith("not run")

    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n" + before + "\n\nmore\n")
    assert not readme_table.check(str(readme), str(tmp_path))
    assert readme_table.write(str(readme), str(tmp_path))
    assert readme_table.check(str(readme), str(tmp_path))
    assert readme.read_text().startswith("# x\n\n") and readme.read_text().endswith("\n\nmore\n")


def test_a_readme_without_the_block_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    with pytest.raises(ValueError, match="no headline results block"):
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
