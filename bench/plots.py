"""PNG figures in the style of the ESync paper's Table 1 and Figures 3-5."""
import os

MODE_ORDER = ("sync", "async", "esync", "adsp", "ssp", "localsgd", "dcasgd", "nodelay", "local", "sync-fast")
LABELS = {"sync": "Sync", "async": "Async", "esync": "ESync", "adsp": "ADSP", "ssp": "SSP",
          "localsgd": "Local SGD", "dcasgd": "DC-ASGD", "preduce": "Partial Reduce", "nodelay": "No-delay ASGD",
          "local": "Standalone", "sync-fast": "Sync, fast devices only"}
LABELS["dylu"] = "Async Local-SGD (DyLU)"


def _variant(run):
    return run.get("variant", run["mode"])


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _sorted_runs(runs):
    return sorted(runs, key=lambda r: MODE_ORDER.index(_variant(r)) if _variant(r) in MODE_ORDER else 99)


def mean_curve(curves):
    """``(times, mean, low, high)`` of several seeds' curves ``[[t, acc], ...]``: each interpolated onto the
    union of their times up to the shortest run's end; low and high are the lowest and highest seed."""
    import numpy as np
    end = min(c[-1][0] for c in curves)
    times = np.unique(np.concatenate([[t for t, _ in c if t <= end] for c in curves]))
    values = np.array([np.interp(times, [t for t, _ in c], [a for _, a in c]) for c in curves])
    return times, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def table1(result, path):
    plt = _plt()
    rows = [r for r in result["rows"] if r["speedup"] is not None or r["paper"]]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(rows)), 3.6))
    xs = range(len(rows))
    ours = [r["speedup"] or 0 for r in rows]
    paper = [(r["paper"] or {}).get("speedup", 0) for r in rows]
    bars = ax.bar([x - 0.2 for x in xs], ours, 0.4, label="ours", color="tab:blue")
    for bar, r in zip(bars, rows):
        if r["speedup_kind"] == "lower_bound":
            bar.set_hatch("//")
            ax.annotate(">", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
        elif r["speedup"] is None:
            ax.annotate("n/a", (bar.get_x() + bar.get_width() / 2, 0), ha="center", va="bottom", fontsize=8)
    ax.bar([x + 0.2 for x in xs], paper, 0.4, label="paper", color="tab:gray")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([(r["paper"] or {}).get("name", r["model"]) for r in rows], fontsize=8)
    ax.set_ylabel("speedup of ESync over Sync")
    ax.set_title("Time to %.1f test accuracy (hatched: lower bound)%s" % (
        result["target_accuracy"], ", virtual time" if result.get("engine") == "sim" else ""), fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def curves(result, path):
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, dist in zip(axes, ("iid", "non-iid")):
        groups = {}
        for r in _sorted_runs([r for r in result["runs"] if r["dist"] == dist and r["curve"]]):
            groups.setdefault(_variant(r), []).append(r["curve"])
        for variant, group in groups.items():   # one line per variant: the mean over seeds, a band min-max
            t, acc, low, high = mean_curve(group)
            line, = ax.plot(t, acc, label=LABELS.get(variant, variant) + (" (%d seeds)" % len(group)
                                                                          if len(group) > 1 else ""),
                            linestyle="--" if variant in ("local", "sync-fast") else "-")
            if len(group) > 1:
                ax.fill_between(t, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.axhline(result["target_accuracy"], color="gray", linewidth=0.8, linestyle=":")
        ax.set_title("%s, %s" % (result["figure_model"], "i.i.d." if dist == "iid" else "non-i.i.d."), fontsize=9)
        if result.get("engine") == "sim":  # ESync's seconds beside Sync's thousands: a log axis
            ax.set_xscale("symlog", linthresh=10.0)
            ax.set_xlim(left=0)
            ax.set_xlabel("training time (virtual s, log scale past 10 s)")
        else:
            ax.set_xlabel("training time (s)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
        elif not groups:   # a bench committed part-way: say so rather than leave an empty frame
            ax.text(0.5, 0.5, "not measured yet", transform=ax.transAxes, ha="center", va="center",
                    color="gray")
    axes[0].set_ylabel("test accuracy")
    return _save(fig, path)


def throughput(result, path):
    plt = _plt()
    runs = _sorted_runs(result["runs"])
    names = [LABELS.get(_variant(r), _variant(r)) for r in runs]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    axes[0].bar(names, [r["samples_per_s"] for r in runs], color="tab:blue")
    axes[0].set_ylabel("samples per second")
    axes[1].bar(names, [r["bytes_per_s"] / 1e6 for r in runs], color="tab:orange")
    axes[1].set_ylabel("MB per second (push + pull)")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8, rotation=30)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Data throughput and traffic load (%s)" % result["figure_model"], fontsize=10)
    return _save(fig, path)


def compute_ratio(result, path):
    plt = _plt()
    runs = [r for r in _sorted_runs(result["runs"]) if r["mode"] != "local"]
    if not runs:
        return None
    devices = max(len(r["compute_ratio"]) for r in runs)
    width = 0.8 / devices
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(runs)), 3.6))
    slowdowns = runs[0]["slowdown"]
    for d in range(devices):
        values = [r["compute_ratio"][d] if d < len(r["compute_ratio"]) and r["compute_ratio"][d] is not None
                  else 0 for r in runs]
        label = "device %d (×%g)" % (d, slowdowns[d]) if d < len(slowdowns) else "device %d" % d
        ax.bar([i - 0.4 + width * (d + 0.5) for i in range(len(runs))], values, width, label=label)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([LABELS.get(r["mode"], r["mode"]) for r in runs], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("computing time / total time")
    ax.set_title("Computing time ratio per device (%s)" % result["figure_model"], fontsize=9)
    ax.legend(fontsize=7, ncol=min(devices, 3))
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def draw_all(results, out):
    """Draw every figure the results allow; returns the paths written."""
    jobs = [("table1", "table1.png", table1), ("curves", "fig3-curves.png", curves),
            ("throughput", "fig4-throughput.png", throughput),
            ("compute-ratio", "fig5-compute-ratio.png", compute_ratio)]
    paths = []
    for name, filename, draw in jobs:
        if name in results and results[name]["runs"]:
            path = draw(results[name], os.path.join(out, filename))
            if path:
                paths.append(path)
    return paths


def members_plot(summary_path, path):
    """Per round of a ``--score-members`` run (``summary.json``'s ``members``): each member's
    score before its push (dots, one colour per slot, its ``n_i`` range in the legend; under
    ``--round-deadline`` a late member's delta, from an older global model, as a cross), their
    mean and the new global model's score, over virtual time. Returns ``path``.

    Raises:
        ValueError: when the summary has no members record (run without ``--score-members``).
    """
    import json
    with open(summary_path) as f:
        summary = json.load(f)
    record = summary.get("members")
    if not record or not record.get("rounds"):
        raise ValueError("%s has no 'members' record: run python -m mxhet.sim with --score-members N"
                         % summary_path)
    rounds = record["rounds"]
    plt = _plt()
    fig, (ax, gap) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    slots = sorted({m["slot"] for r in rounds for m in r["members"]})
    cmap = plt.get_cmap("tab10")
    for i, slot in enumerate(slots):
        points = [(r["t_s"], m["accuracy"], m["n"], m.get("staleness", 0))
                  for r in rounds for m in r["members"] if m["slot"] == slot]
        ns = sorted({p[2] for p in points})
        label = "member %d (n_i %s)" % (slot, ns[0] if len(ns) == 1 else "%d-%d" % (ns[0], ns[-1]))
        on_time = [p for p in points if p[3] == 0]
        late = [p for p in points if p[3] > 0]
        if on_time:
            ax.scatter([p[0] for p in on_time], [p[1] for p in on_time], s=14, color=cmap(i % 10), alpha=0.7,
                       label=label, zorder=2)
        if late:   # --round-deadline: a delta from an older global model, its staleness beside it
            stale = sorted({p[3] for p in late})
            ax.scatter([p[0] for p in late], [p[1] for p in late], s=30, marker="x", color=cmap(i % 10),
                       label="%s late (staleness %s)" % (label, stale[0] if len(stale) == 1
                                                         else "%d-%d" % (stale[0], stale[-1])), zorder=2)
    times = [r["t_s"] for r in rounds]
    ax.plot(times, [r["members_mean"] for r in rounds], color="gray", linewidth=1.4, linestyle="--",
            label="members' mean", zorder=3)
    ax.plot(times, [r["global_accuracy"] for r in rounds], color="black", linewidth=1.8, marker="o", markersize=3,
            label="global model after the round", zorder=4)
    above = sum(r["global_accuracy"] >= r["members_mean"] for r in rounds)
    diffs = [r["global_accuracy"] - r["members_mean"] for r in rounds]
    # The mean and the global line lie close together: their difference gets a panel of its own.
    width = 0.8 * min([b - a for a, b in zip(times, times[1:]) if b > a] or [1.0])
    gap.bar(times, diffs, width=width, color=["tab:green" if d >= 0 else "tab:red" for d in diffs])
    gap.axhline(0.0, color="black", linewidth=0.8)
    gap.set_ylabel("global - mean")
    gap.grid(alpha=0.3)
    gap.set_xlabel("virtual time (s); members scored at their push, the global model at the round's end")
    ax.set_ylabel("accuracy on %d test images" % record["samples"])
    ax.set_title("%s, %s, %s workers: global >= members' mean in %d of %d rounds"
                 % (LABELS.get(summary.get("mode"), summary.get("mode")), summary.get("model"),
                    summary.get("num_workers"), above, len(rounds)), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def heterogeneity(doc, path):
    """``mxhet-bench heterogeneity``'s figure: time to target against the profile's largest slowdown (log
    x and y), one panel per model and data split, one line per variant: the mean over seeds with its 95%
    interval; a hollow marker where some seed did not reach the target (a lower bound: the training time
    counted), a hollow marker at the training time with an upward arrow where none did. Returns ``path``,
    or None without cells."""
    panels = list(dict.fromkeys((c["model"], c["dist"]) for c in doc["cells"]))
    if not panels:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    variants = list(doc["variants"])
    cmap = plt.get_cmap("tab10")
    for ax, (model, dist) in zip(axes[0], panels):
        for i, variant in enumerate(variants):
            points = sorted((c["profile"], c["variants"][variant]["time_to_target"]) for c in doc["cells"]
                            if (c["model"], c["dist"]) == (model, dist) and variant in c["variants"])
            if not points:
                continue
            color = cmap(i % 10)
            style = "--" if variant in doc.get("alternatives", ()) else "-"   # ESync solid, the rest dashed
            shown = [(p, s) for p, s in points if s["kind"] in ("measured", "lower_bound")]
            ax.plot([p for p, _ in shown], [s["mean"] for _, s in shown], style, color=color, marker="o",
                    label=variant)
            for p, s in shown:
                if s["low"] is not None:
                    ax.errorbar([p], [s["mean"]], yerr=[[s["mean"] - max(s["low"], 1e-3)], [s["high"] - s["mean"]]],
                                color=color, capsize=3, linewidth=1)
                if s["kind"] == "lower_bound":
                    ax.plot([p], [s["mean"]], "o", markerfacecolor="white", color=color)
            for p, s in points:
                if s["kind"] == "none_reached":
                    ax.plot([p], [s["bound"]], "^", markerfacecolor="white", color=color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sorted({c["profile"] for c in doc["cells"]}))
        ax.set_xticklabels(["%dx" % p for p in sorted({c["profile"] for c in doc["cells"]})])
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel("largest slowdown of the profile")
        ax.set_ylabel("virtual s to %.2f (confirmed on all test images)" % doc["target_accuracy"])
        ax.set_title("%s, %s" % (model, "i.i.d." if dist == "iid" else "non-i.i.d."), fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, path)
