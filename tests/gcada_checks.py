"""Checks shared by the G-CADA tests of both engines (the simulator's and the real cluster's)."""


def check_first_finishers(iterations, workers, slow_slot, group_size):
    """Every iteration: exactly one upload per selected group; the slowed
    member never uploads and every gradient it started was dropped before it
    finished; every worker ends with the same model.

    Args:
        iterations: the State Server's per-iteration log (``gcada.iterations``).
        workers: the per-worker stats of the run's summary.
        slow_slot: the slot slowed so much that a teammate always finishes first.
        group_size: M/G.
    """
    assert iterations   # how many fit the budget is the bench's business
    for record in iterations:
        assert record["uploads"] == len(record["selected"]), record
        assert record["downloads"] <= group_size * len(record["selected"]), record
    assert sum(w["uploads"] for w in workers) == sum(r["uploads"] for r in iterations)
    slow = next(w for w in workers if w["slot"] == slow_slot)
    assert slow["downloads"] >= 1 and slow["uploads"] == 0
    assert slow["aborted"] == slow["downloads"] and slow["iterations"] == 0   # dropped at once, every time
    teammate = next(w for w in workers if w["slot"] == slow_slot - 1)
    assert teammate["uploads"] >= 1
    assert len({w["final_model_sha256"] for w in workers}) == 1
