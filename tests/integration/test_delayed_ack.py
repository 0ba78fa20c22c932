"""ESync's non-blocking mode (§4.2) and devices whose speed changes, with real processes.

The slowed device goes from 1x to 12x while another stays at 3x: far enough
apart that CPU contention on a 2-core machine cannot swap them.
"""
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)


def _run(tmp_path, child_pids, name, launcher_args, *train_args):
    out = tmp_path / name
    out.mkdir()
    proc = launch(["-s", "1", "--sync", "esync", *launcher_args], train_command(out, *train_args), out, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {w["slot"]: w for w in load_summary(out)["workers"]}


@pytest.mark.parametrize("ack", ["delayed", "blocking"])
def test_delayed_acks_never_wait_with_a_slow_link(tmp_path, child_pids, ack):
    workers = _run(tmp_path, child_pids, ack, ["-n", "3", "--slowdown", "1,1,10", "--net-delay-ms", "30"],
                   "--ack", ack, "--max-rounds", "3", "--time-budget", "120")
    for w in workers.values():
        assert w["rounds"] == 3
        assert w["rtt_s"] >= 0.06  # 30 ms each way
        assert len(w["round_queries"]) == 3
        if ack == "delayed":
            assert w["waited_iterations"] == 0
            assert sum(w["round_aborted"]) == w["aborted"]
        else:
            assert w["waited_iterations"] == w["iterations"] and w["aborted"] == 0
            assert w["round_blocked_s"][0] >= 0.06 * w["local_iters"][0]
    fast = workers[0]
    assert sum(fast["local_iters"]) > 3 * sum(workers[2]["local_iters"])


def test_device_slowed_mid_run_stops_being_fast(tmp_path, child_pids):
    switch = 6.0
    workers = _run(tmp_path, child_pids, "dynamic",
                   ["-n", "3", "--slowdown", "1,1,3", "--slowdown-schedule", "0:%g-=12" % switch],
                   "--time-budget", "16")
    changing, steady, slow = workers[0], workers[1], workers[2]
    ends = changing["round_end_s"]
    before = [k for k, t in zip(changing["local_iters"], ends) if t < switch]
    after_idx = [i for i, t in enumerate(ends) if t >= switch]
    assert before and len(after_idx) > 3
    assert max(before) >= 2                       # it was a fast device
    settled = after_idx[2:]                       # re-balanced within two rounds
    assert all(changing["local_iters"][i] == 1 for i in settled), changing["local_iters"]
    assert all(changing["round_slowest"][i] == changing["rank"] for i in settled)
    assert all(slow["round_slowest"][i] == changing["rank"] for i in settled)
    assert min(steady["local_iters"][i] for i in settled) >= 2
