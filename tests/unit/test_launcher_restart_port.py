"""A worker started again (``--max-restarts``) listens on a new PS-LITE port: at its slot's old port,
PS-LITE's other nodes would not connect the dead worker id it is given to it when that id was another
slot's (ps-lite ``connected_nodes_`` is keyed by host:port), and it would hang in its first request
(docs/operations.md, two workers killed at once)."""
from mxhet.launcher.jobplan import ProcessSpec
from mxhet.launcher.supervisor import _fresh_port


def _worker(remote=False):
    return ProcessSpec("worker", 2, "127.0.0.1", ("python", "train.py"),
                       {"PORT": "40000", "DMLC_ROLE": "worker"}, remote=remote)


def test_a_local_worker_started_again_gets_a_free_port_other_than_its_slots():
    env = _fresh_port(_worker())
    assert set(env) == {"PORT"} and env["PORT"] != "40000" and int(env["PORT"]) > 0


def test_a_remote_worker_and_a_process_without_a_port_keep_theirs():
    assert _fresh_port(_worker(remote=True)) == {}
    assert _fresh_port(ProcessSpec("state-server", None, "127.0.0.1", ("python",), {})) == {}
