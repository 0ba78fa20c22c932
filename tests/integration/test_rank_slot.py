"""On one host a worker's PS-LITE rank is its launcher slot.

A script's ``store = kv.create('dist')`` shards its data by ``store.rank`` and
evaluates on rank 0, while the launcher's slot (``MXHET_SLOT``) picks the
worker's emulated slowdown and context: the two must name the same worker. The
launcher gives every worker a port increasing with its slot (``PORT``, which
PS-LITE's scheduler sorts by); with 5 workers a chance match would be 1 in
120. One launch, 5 workers and 2 servers: the harder of the two this file once
ran (a second, 4 workers and 1 server, proved nothing more).
"""
import json
import sys
import textwrap

import pytest

from .jobs import launch

pytestmark = pytest.mark.timeout(200)

SCRIPT = textwrap.dedent('''
    import json, os, sys
    import mxnet as mx

    store = mx.kv.create("dist_sync")
    slot = int(os.environ["MXHET_SLOT"])
    with open(os.path.join(sys.argv[1], "slot%d.json" % slot), "w") as f:
        json.dump({"slot": slot, "rank": store.rank, "num_workers": store.num_workers,
                   "port": int(os.environ["PORT"]), "slowdown": float(os.environ["MXHET_SLOWDOWN"])}, f)
''')


@pytest.mark.parametrize("slowdowns, servers", [("3,1,1,1,4", 2)])
def test_every_workers_pslite_rank_is_its_slot(tmp_path, child_pids, slowdowns, servers):
    n = len(slowdowns.split(","))
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    proc = launch(["-n", str(n), "-s", str(servers), "--sync", "sync", "--slowdown", slowdowns, "--timeout", "120"],
                  [sys.executable, str(script), str(tmp_path)], tmp_path, child_pids, timeout=160)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / ("slot%d.json" % slot)).read_text()) for slot in range(n)]
    assert [r["rank"] for r in results] == list(range(n)), results
    assert [r["slowdown"] for r in results] == [float(s) for s in slowdowns.split(",")]
    assert all(r["num_workers"] == n for r in results)
    ports = [r["port"] for r in results]
    assert ports == sorted(ports) and len(set(ports)) == n
    record = json.loads((tmp_path / "job.json").read_text())
    assert [p["port"] for p in record["processes"] if p["role"] == "worker"] == ports
    assert not child_pids.alive()
