"""Where the test suite spends its CPU time, from a ``--junitxml`` file of ``make test``.

    PYTEST_ADDOPTS=--junitxml=runs/tests.xml make test
    python tools/test_cpu.py runs/tests.xml [--top 25]

tests/conftest.py records each test's CPU seconds (its own and its jobs' processes) as the property
``cpu_s``. On 2 cores the suite lasts about its CPU seconds / 2, so these, not the wall times of tests
that ran beside each other, say what to make cheaper.
"""
import argparse
import collections
import xml.etree.ElementTree as ET


def read(path):
    """``[(cpu_s, wall_s, module, test)]`` of every test in the file (cpu_s None where not recorded)."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cpu = float(props["cpu_s"]) if "cpu_s" in props else None
        rows.append((cpu, float(case.get("time", 0)), case.get("classname", ""), case.get("name", "")))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("junitxml")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    rows = read(args.junitxml)
    measured = [r for r in rows if r[0] is not None]
    if not measured:
        raise SystemExit("%s records no cpu_s: made before tests/conftest.py recorded it" % args.junitxml)
    total = sum(r[0] for r in measured)
    print("%d tests, %.0f CPU s (%.1f min on 2 cores), %.0f s of test wall time" % (
        len(rows), total, total / 120, sum(r[1] for r in rows)))
    by_module = collections.Counter()
    count = collections.Counter()
    for cpu, _, module, _ in measured:
        by_module[module] += cpu
        count[module] += 1
    print("\nmodules by CPU s:")
    for module, cpu in by_module.most_common(args.top):
        print("%8.1f %5.1f%% %4d  %s" % (cpu, 100 * cpu / total, count[module], module))
    print("\ntests by CPU s:")
    for cpu, wall, module, name in sorted(measured, reverse=True)[:args.top]:
        print("%8.1f (wall %6.1f)  %s::%s" % (cpu, wall, module.rsplit(".", 1)[-1], name))


if __name__ == "__main__":
    main()
