"""In the modes where no worker waits for another's next contribution (the
asynchronous gradient modes -- async, and ssp, which shares its exit path --,
asynchronous local SGD ``dylu``, Partial Reduce ``preduce``, ``gcada`` and
``cada``) a worker whose script stops calling ``step()`` leaves the job at
interpreter exit, and the others train on: on real processes, with every
worker running a different number of steps and the State Server's heartbeat
timeout shorter than the time the first one to leave waits for the last. In
``preduce`` (groups of P = 2 of N = 3) the last worker left trains on in
groups of one; in ``cada`` (groups of one) each departure retires a group,
and the servers' steps go on without it; in ``gcada`` (one group of three)
the teammates compute for the group."""
import pytest

from .jobs import run_leaving_job

pytestmark = pytest.mark.timeout(200)


@pytest.mark.parametrize("mode", ["async", "ssp", "dylu", "preduce", "cada", "gcada"])
def test_a_worker_that_ends_its_loop_first_leaves_and_every_worker_ends_with_the_global_model(tmp_path, child_pids,
                                                                                               mode):
    # slot 2: 30 x 4 x 0.06 s = 7.2 s of steps; slot 0 leaves after 10 (ssp: gated to about slot 2's pace, about
    # 18 of slot 2's steps = 4.3 s before the end), so the job goes on for longer than the 3 s heartbeat timeout
    # after it left: a departure the State Server did not learn of would fail the job
    proc, results = run_leaving_job(["-n", "3", "-s", "1", "--sync", mode, "--slowdown", "1,1,4", "--base-iter", "0.06",
                                     "--heartbeat-timeout", "3", "--timeout", "120"],
                                    tmp_path, child_pids, steps=10, workers=3, staggered=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [r["steps"] for r in results] == [10, 20, 30]
    if mode == "preduce":
        # every step ended in a reduce: slot 2's last ones, after the others left, in groups of one
        assert [r["rounds"] for r in results] == [10, 20, 30]
    # each pulled the servers' model after every worker's last push
    digests = {r["digest"] for r in results}
    assert len(digests) == 1 and "" not in digests and None not in digests, results
    assert not child_pids.alive()
