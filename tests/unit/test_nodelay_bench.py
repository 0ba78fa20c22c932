"""mxhet-bench nodelay: the plan of runs and the report (no runs)."""
import pytest

from bench import cli, nodelay
from mxhet.errors import ConfigError


def _args(*argv):
    return cli.build_parser().parse_args(["nodelay", *argv])


def test_plan_sweeps_tau_on_each_engine_and_compares_modes_on_the_cpu_profile():
    runs = nodelay.plan(_args("--equal-iterations", "500"))
    labels = [label for _, label, _ in runs]
    assert labels[:2] == ["tau1-sim", "tau1-equal-sim"]
    assert [label for label in labels if label.endswith("-cluster") and label.startswith("tau")] == \
        ["tau%d-cluster" % t for t in nodelay.TAUS]           # equal gradients: simulator only
    tau8 = dict((label, spec) for _, label, spec in runs)["tau8-cluster"]
    assert tau8.mode == "nodelay" and tau8.slowdowns == (1.0,) * 4
    assert tau8.extra_train_args == ("--max-staleness", "8")
    assert ("--net-delay-ms", "50") == tuple(tau8.launcher_args[2:4])
    target = [(label, spec) for part, label, spec in runs if part == "target"]
    assert [label for label, _ in target] == ["%s-%s" % (m, e) for e in ("sim", "cluster") for m in nodelay.COMPARED]
    assert all(spec.slowdowns == (10.0, 10.0, 1.0, 1.0) for _, spec in target)


@pytest.mark.parametrize("argv, message", [
    (("--parts", "speed"), "unknown speed"),
    (("--engines", "gpu"), "unknown gpu"),
    (("--taus", "0,2"), "positive"),
    (("--taus", "a"), "integers"),
    (("--modes", "esync,nosuch"), "unknown nosuch"),
    (("--workers", "0"), "--workers"),
])
def test_plan_refuses_bad_settings(argv, message):
    with pytest.raises(ConfigError, match=message):
        nodelay.plan(_args(*argv))


def test_report_has_both_tables():
    row = {"engine": "sim", "mode": "nodelay", "tau": 8, "compute_ratio_min": 0.95, "compute_ratio_mean": 0.97,
           "waited_iterations": [1, 2], "iterations": 100, "final_accuracy": 0.8, "time_to_target_s": 12.5,
           "compute_ratio": [0.95, 0.99], "rounds": [10, 10], "slowdown": [10.0, 1.0]}
    result = {"command": ["mxhet-bench", "nodelay"], "machine": {"cpu": "x", "cores": 2},
              "settings": {"workers": 2, "delay_ms": 50.0, "base_iter": 0.05, "target_accuracy": 0.8,
                           "profile": "cpu"},
              "runs": [dict(row, part="tau"), dict(row, part="target")], "failures": []}
    text = nodelay.format_report(result)
    assert "| sim | equal time | 8 | 0.950 / 0.970 | 3 | 100 | 0.8000 |" in text
    assert "| sim | nodelay (tau 8) | 12.5 | 0.8000 | 0.95 0.99 | 10 |" in text
