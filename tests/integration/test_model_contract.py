"""The mode x model contract, on the paper's own networks.

* A model with BatchNorm (ResNet-18-v1) through each way a mode treats its
  statistics (parameters with ``grad_req='null'``): kept local beside averaged
  gradients (``sync``; ``async``, ``dcasgd`` and ``ssp`` share its code), exchanged
  with the rest of the model (``localsgd``; ``adsp`` and ``preduce`` also exchange
  whole models, with no case for the statistics), and the modes with their own handling
  (``nodelay``, ``gcada``; ``cada`` is ``gcada`` with groups of one). ``esync``
  runs on every zoo model below. Every registered mode keeps the contract on
  the small CNN (``test_modes_learn.py``, ``test_contexts_all_modes.py``); running
  them all again on ResNet-18 proved nothing more.
* Every zoo model of the paper through ESync with delayed ACKs, with at least
  one iteration aborted on a READY.

Each job must exit cleanly, write a complete summary, leave every worker
holding the same global model after the last aggregation (the digest each
worker takes after its final pull), and have its accuracy evaluated, with
precise BatchNorm where the model has BatchNorm. Inputs are tiny (8 px for
ResNet-18). The BatchNorm-path jobs run a fixed number of rounds at pinned
iteration times (a loaded machine changes how long they take, not how far they
train), enough for ResNet-18 at 8 px to score well above chance (gcada's
excepted, below): the statistics each path keeps, exchanges or recomputes
must give a model that learned. The two-round jobs of every zoo model are too short to learn (each
scored within noise of chance); there the check on the model is that every
worker ends holding the same one. Learning on the small CNN: every mode in
``test_modes_learn.py``, and gcada/cada at their own defaults in
``test_mode_contract.py``.
"""
import os

import numpy as np
import pytest

from mxhet.models import MODEL_NAMES, get_model, min_input_size

from .jobs import launch, load_summary, train_command

pytestmark = pytest.mark.timeout(300)

WORKER_KEYS = {"rank", "slot", "context", "slowdown", "rounds", "local_iters", "iterations", "samples",
               "compute_s", "wait_s", "bytes_pushed", "bytes_pulled", "final_model_sha256", "final_model_keys"}
SUMMARY_KEYS = {"mode", "model", "input_size", "final_accuracy", "curve", "time_to_target_s", "evaluation",
                "workers", "train_time_s"}
RESNET18_BN_LAYERS = 20
ZOO = [name for name in MODEL_NAMES if name not in ("smallcnn", "linear")]   # the ESync paper's networks
TINY = {name: max(8, min_input_size(name)) for name in ZOO}
EVAL = ("--eval-interval", "1000", "--eval-samples", "100", "--final-eval-samples", "300", "--bn-batches", "2")
GLOBAL_LR = 2.0   # ResNet-18's ESync runs: a server step that is not the mean, which statistics must not take


