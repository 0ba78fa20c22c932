"""bench.experiment: the shared run loop (no jobs run: the runner is faked)."""
import json
import os

import pytest

from bench import experiment
from bench.runner import JobFailed
from mxhet.errors import ConfigError


def _finished(out, label, accuracy):
    directory = experiment.run_dir(str(out), label)
    os.makedirs(directory)
    with open(os.path.join(directory, "summary.json"), "w") as f:
        json.dump({"final_accuracy": accuracy}, f)
    with open(os.path.join(directory, "job.log"), "w") as f:
        f.write("$ python -m mxhet.sim --mode esync\nlog\n")


def _analyse(label, spec, summary, directory, context):
    return {"label": label, "spec": spec, "accuracy": summary["final_accuracy"], "context": context,
            "dir": os.path.basename(directory), "command": summary.get("command")}


def test_runs_in_order_goes_on_past_a_failure_and_reports_it(tmp_path, monkeypatch):
    ran = []

    def fake_run(spec, directory, desc):
        ran.append((spec, os.path.relpath(directory, str(tmp_path))))
        if spec == "bad":
            raise JobFailed("bad exited with code 1; last lines:\nboom")
        return {"final_accuracy": 0.5}

    monkeypatch.setattr(experiment, "run_with_bar", fake_run)
    seen = []
    rows, failures = experiment.run_jobs([("a", "good", 1), ("b", "bad", 2), ("c", "good", 3)], str(tmp_path),
                                         _analyse, after_each=lambda r, f: seen.append((len(r), len(f))))
    assert ran == [("good", os.path.join("runs", "a")), ("bad", os.path.join("runs", "b")),
                   ("good", os.path.join("runs", "c"))]
    assert [(r["label"], r["context"], r["dir"]) for r in rows] == [("a", 1, "a"), ("c", 3, "c")]
    assert failures == [{"label": "b", "error": "bad exited with code 1; last lines:\nboom"}]
    assert seen == [(1, 0), (1, 1), (2, 1)]
    assert experiment.failures_block(failures) == ["## Failed runs", "", "* b: bad exited with code 1; last lines:",
                                                   ""]
    assert experiment.failures_block([]) == []


def test_resume_reuses_finished_runs_and_only_runs_nothing(tmp_path, monkeypatch):
    _finished(tmp_path, "a", 0.8)
    ran = []
    monkeypatch.setattr(experiment, "run_with_bar", lambda spec, d, desc: ran.append(spec) or {"final_accuracy": 0.1})
    jobs = [("a", "sa", None), ("b", "sb", None)]
    rows, failures = experiment.run_jobs(jobs, str(tmp_path), _analyse, resume="only")
    assert ran == [] and [r["accuracy"] for r in rows] == [0.8] and failures[0]["label"] == "b"
    assert "not run" in failures[0]["error"]
    assert rows[0]["command"] == ["python", "-m", "mxhet.sim", "--mode", "esync"]
    rows, failures = experiment.run_jobs(jobs, str(tmp_path), _analyse, resume="on")
    assert ran == ["sb"] and [r["accuracy"] for r in rows] == [0.8, 0.1] and failures == []
    rows, _ = experiment.run_jobs(jobs, str(tmp_path), _analyse)
    assert ran == ["sb", "sa", "sb"] and [r["accuracy"] for r in rows] == [0.1, 0.1]


def test_bad_resume_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="maybe"):
        experiment.run_jobs([], str(tmp_path), _analyse, resume="maybe")


def test_comma_list_reads_in_order_without_repeats_and_names_the_flag_in_every_error():
    assert experiment.comma_list(" b, a,,b ", "modes", ("a", "b")) == ["b", "a"]
    assert experiment.comma_list("3,1,3", "seeds", range(0, 10), int) == [3, 1]
    for text, known, parse, message in (
            (" , ", None, str, "--flag: nothing given"),
            ("1,x", None, int, "--flag: cannot read '1,x'"),
            ("a,c,d", ("a", "b"), str, "--flag: unknown c, d; known: a, b"),
            ("2,12", range(0, 10), int, "--flag: unknown 12; known: integers from 0 to 9")):
        with pytest.raises(ConfigError) as info:
            experiment.comma_list(text, "flag", known, parse)
        assert str(info.value).startswith(message), str(info.value)
