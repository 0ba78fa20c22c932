"""mxhet-bench rescore: a finished run's snapshots scored again with the current protocol."""
import json

import mxnet as mx

from bench import cli, rescore
from mxhet import models


def test_a_run_is_scored_again_from_its_snapshots(tmp_path):
    run = tmp_path / "runs" / "smallcnn-sync-iid"
    (run / "snapshots").mkdir(parents=True)
    net = models.get_model("smallcnn")
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 1, 28, 28)))
    for i in range(2):
        mx.nd.save(str(run / "snapshots" / ("%06d.params" % i)), {k: p.data() for k, p in net.collect_params().items()})
    old = {"mode": "sync", "model": "smallcnn", "input_size": 28, "dist": "iid", "batch_size": 64, "lr": 0.05,
           "seed": 0, "ack": None, "num_workers": 1, "target_accuracy": 0.8, "time_to_target_s": None,
           "final_accuracy": 0.5, "train_time_s": 3.0, "curve": [[0.0, 0.5], [3.0, 0.5]], "train_loss": [],
           "eval_samples": 100, "workers": []}
    (run / "summary.json").write_text(json.dumps(old))
    (run / "worker-0.json").write_text(json.dumps({"slot": 0}))
    new = rescore.rescore_run(str(run))
    assert [t for t, _ in new["curve"]] == [0.0, 3.0]
    assert new["final_accuracy"] == new["curve"][-1][1] != 0.5          # scored again, on the whole test set
    assert new["evaluation"]["final_samples"] == 10000 and new["rescored_from"]["final_accuracy"] == 0.5
    assert json.loads((run / "summary.json").read_text())["final_accuracy"] == new["final_accuracy"]


def test_rescore_needs_a_bench_output(tmp_path, capsys):
    assert cli.main(["rescore", "--out", str(tmp_path)]) == 2
    assert "no experiment JSON" in capsys.readouterr().err
