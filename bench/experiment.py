"""The loop the one-off experiments share (``mxhet-bench nodelay``, ``preduce``, ...).

Each experiment plans its runs as :class:`bench.runner.JobSpec`\\ s, then
:func:`run_jobs` runs them in order under a progress bar, one directory per
run (``OUT/runs/LABEL``), goes on past a failed run and hands every finished
summary to the experiment's own ``analyse``. With ``resume`` it reuses runs
that already finished, so an interrupted grid goes on where it stopped, and
``resume="only"`` rebuilds a report from finished runs without running
anything. :func:`failures_block` is the report's "Failed runs" section;
:func:`comma_list` reads every experiment's comma-separated flags, :func:`write_outputs` writes
its JSON and report.
"""
import json
import os
import sys

from tqdm import tqdm

from mxhet.errors import ConfigError

from .runner import JobFailed, run_with_bar

RESUME = ("off", "on", "only")


def comma_list(text, flag, known=None, parse=str):
    """The comma-separated values of ``--flag``, each read by ``parse``, in order and without repeats.

    ``known``: the values allowed (after ``parse``; a ``range`` for numbers), or None for any.

    Raises:
        ConfigError: naming the flag and what is wrong: nothing given, a value ``parse`` cannot read, values
        not in ``known`` (with those that are).
    """
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise ConfigError("--%s: nothing given" % flag)
    try:
        values = [parse(x) for x in items]
    except ValueError:
        raise ConfigError("--%s: cannot read %r (comma-separated %s values)" % (flag, text, parse.__name__)) from None
    unknown = [x for x, v in zip(items, values) if known is not None and v not in known]
    if unknown:
        allowed = ("integers from %d to %d" % (known.start, known.stop - 1) if isinstance(known, range)
                   else ", ".join(map(str, known)))
        raise ConfigError("--%s: unknown %s; known: %s" % (flag, ", ".join(unknown), allowed))
    return list(dict.fromkeys(values))


def write_outputs(out, name, result, report=None):
    """``out/NAME.json`` (``result``, whole or not at all: an interrupted write keeps the one before) and,
    given the report's text, ``out/NAME.md``."""
    path = os.path.join(out, name + ".json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)
    if report is not None:
        with open(os.path.join(out, name + ".md"), "w") as f:
            f.write(report)


def run_dir(out, label):
    """The directory of the run ``label`` under the experiment's ``out``."""
    return os.path.join(out, "runs", label)


def load_finished(directory):
    """The summary of a run that finished in ``directory``, or None.

    The command comes from the first line of its ``job.log`` (``$ argv``), as
    :func:`bench.runner.run_job` wrote it.
    """
    path = os.path.join(directory, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    command = None
    try:
        with open(os.path.join(directory, "job.log")) as f:
            first = f.readline()
        if first.startswith("$ "):
            command = first[2:].split()
    except OSError:
        pass
    summary.setdefault("command", command)
    return summary


def run_jobs(jobs, out, analyse, width=20, resume="off", after_each=None):
    """Run every job of ``jobs`` in order; return ``(rows, failures)``.

    Args:
        jobs: iterable of ``(label, spec, context)``; ``context`` is anything
            the caller wants handed back to ``analyse``.
        out: the experiment's output directory; a run goes to ``out/runs/label``.
        analyse: ``callable(label, spec, summary, run_dir, context)`` returning
            the run's row (a dict) for the report.
        width: characters of the progress bar's label.
        resume: ``off`` runs every job; ``on`` reuses a run whose directory
            holds a finished summary; ``only`` runs nothing and reuses the
            finished runs, the others are listed as failures ("not run").
        after_each: optional ``callable(rows, failures)`` after every job, to
            write partial results while a long grid runs.

    Returns:
        ``rows`` (what ``analyse`` returned, in order) and ``failures``
        (``{"label", "error"}`` for each run that failed or was not run).

    Raises:
        ConfigError: for an unknown ``resume``.
    """
    if resume not in RESUME:
        raise ConfigError("resume must be one of %s, got %r" % (", ".join(RESUME), resume))
    rows, failures = [], []
    for label, spec, context in jobs:
        directory = run_dir(out, label)
        summary = load_finished(directory) if resume != "off" else None
        if summary is None and resume == "only":
            failures.append({"label": label, "error": "not run (no finished summary in %s)" % directory})
        elif summary is None:
            try:
                summary = run_with_bar(spec, directory, "%-*s" % (width, label))
            except JobFailed as exc:
                failures.append({"label": label, "error": str(exc)})
                tqdm.write("FAILED: %s" % exc, file=sys.stderr)
        if summary is not None:
            rows.append(analyse(label, spec, summary, directory, context))
        if after_each is not None:
            after_each(rows, failures)
    return rows, failures


def failures_block(failures):
    """The report's "Failed runs" section as markdown lines (none when nothing failed).

    A failure is a dict with ``error`` and ``label`` (or ``run``); only the
    first line of its error is shown.
    """
    if not failures:
        return []
    return ["## Failed runs", ""] + ["* %s: %s" % (f.get("label", f.get("run")), str(f["error"]).splitlines()[0])
                                     for f in failures] + [""]
