"""The servers must really run mxhet's updater, and say so loudly when they cannot.

Stock MXNet lets a server that cannot unpickle the optimizer carry on, storing
the plain sum of pushes: training silently goes wrong. mxhet catches it twice:
its own server process exits (code 3), and every worker probes the servers at
start-up.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from mxhet.launcher.ports import find_free_port

from .jobs import ROOT, launch

pytestmark = pytest.mark.timeout(180)

PROBE_WORKER = textwrap.dedent('''
    import os, sys
    import mxnet as mx
    from kvstore_ext import probe, updaters

    def main():
        kv = mx.kv.create("dist_sync")
        kv.init(0, mx.nd.zeros((2,)))
        kv.set_optimizer(updaters.ESyncAverage(kv.num_workers, epsilon=1.0))
        try:
            probe.verify_server_updater(kv, 1, synchronous=True)
        except probe.UpdaterNotRunning as exc:
            print("PROBE-FAILED: %s" % exc, flush=True)
            os._exit(0)
        print("PROBE-OK", flush=True)
        os._exit(0)

    main()
''')

ROGUE_WORKER = textwrap.dedent('''
    import os, sys
    import mxnet as mx

    class Rogue(mx.optimizer.SGD):
        """Defined in __main__: no server can unpickle it."""

    def main():
        kv = mx.kv.create("dist_sync")
        kv.init(0, mx.nd.zeros((2,)))
        kv.set_optimizer(Rogue())
        print("set_optimizer returned", flush=True)

    main()
''')


def _free_port():
    # a PS-LITE scheduler does not retry its bind: take a port no launcher of
    # another test will hand out (mxhet/launcher/ports.py)
    return find_free_port()


def test_probe_detects_a_stock_mxnet_server(tmp_path, child_pids):
    worker = tmp_path / "probe_worker.py"
    worker.write_text(PROBE_WORKER)
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(_free_port()),
               DMLC_NUM_WORKER="1", DMLC_NUM_SERVER="1", DMLC_NODE_HOST="127.0.0.1", OMP_NUM_THREADS="1")
    ours = dict(env, PYTHONPATH=ROOT)
    # the misconfigured server: stock MXNet's server loop, where kvstore_ext cannot be imported
    stock = dict(env, DMLC_ROLE="server")
    stock_server = "import sys; sys.modules['kvstore_ext'] = None; import mxnet"
    procs = [
        subprocess.Popen([sys.executable, "-m", "kvstore_ext.server"], env=dict(ours, DMLC_ROLE="scheduler"),
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True),
        subprocess.Popen([sys.executable, "-c", stock_server], env=stock, cwd=str(tmp_path),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True),
    ]
    child_pids.add(*(p.pid for p in procs))
    out = subprocess.run([sys.executable, str(worker)], env=dict(ours, DMLC_ROLE="worker"), cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert "PROBE-FAILED" in out.stdout, out.stdout + out.stderr
    assert "not running the mxhet updater" in out.stdout


def test_probe_passes_on_mxhet_servers(tmp_path, child_pids):
    worker = tmp_path / "probe_worker.py"
    worker.write_text(PROBE_WORKER)
    proc = launch(["-n", "1", "-s", "1", "--sync", "sync"], [sys.executable, str(worker)], tmp_path, child_pids)
    assert "PROBE-OK" in proc.stdout, proc.stdout + proc.stderr


def test_server_that_cannot_load_the_updater_ends_the_job(tmp_path, child_pids):
    worker = tmp_path / "rogue_worker.py"
    worker.write_text(ROGUE_WORKER)
    proc = launch(["-n", "2", "-s", "1", "--sync", "sync"], [sys.executable, str(worker)], tmp_path, child_pids)
    assert proc.returncode == 1
    assert "server 0" in proc.stderr and "cannot load the optimizer" in proc.stderr, proc.stderr[-3000:]
    assert "set_optimizer returned" not in proc.stdout
    assert not child_pids.alive()
