"""dylu on the real cluster (PS-LITE dist_async, three workers on loopback,
one 4x slower): the job ends cleanly, learns, every worker ends with the
same model, and the slow worker runs fewer local steps between its pushes
than the fast ones (Dynamic Local Updates). Iteration times are pinned with
--base-iter."""
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)


def test_dylu_learns_and_the_slow_worker_runs_fewer_local_steps(tmp_path, child_pids):
    out = tmp_path / "run"
    (tmp_path / "job").mkdir()
    proc = launch(["-n", "3", "-s", "1", "--sync", "dylu", "--slowdown", "1,1,4", "--base-iter", "0.05"],
                  train_command(out, "--eval-samples", "200", "--final-eval-samples", "500", "--time-budget", "6",
                                "--seed", "1"),
                  tmp_path / "job", child_pids)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not child_pids.alive()
    summary = load_summary(out)
    workers = {w["slot"]: w for w in summary["workers"]}
    assert summary["mode"] == "dylu" and len(workers) == 3
    assert len({w["final_model_sha256"] for w in workers.values()}) == 1
    assert summary["final_accuracy"] >= 0.4            # chance is 0.1
    for w in workers.values():
        assert w["rounds"] >= 2 and sum(w["local_iters"]) == w["iterations"]
        # the first round's H_i from the first iteration: MXNet's warm-up makes it anything up to H
        assert 1 <= w["local_iters"][0] <= 8
    assert workers[0]["iterations"] > workers[2]["iterations"]   # nobody waits for the slow worker
    slow, fast = workers[2]["local_iters"][1:], workers[0]["local_iters"][1:] + workers[1]["local_iters"][1:]
    assert max(slow) < 8 and 8 in fast
    assert sum(slow) / len(slow) < sum(fast) / len(fast)
