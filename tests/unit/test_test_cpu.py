"""tools/test_cpu.py ranks a junit file's tests by the CPU seconds tests/conftest.py records."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "tools"))
import test_cpu  # noqa: E402

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.unit.test_a" name="test_one" time="3.5"><properties>
<property name="cpu_s" value="12.25" /></properties></testcase>
<testcase classname="tests.unit.test_a" name="test_two" time="1.0"><properties>
<property name="cpu_s" value="0.75" /></properties></testcase>
<testcase classname="tests.integration.test_b" name="test_three[x]" time="9.0"><properties>
<property name="cpu_s" value="47" /></properties></testcase>
<testcase classname="tests.unit.test_c" name="test_skipped" time="0.0"><skipped message="s" /></testcase>
</testsuite></testsuites>"""


def test_modules_and_tests_by_cpu_seconds(tmp_path, capsys):
    path = tmp_path / "t.xml"
    path.write_text(XML)
    rows = test_cpu.read(str(path))
    assert rows[0] == (12.25, 3.5, "tests.unit.test_a", "test_one") and rows[3][0] is None
    test_cpu.main([str(path), "--top", "2"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "4 tests, 60 CPU s (0.5 min on 2 cores), 14 s of test wall time"
    modules = out[out.index("modules by CPU s:") + 1:out.index("modules by CPU s:") + 3]
    assert [line.split()[-1] for line in modules] == ["tests.integration.test_b", "tests.unit.test_a"]
    assert modules[1].split()[:3] == ["13.0", "21.7%", "2"]
    assert out[-2].split()[0] == "47.0" and out[-2].endswith("test_b::test_three[x]")


def test_a_file_without_cpu_seconds_is_refused(tmp_path):
    path = tmp_path / "old.xml"
    path.write_text('<testsuites><testsuite><testcase classname="m" name="t" time="1" /></testsuite></testsuites>')
    with pytest.raises(SystemExit, match="records no cpu_s"):
        test_cpu.main([str(path)])
