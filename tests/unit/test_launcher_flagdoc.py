"""docs/launcher.md's flag reference is the argument parser's (mxhet.launcher.flagdoc)."""
import os

import pytest

from mxhet.launcher import build_parser, flagdoc

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                   "launcher.md")


def test_committed_reference_matches_the_parser():
    with open(DOC, encoding="utf-8") as handle:
        document = handle.read()
    assert flagdoc.splice(document, flagdoc.render()) == document, (
        "docs/launcher.md is stale: run python -m mxhet.launcher.flagdoc --write docs/launcher.md")


def test_committed_mode_option_flags_are_the_specs():
    with open(DOC, encoding="utf-8") as handle:
        document = handle.read()
    assert flagdoc.MODE_BEGIN in document
    assert flagdoc.update(document) == document, (
        "docs/launcher.md is stale: run python -m mxhet.launcher.flagdoc --write docs/launcher.md")
    reference = flagdoc.render_mode_options()
    for flag in ("--local-steps LOCAL_STEPS", "--frozen-filter {on,off}", "--ack {blocking,delayed}",
                 "--reset-optimizer-state`", "--lazy-c LAZY_C"):
        assert "`%s" % flag in reference
    assert "gcada (default 0.3; finite and > 0)" in reference and "cada (default 2.0; finite and > 0)" in reference


def test_every_option_of_the_parser_is_in_the_reference():
    reference = flagdoc.render()
    options = [o for a in build_parser()._actions for o in a.option_strings if o not in ("-h", "--help")]
    assert len(options) > 30
    for option in options:
        assert "`%s" % option in reference, option
    for once_missing in ("--state-server-restarts", "--python", "--launcher", "--env-server", "--sync-dst-dir"):
        assert "`%s " % once_missing in reference


def test_reference_expands_defaults_and_escapes_table_cells():
    reference = flagdoc.render()
    assert "%(default)" not in reference
    assert "(default: esync)" in reference
    assert "`--launcher {local,ssh}`" in reference
    for line in reference.splitlines():
        if line.startswith("| `"):
            assert line.count(" | ") == 1, line  # two cells: a '|' in help text would add one


def test_splice_needs_both_markers():
    with pytest.raises(ValueError, match="marker"):
        flagdoc.splice("no markers here", "x")
    text = "a\n%s\nold\n%s\nb" % (flagdoc.BEGIN, flagdoc.END)
    assert flagdoc.splice(text, "new\n") == "a\n%s\n\nnew\n\n%s\nb" % (flagdoc.BEGIN, flagdoc.END)


def test_check_command_reports_a_stale_file(tmp_path, capsys):
    path = tmp_path / "doc.md"
    path.write_text("x\n%s\nstale\n%s\n" % (flagdoc.BEGIN, flagdoc.END))
    assert flagdoc.main(["--check", str(path)]) == 1
    assert "stale" in capsys.readouterr().err
    assert flagdoc.main(["--write", str(path)]) == 0
    assert flagdoc.main(["--check", str(path)]) == 0