def _run(tmp_path, child_pids, launcher_args, model, *train_args):
    out = tmp_path / "out"
    # (argparse keeps the last of a repeated option: these override train_command's defaults)
    command = train_command(out, "--model", model, "--input-size", str(TINY[model]), "--batch-size", "16",
                            *EVAL, *train_args)
    proc = launch(["-s", "1", *launcher_args], command, tmp_path, child_pids, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not child_pids.alive()
    return load_summary(out)


def _check_contract(summary, mode, model, workers, learns=False):
    """``learns``: the run is long enough to learn, so the final model must score well above chance;
    otherwise the check on the model is that every worker holds the same one."""
    assert SUMMARY_KEYS <= set(summary) and summary["mode"] == mode and summary["model"] == model
    assert len(summary["workers"]) == workers
    for w in summary["workers"]:
        assert WORKER_KEYS <= set(w), sorted(WORKER_KEYS - set(w))
        assert w["rounds"] > 0 and w["final_model_keys"] > 0
        # gcada: a member slower than its whole group never finishes first; all its work is dropped
        assert w["samples"] > 0 or (mode == "gcada" and w["aborted"] > 0 and w["downloads"] > 0)
    assert len({w["final_model_sha256"] for w in summary["workers"]}) == 1, "workers ended with different models"
    # evaluated on exactly the 300 final images: a count of correct ones over 300
    correct = summary["final_accuracy"] * 300
    assert correct == pytest.approx(round(correct), abs=1e-6), correct
    assert summary["curve"][-1][1] == pytest.approx(summary["final_accuracy"], abs=1e-4)
    assert summary["evaluation"]["final_samples"] == 300
    if learns:
        # chance is 0.1 (the initial model scores 0.12 on these 300 images, sd 0.017 at chance); the
        # BatchNorm-path runs ended on 0.25-0.40 with these round counts; a nodelay transfer round holds fewer
        # iterations on a loaded machine (it scored 0.167 after 5 once), so it runs 8
        assert summary["final_accuracy"] >= 0.2, summary["curve"]


@pytest.mark.parametrize("mode, rounds, learns", [
    ("sync", 6, True), ("localsgd", 2, True), ("nodelay", 8, True),
    # gcada's rounds on ResNet-18 cost seconds each (AMSGrad on the servers, a download per member): it
    # scored 0.21-0.25, 0.24 and 0.28 after 2, 3 and 4 rounds, at 19-49 s a job; 2 rounds and equal models here,
    # its learning at its defaults is test_mode_contract.py's
    ("gcada", 1, False),
])
def test_each_batchnorm_path_on_resnet18(tmp_path, child_pids, mode, rounds, learns):
    """One mode per BatchNorm path (above), for a fixed number of rounds (localsgd: of 8 local steps), so a
    loaded machine changes how long the run takes, not how far it trains."""
    launcher = ["-n", "3", "--sync", mode, "--slowdown", "1,1,3", "--base-iter", "0.05"]
    summary = _run(tmp_path, child_pids, launcher, "resnet18_v1", "--max-rounds", str(rounds), "--time-budget", "120")
    _check_contract(summary, mode, "resnet18_v1", 3, learns=learns)
    ev = summary["evaluation"]
    assert ev["batchnorm"] == "precise" and ev["bn_layers"] == RESNET18_BN_LAYERS and ev["bn_batches"] == 2


@pytest.mark.parametrize("model", ZOO)
def test_every_paper_model_through_esync_with_delayed_acks(tmp_path, child_pids, model):
    # the slow device's READY comes one round trip (2 x 20 ms) into its next
    # iteration of at least 6 x 0.1 s: that iteration is aborted every round
    global_lr = ("--global-lr", str(GLOBAL_LR), "--dump-rounds", "2") if model == "resnet18_v1" else ()
    summary = _run(tmp_path, child_pids, ["-n", "2", "--sync", "esync", "--slowdown", "1,6", "--base-iter", "0.1",
                                          "--net-delay-ms", "20"],
                   model, "--ack", "delayed", "--max-rounds", "2", "--time-budget", "120", *global_lr)
    _check_contract(summary, "esync", model, 2)
    if global_lr:
        _check_statistics_take_their_mean(tmp_path / "out", model, rounds=2, slots=(0, 1))
    assert summary["ack"] == "delayed"
    assert all(w["rounds"] == 2 for w in summary["workers"])
    assert sum(w["aborted"] for w in summary["workers"]) >= 1
    ev = summary["evaluation"]
    assert ev["batchnorm"] == ("none in model" if model == "alexnet" else "precise")


def _check_statistics_take_their_mean(out, model, rounds, slots):
    """Each dumped round moved the global model by ε times the mean of what its members pushed (the dumps
    hold each member's push before ε), and its BatchNorm running statistics by that mean alone: ε is a
    step size of the weights, and statistics moved ε times their change may turn a variance negative.
    The members of a round are the slots that dumped it. Each dump's "before" is the model its member's delta
    started from: the round's global model for a member of the round before (every member in round 0), an older
    one for a member late in it (under load a fast device may be the late one), so the check starts from such a
    member."""
    net = get_model(model, classes=10, input_size=TINY[model])
    net.initialize()
    import mxnet as mx
    net(mx.nd.zeros((1, 1, TINY[model], TINY[model])))
    statistics = [p.grad_req == "null" for p in sorted(net.collect_params().values(), key=lambda p: p.name)]
    assert sum(statistics) == 2 * RESNET18_BN_LAYERS

    def dump(slot, r):
        return os.path.join(str(out), "dump", "slot%d_round%d.npz" % (slot, r))

    moved = 0
    for r in range(rounds):
        members = [s for s in slots if os.path.exists(dump(s, r))]
        dumps = [np.load(dump(s, r)) for s in members]
        anchor = next((d for s, d in zip(members, dumps) if r == 0 or os.path.exists(dump(s, r - 1))), None)
        assert anchor is not None, "no member of round %d took part in the round before" % r
        assert len([f for f in anchor.files if f.startswith("after_")]) == len(statistics)
        for i, plain in enumerate(statistics):
            pushed = np.mean([d["delta_%d" % i] for d in dumps], axis=0)
            np.testing.assert_allclose(anchor["after_%d" % i],
                                       anchor["before_%d" % i] + (1.0 if plain else GLOBAL_LR) * pushed,
                                       rtol=1e-4, atol=1e-6, err_msg="key %d, round %d" % (i, r))
            moved += plain and np.abs(pushed).max() > 1e-3
    assert moved, "no statistic moved: the two rules were not told apart"


def test_esync_round_deadline_with_a_global_lr_on_resnet18(tmp_path, child_pids):
    """The round deadline's pushes (each member's share of the round, a late one's included) on a model with
    BatchNorm: the weights take ε times the round's combined delta, the statistics the combined delta. Whether
    the slow device is late in a round depends on the machine's load (a fast ResNet-18 iteration may outlast
    its pinned time); the scaling of the pushes does not."""
    summary = _run(tmp_path, child_pids, ["-n", "3", "--sync", "esync", "--slowdown", "1,1,3", "--base-iter", "0.05"],
                   "resnet18_v1", "--round-deadline", "2", "--global-lr", str(GLOBAL_LR), "--max-rounds", "4",
                   "--dump-rounds", "4", "--time-budget", "120")
    _check_contract(summary, "esync", "resnet18_v1", 3)
    assert all(w["deadline_pushes"] for w in summary["workers"])   # every round was a deadline round
    _check_statistics_take_their_mean(tmp_path / "out", "resnet18_v1", rounds=4, slots=(0, 1, 2))


def test_group_norm_on_the_real_cluster(tmp_path, child_pids):
    """--norm group through ESync with the outer optimizer on PS-LITE: GroupNorm has no grad_req='null'
    statistics, so every parameter of ResNet-18 is a delta on the servers, and none is left to recompute."""
    summary = _run(tmp_path, child_pids, ["-n", "3", "--sync", "esync", "--slowdown", "1,1,3", "--base-iter", "0.05"],
                   "resnet18_v1", "--norm", "group", "--outer-optimizer", "nesterov", "--max-rounds", "3",
                   "--time-budget", "60")
    _check_contract(summary, "esync", "resnet18_v1", 3)
    assert summary["norm"] == "group"
    ev = summary["evaluation"]
    assert ev["batchnorm"] == "none in model" and ev["bn_layers"] == 0
    assert all(w["rounds"] == 3 for w in summary["workers"])
