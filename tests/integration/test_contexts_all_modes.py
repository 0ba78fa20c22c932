"""Two CPU contexts per worker in gcada and cada, the modes test_modes_learn.py
(every other mode, with learning) leaves out: ``python -m mxhet.train
--worker-contexts cpu,cpu`` splits each batch across both contexts, the mode's
protocol runs once per worker on the first copy, and its state
(G-CADA's and CADA's stale gradients and downloads) stays in step with that
copy: every context of every worker ends holding the job's final model. The
same launch checks the contract every mode keeps (:func:`jobs.check_mode_contract`).

One short job per mode: 2 workers, one 2x slower, iteration times pinned
(``--base-iter``), a fixed number of rounds.
"""
import pytest

from .jobs import check_mode_contract, launch, load_summary, train_command

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("mode, launcher", [
    ("gcada", []),
    ("cada", []),
])
def test_two_contexts_per_worker_end_on_the_final_model(tmp_path, child_pids, mode, launcher):
    out = tmp_path / mode
    proc = launch(["-n", "2", "-s", "1", "--sync", mode, "--slowdown", "1,2", "--base-iter", "0.05",
                   "--timeout", "90", *launcher],
                  train_command(out, "--worker-contexts", "cpu,cpu", "--max-rounds", "6", "--time-budget", "60",
                                "--batch-size", "32", "--eval-samples", "100", "--final-eval-samples", "100"),
                  tmp_path, child_pids, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = load_summary(out)
    check_mode_contract(summary, mode, 2)   # every worker trained, exchanged and ends on one model
    workers = summary["workers"]
    if mode == "cada":
        # groups of one: every selected worker uploads, the slow one too (the servers wait for it)
        assert all(w["uploads"] == w["downloads"] > 0 for w in workers), workers
    for w in workers:
        assert w["contexts"] == ["cpu(0)", "cpu(1)"], w["contexts"]
        # every worker trained; gcada: the slower member of the one group never finishes first, its work is dropped
        assert w["iterations"] > 0 or (mode == "gcada" and w["aborted"] > 0 and w["downloads"] > 0), w
        # both copies are the final model, local parameters (BatchNorm statistics) included
        assert w["context_model_sha256"] == [w["final_model_sha256"]] * 2, w["context_model_sha256"]
        assert w["contexts_equal"] and w["contexts_equal_after_steps"]   # after the last step, before finish()
    assert not child_pids.alive()
