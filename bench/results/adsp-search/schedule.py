"""When ADSP's comparisons of two commit rates fall in a preset's runs, from the scheduler's rule alone.

The real :class:`mxhet.control.adsp.ADSPScheduler` with Γ and the search epoch as the bench sets them
(``bench.suite._mode_args``) and the default 2 periods per evaluated rate, advanced to each model's ADSP
budget with scripted rewards: "always keep" (every search stops at its first comparison) and "always climb"
(every comparison wins), the fewest and the most comparisons a run can hold. Times are seconds from the
scheduler's start (the first commit report, about 0 s into a simulator run).

    PYTHONPATH=. python bench/results/adsp-search/schedule.py paper-sim > bench/results/adsp-search/schedule.json
"""
import json
import sys
from unittest import mock

from bench import presets, profiles, suite
from mxhet.control import adsp


def schedule(preset_name):
    preset = presets.get(preset_name)
    slowdowns = profiles.load(preset.profile).slowdowns
    rows = {}
    for model in preset.models:
        base, budget = preset.iteration_s[model], preset.budget_of(model, "adsp")
        args = suite._mode_args("adsp", slowdowns, base, budget)
        period, epoch = float(args[1]), float(args[3])
        row = {"base_iter_s": base, "slowest_iteration_s": max(slowdowns) * base, "budget_s": budget,
               "period_s": period, "epoch_s": epoch, "window_periods": adsp.DEFAULT_WINDOW_PERIODS,
               "budget_in_periods": budget / period}
        for name, climb in (("always_keep", False), ("always_climb", True)):
            rewards = iter(range(1, 10 ** 6)) if climb else iter(range(10 ** 6, 0, -1))
            with mock.patch.object(adsp, "fit_reward", lambda *a, **k: float(next(rewards))), \
                    mock.patch.object(adsp, "search_level", lambda samples: 1.0):
                sched = adsp.ADSPScheduler([0], period=period, epoch=epoch)
                sched.advance(budget)
            record = sched.search_record()
            row[name] = {"comparisons": record["counts"]["comparisons"],
                         "searches": record["counts"]["searches"],
                         "times_s": [round(c["time"], 1) for c in record["comparisons"]]}
        rows[model] = row
    return {"preset": preset_name, "profile": preset.profile, "slowdowns": list(slowdowns), "models": rows}


if __name__ == "__main__":
    json.dump(schedule(sys.argv[1] if len(sys.argv) > 1 else "paper-sim"), sys.stdout, indent=1)
    print()
