"""ESync's non-blocking mode (§4.2) and devices whose speed changes, with real processes.

Iteration times are pinned with ``--base-iter`` (a device of slowdown f pads
each iteration to f x T), so what the tests check -- who waits, who aborts,
who is the slowest -- follows from the profile and not from how loaded the
machine is.
"""
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)

DELAY_S = 0.1   # emulated one-way link delay
BASE_ITER_S = 0.05


def _run(tmp_path, child_pids, name, launcher_args, *train_args):
    out = tmp_path / name
    out.mkdir()
    proc = launch(["-s", "1", "--sync", "esync", *launcher_args], train_command(out, *train_args), out, child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {w["slot"]: w for w in load_summary(out)["workers"]}


@pytest.mark.parametrize("ack", ["delayed", "blocking"])
def test_delayed_acks_never_wait_for_an_answer_and_abort_on_ready(tmp_path, child_pids, ack):
    # The slow device's iteration (10 x 50 ms) is far longer than a round trip (200 ms).
    workers = _run(tmp_path, child_pids, ack, ["-n", "3", "--slowdown", "1,1,10", "--base-iter", str(BASE_ITER_S),
                                               "--net-delay-ms", str(int(DELAY_S * 1000))],
                   "--ack", ack, "--max-rounds", "3", "--time-budget", "120")
    for w in workers.values():
        assert w["rounds"] == 3 and len(w["round_queries"]) == 3
        assert w["iterations"] == sum(w["local_iters"])       # aborted iterations are not counted as done
        if ack == "delayed":
            assert sum(w["round_aborted"]) == w["aborted"]
        else:
            # every query waited for its answer: never two unanswered at once
            assert w["max_queries_in_flight"] == 1 and w["aborted"] == 0
    if ack == "delayed":
        # the fast devices kept querying while earlier answers were on the 200 ms link: they never waited
        assert min(workers[s]["max_queries_in_flight"] for s in (0, 1)) >= 2
    slow = workers[2]
    assert slow["local_iters"] == [1, 1, 1]
    if ack == "delayed":
        # its READY arrives 200 ms into its next 500 ms iteration, which is abandoned
        assert slow["round_aborted"] == [1, 1, 1], slow["round_aborted"]


def test_device_slowed_mid_run_stops_being_fast(tmp_path, child_pids):
    # iteration times pinned: about 13 rounds of the 3x device (0.3 s) before the switch, and after it 6 s
    # of rounds of slot 0's 1.2 s iterations (6 rounds measured; the checks need at least 4)
    switch = 4.0
    workers = _run(tmp_path, child_pids, "dynamic",
                   ["-n", "3", "--slowdown", "1,1,3", "--slowdown-schedule", "0:%g-=12" % switch,
                    "--base-iter", "0.1"],
                   "--time-budget", "10")
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
