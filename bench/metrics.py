"""Numbers derived from a job's ``summary.json`` (pure functions)."""


def _workers(summary):
    return sorted(summary["workers"], key=lambda w: w["slot"])


def samples_per_s(summary):
    """Training samples processed per second, all devices together."""
    t = summary["train_time_s"]
    return sum(w["samples"] for w in summary["workers"]) / t if t > 0 else 0.0


def bytes_per_s(summary):
    """Bytes pushed and pulled through the parameter server per second, all devices."""
    t = summary["train_time_s"]
    total = sum(w["bytes_pushed"] + w["bytes_pulled"] for w in summary["workers"])
    return total / t if t > 0 else 0.0


def compute_ratio(summary):
    """Per device (in slot order): compute time / (compute + wait) time."""
    return [w["compute_ratio"] for w in _workers(summary)]


def local_iters_mean(summary):
    """Per device (in slot order): mean local iterations per round (n_i)."""
    out = []
    for w in _workers(summary):
        iters = w["local_iters"]
        out.append(sum(iters) / len(iters) if iters else 0.0)
    return out


def adsp_search(summary):
    """An ADSP run's commit-rate search, short (its summary's ``adsp_search``: the counts and every
    comparison's time, rates, rewards and decision); None for other modes or a summary without it."""
    record = summary.get("adsp_search")
    if not record:
        return None
    return {"period": record["period"], "epoch": record["epoch"], "counts": record["counts"],
            "comparisons": [{k: c[k] for k in ("time", "rates", "rewards", "decision")}
                            for c in record["comparisons"]]}


def run_record(summary):
    """The bench's per-run record (ADSP runs also carry :func:`adsp_search`)."""
    record = {
        "model": summary["model"],
        "mode": summary["mode"],
        "dist": summary["dist"],
        "time_to_target_s": summary["time_to_target_s"],
        "final_accuracy": summary["final_accuracy"],
        "samples_per_s": samples_per_s(summary),
        "bytes_per_s": bytes_per_s(summary),
        "compute_ratio": compute_ratio(summary),
        "local_iters_mean": local_iters_mean(summary),
        "slowdown": [w["slowdown"] for w in _workers(summary)],
        "rounds": [w["rounds"] for w in _workers(summary)],
        "train_time_s": summary["train_time_s"],
        "curve": summary["curve"],
        "command": summary.get("command"),
        "evaluation": summary.get("evaluation"),
        "engine": summary.get("engine", "cluster"),
        # simulator runs: when the compute cap (max real iterations) ended the run, virtual seconds
        "stopped_at_cap_s": (summary.get("sim") or {}).get("stopped_at_cap_s"),
    }
    if summary["mode"] == "adsp":
        record["adsp_search"] = adsp_search(summary)
    return record
