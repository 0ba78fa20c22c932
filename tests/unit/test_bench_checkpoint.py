"""mxhet-bench's use of the simulator's checkpoints: the flags a run gets, what --resume keeps."""
import json

import pytest

from bench import presets, profiles, suite
from bench.runner import JobSpec
from mxhet.sim import checkpoint, cli


def _spec(mode, engine="sim", **kw):
    preset = presets.get("paper-sim")
    model = "resnet18_v1"
    record = {"base_iteration_s": preset.iteration_s[model], "input_size": preset.input_sizes[model]}
    return suite.job_spec(suite.RunKey(model, mode, "iid"), preset, profiles.BUILTIN["paper-sim"], record,
                          preset.time_budget, 0, engine=engine, **kw)


@pytest.mark.parametrize("mode", ["esync", "sync", presets.FAST_SYNC, presets.STANDALONE, "async", "dcasgd", "adsp",
                                  "localsgd", "ssp"])
def test_every_closed_division_mode_runs_with_checkpoints_and_resumes(tmp_path, mode):
    argv = _spec(mode, checkpoint_every_min=10, resume=True).launch_argv(str(tmp_path))
    i = argv.index("--checkpoint-every-min")
    assert argv[i + 1] == "10" and "--resume" in argv
    args = cli.build_parser().parse_args(argv[3:])   # python -m mxhet.sim's own parser takes them
    cli.make_job(args)
    assert args.checkpoint_dir == str(tmp_path / "checkpoint")
    assert checkpoint.without_checkpoint_flags(argv) == _spec(mode).launch_argv(str(tmp_path))


def test_the_heterogeneity_bench_s_deadline_run_is_checkpointed_and_resumed(tmp_path):
    """``mxhet-bench heterogeneity``'s recommended ESync (``--round-deadline``): a run cut short continues."""
    from bench import heterogeneity as het
    key, _ = het.plan(["resnet18_v1"], [117], ["recommended"], ["iid"], [0])["resnet18_v1-117x-recommended-iid"]
    argv = het.job_spec(key, presets.get(het.PRESET), checkpoint_every_min=10, resume=True).launch_argv(str(tmp_path))
    assert "--round-deadline" in argv and argv[argv.index("--checkpoint-every-min") + 1] == "10" and "--resume" in argv
    args = cli.build_parser().parse_args(argv[3:])
    cli.make_job(args)   # the simulator takes the checkpoint flags with the deadline


def test_no_checkpoint_flags_where_they_do_not_apply(tmp_path):
    assert "--checkpoint-every-min" not in _spec("nodelay", checkpoint_every_min=10).launch_argv(str(tmp_path))
    assert "--checkpoint-every-min" not in _spec("esync", checkpoint_every_min=0).launch_argv(str(tmp_path))
    cluster = _spec("esync", engine="cluster", checkpoint_every_min=10, resume=True)
    assert "--checkpoint-every-min" not in cluster.launch_argv(str(tmp_path)) and not cluster.sim_args
    fresh = _spec("esync", checkpoint_every_min=10).launch_argv(str(tmp_path))
    assert "--checkpoint-every-min" in fresh and "--resume" not in fresh


def test_a_run_finished_before_checkpoints_existed_is_kept_by_resume(tmp_path):
    """The simulator records its command without the checkpoint flags, so a run finished without them
    (or resumed with them) is the run a bench with them asks for."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plain = _spec("esync")
    argv = plain.launch_argv(str(run_dir))
    summary = {"train_time_s": 10.0, "sim": {"wall_s": 3.0, "command": ["python", "-m", "mxhet.sim"] + argv[3:]}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    kept = suite.finished_run(_spec("esync", checkpoint_every_min=10, resume=True), str(run_dir))
    assert kept is not None and kept["command"] == argv
    assert suite.finished_run(_spec("sync", checkpoint_every_min=10, resume=True), str(run_dir)) is None


def test_a_resumed_runs_wall_time_is_every_sessions():
    resumed = {"wall_s": 5.0, "sim": {"wall_s": 900.0, "checkpoint": {"resumed_at_s": [300.0]}}}
    assert suite._wall_s(resumed) == 900.0
    assert suite._wall_s({"wall_s": 5.0, "sim": {"wall_s": 4.0, "checkpoint": {"resumed_at_s": []}}}) == 5.0
    assert suite._wall_s({"wall_s": 5.0}) == 5.0
