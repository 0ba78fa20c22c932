"""CPU seconds one process spends importing MXNet: plainly, through mxhet's stored operator functions, and
lean as well (mxhet/mxnet_import.py). Every worker, server and simulator of a job pays this once.

    python bench/results/startup/measure.py [--repeats 5] [--out bench/results/startup/import.json]

Each setting is a fresh ``python -c`` whose user + system CPU time the kernel reports at its end
(``os.wait4``); settings alternate, so a busy spell of the machine falls on all of them. "first" starts
from an empty store (it compiles and writes); the others read the store the first left.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from bench.provenance import provenance  # noqa: E402

SETTINGS = (
    ("import mxnet", "import mxnet", False),
    ("import_mxnet(), empty store (first import)", "from mxhet.mxnet_import import import_mxnet; "
                                                   "import_mxnet(lean=False)", True),
    ("import_mxnet(), stored functions", "from mxhet.mxnet_import import import_mxnet; import_mxnet(lean=False)",
     False),
    ("import_mxnet(lean=True), stored functions", "from mxhet.mxnet_import import import_mxnet; "
                                                  "import_mxnet(lean=True)", False),
)


def cpu_seconds(code, store):
    env = dict(os.environ, MXHET_MXNET_CACHE=store, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit("%r ended with status %d" % (code, status))
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "import.json"))
    args = parser.parse_args(argv)
    samples = {name: [] for name, _, _ in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for index, (name, code, fresh) in enumerate(SETTINGS):
                store = os.path.join(tmp, "first%d" % repeat if fresh else "shared")
                if not fresh and not os.path.isdir(store):
                    cpu_seconds(SETTINGS[1][1], store)   # fill the shared store once, not measured
                samples[name].append(round(cpu_seconds(code, store), 3))
    rows = [{"setting": name, "cpu_s": samples[name], "median_cpu_s": round(statistics.median(samples[name]), 3)}
            for name, _, _ in SETTINGS]
    plain = rows[0]["median_cpu_s"]
    for row in rows:
        row["of_plain"] = round(row["median_cpu_s"] / plain, 3)
        print("%-45s median %.2f CPU s (%.0f%% of a plain import)  %s" % (
            row["setting"], row["median_cpu_s"], 100 * row["of_plain"], row["cpu_s"]))
    command = ["python", "bench/results/startup/measure.py"] + list(sys.argv[1:] if argv is None else argv)
    result = {"provenance": provenance(command=command), "repeats": args.repeats,
              "load_average_1min_at_end": round(os.getloadavg()[0], 2), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
