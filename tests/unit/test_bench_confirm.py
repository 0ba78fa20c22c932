"""bench.confirm: a time to target counts only when its snapshot reaches the target on all test images."""
import json
import os

import pytest

from bench import confirm


def _summary(curve, final, target=0.8):
    return {"curve": curve, "final_accuracy": final, "target_accuracy": target, "train_time_s": curve[-1][0],
            "time_to_target_s": next((t for t, a in curve if a >= target), None),
            "evaluation": {"final_samples": 10000, "curve_samples": 1000}}


def test_candidates_are_confirmed_in_order_and_the_first_that_holds_counts():
    curve = [[0, 0.1], [10, 0.81], [20, 0.79], [30, 0.82], [40, 0.85], [50, 0.86]]
    full = {1: 0.79, 3: 0.805, 4: 0.9}
    scored = []

    def score(i):
        scored.append(i)
        return full[i]
    record = confirm.confirm(_summary(curve, 0.84), score)
    assert scored == [1, 3]                         # stops at the first confirmed candidate
    assert record["time_to_target_s"] == 30 and record["accuracy"] == 0.805
    assert record["curve_time_to_target_s"] == 10   # the unconfirmed first crossing, kept beside it
    assert [c["index"] for c in record["candidates"]] == [1, 3] and record["test_samples"] == 10000


def test_the_final_point_is_scored_on_all_images_already_and_no_candidate_holding_is_censored():
    curve = [[0, 0.1], [10, 0.81], [20, 0.805]]
    record = confirm.confirm(_summary(curve, 0.83), lambda i: 0.78)
    assert record["time_to_target_s"] == 20 and record["accuracy"] == 0.83   # the final point, not re-scored
    record = confirm.confirm(_summary(curve, 0.79), lambda i: 0.78)
    assert record["time_to_target_s"] is None and len(record["candidates"]) == 2


def test_a_recorded_confirmation_belongs_to_its_run_only(tmp_path):
    summary = _summary([[0, 0.1], [10, 0.9]], 0.9)
    (tmp_path / confirm.FILE).write_text(json.dumps(confirm.confirm(summary, lambda i: 0.9)))
    assert confirm.load(str(tmp_path), summary)["time_to_target_s"] == 10
    again = dict(summary, curve=[[0, 0.1], [5, 0.5], [10, 0.9]])   # the run was made again since
    assert confirm.load(str(tmp_path), again) is None


def test_a_snapshot_is_scored_on_every_test_image_on_a_network_of_its_own(tmp_path):
    """The real path: a fresh network, the snapshot's weights, 10,000 test images (an untrained small CNN
    scores near chance there, so its 1,000-image 'crossing' is not confirmed)."""
    mx = pytest.importorskip("mxnet")
    from mxhet import models
    net = models.get_model("smallcnn", classes=10, input_size=28)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net(mx.nd.zeros((1, 1, 28, 28)))
    os.makedirs(tmp_path / "snapshots")
    params = {name: p.data() for name, p in net.collect_params().items()}
    for i in range(2):
        mx.nd.save(str(tmp_path / "snapshots" / ("%06d.params" % i)), params)
    summary = dict(_summary([[0, 0.1], [10, 0.95]], 0.95), model="smallcnn", mode="sync", input_size=28,
                   batch_size=64, dist="iid", lr=0.1, seed=0, eval_samples=1000, num_workers=1, train_loss=[])
    summary["curve"] = [[0, 0.95], [10, 0.95]]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "worker-0.json").write_text(json.dumps({"slot": 0}))
    record = confirm.confirm_run(str(tmp_path))
    assert record["candidates"][0]["full_accuracy"] < 0.5 and record["time_to_target_s"] == 10
    assert json.loads((tmp_path / confirm.FILE).read_text())["candidates"][0]["index"] == 0
