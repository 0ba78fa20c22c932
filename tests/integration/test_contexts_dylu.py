"""Two CPU contexts per worker in ``dylu`` (asynchronous local SGD), the one
mode test_contexts_all_modes.py and test_user_kvstore.py leave out: the delta
and the speed each worker shares come from the first copy, and every context
of every worker ends holding the job's final model."""
import pytest

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(120)


def test_two_contexts_per_worker_in_dylu_end_on_the_final_model(tmp_path, child_pids):
    out = tmp_path / "dylu"
    proc = launch(["-n", "2", "-s", "1", "--sync", "dylu", "--slowdown", "1,2", "--base-iter", "0.05",
                   "--timeout", "90"],
                  train_command(out, "--worker-contexts", "cpu,cpu", "--max-rounds", "6", "--time-budget", "60",
                                "--batch-size", "32", "--eval-samples", "100", "--final-eval-samples", "100"),
                  tmp_path, child_pids, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    workers = load_summary(out)["workers"]
    assert len(workers) == 2
    final = {w["final_model_sha256"] for w in workers}
    assert len(final) == 1 and "" not in final, final
    for w in workers:
        assert w["contexts"] == ["cpu(0)", "cpu(1)"], w["contexts"]
        assert w["iterations"] > 0, w
        assert w["context_model_sha256"] == [w["final_model_sha256"]] * 2, w["context_model_sha256"]
        assert w["contexts_equal"] and w["contexts_equal_after_steps"]
    assert not child_pids.alive()
