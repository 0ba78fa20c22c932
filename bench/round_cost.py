"""The fixed cost of an ESync round on the real cluster, before and after a change.

Runs the same ESync job (by default the demo's: 3 workers, slowdown 1,1,10,
the small CNN, 60 s) with two checkouts of mxhet, interleaved (before, after,
before, after, ...) so that load from other processes on the machine falls on
both alike. For each run it reports, per device: blocked seconds per round
(State Server waits plus push/pull), its split into State Server and push/pull
time, the compute ratio, the mean iteration time, and the ratio of the fast
devices' blocked time per round to the fastest device's iteration time.

Usage::

    python -m bench.round_cost --code before=<dir>,after=. --ack blocking,delayed \\
        --repeat 2 --out runs/round-cost

``<dir>`` holds another mxhet (e.g. ``git archive <commit> | tar -x -C <dir>``);
each run starts in that directory so its workers and servers import it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from .provenance import provenance
from .runner import JobFailed, JobSpec, machine_info, run_job


def _pairs(text):
    out = []
    for item in text.split(","):
        label, _, path = item.partition("=")
        if not label or not path:
            raise argparse.ArgumentTypeError("expected LABEL=DIR[,LABEL=DIR...], got %r" % text)
        out.append((label, os.path.abspath(path)))
    return out


def summarize(summary):
    """Per-device round costs of one finished job's ``summary.json``."""
    workers = sorted(summary["workers"], key=lambda w: w["slot"])
    rows = []
    for w in workers:
        rounds = max(1, len(w["round_blocked_s"]))
        rows.append({
            "slot": w["slot"], "slowdown": w["slowdown"], "rounds": w["rounds"],
            "iteration_s": w["compute_s"] / max(1, w["iterations"] + w["aborted"]),
            "blocked_per_round_s": sum(w["round_blocked_s"]) / rounds,
            "query_per_round_s": w["query_s"] / rounds,
            "sync_per_round_s": w["sync_s"] / rounds,
            "compute_ratio": w["compute_ratio"],
            "mean_n_i": statistics.mean(w["local_iters"]) if w["local_iters"] else 0.0,
            "rtt_s": w["rtt_s"], "aborted": w["aborted"],
        })
    fastest = min(rows, key=lambda r: r["slowdown"])
    fast = [r for r in rows if r["slowdown"] == fastest["slowdown"]]
    return {
        "devices": rows,
        "fastest_iteration_s": fastest["iteration_s"],
        "fast_blocked_per_round_s": statistics.mean(r["blocked_per_round_s"] for r in fast),
        "fast_compute_ratio": statistics.mean(r["compute_ratio"] for r in fast),
        "blocked_over_iteration": statistics.mean(r["blocked_per_round_s"] for r in fast) / fastest["iteration_s"],
        "final_accuracy": summary.get("final_accuracy"),
    }


def breakdown(summary):
    """Where a fast device's blocked time per round goes, from the workers' per-round exchange times.

    Every worker records, per round, when its push/pull began, was issued and finished
    (``round_exchange_*_s``, seconds since its training started) and the clock at that start
    (``start_clock_s``: ``time.monotonic``, shared by the processes of one machine), so the
    rounds of all workers line up. Per fast device and round: ``issue`` = packing and issuing
    the push and pull; ``wait_last_push`` = from its own push to the last worker's push starting
    (normally the slowest device: Algorithm 2's margin plus whatever delays that device);
    ``after_last_push`` = from the last push starting to its own pull finishing (the last push's
    transfer, the servers' updater, the pull: the exchange itself). ``query`` = its State Server
    time per round. Returns None when the workers did not record exchange times (older code).
    """
    workers = sorted(summary["workers"], key=lambda w: w["slot"])
    if not all(w.get("round_exchange_start_s") and w.get("start_clock_s") for w in workers):
        return None
    rounds = min(len(w["round_exchange_start_s"]) for w in workers)
    start = [[w["start_clock_s"] + t for t in w["round_exchange_start_s"][:rounds]] for w in workers]
    issued = [[w["start_clock_s"] + t for t in w["round_exchange_issued_s"][:rounds]] for w in workers]
    end = [[w["start_clock_s"] + t for t in w["round_exchange_end_s"][:rounds]] for w in workers]
    last = [max(start[i][r] for i in range(len(workers))) for r in range(rounds)]
    fastest = min(w["slowdown"] for w in workers)
    per_device = []
    for i, w in enumerate(workers):
        ex = [end[i][r] - start[i][r] for r in range(rounds)]
        per_device.append({
            "slot": w["slot"], "slowdown": w["slowdown"], "rounds": rounds,
            "exchange_s": statistics.mean(ex),
            "issue_s": statistics.mean(issued[i][r] - start[i][r] for r in range(rounds)),
            "wait_last_push_s": statistics.mean(max(0.0, last[r] - start[i][r]) for r in range(rounds)),
            "after_last_push_s": statistics.mean(end[i][r] - max(start[i][r], last[r]) for r in range(rounds)),
            "last_to_push": sum(1 for r in range(rounds) if start[i][r] == last[r]),
            "query_s": w["query_s"] / max(1, len(w["round_blocked_s"])),
            "blocked_s": sum(w["round_blocked_s"]) / max(1, len(w["round_blocked_s"])),
        })
    fast = [d for d in per_device if d["slowdown"] == fastest]
    mean = lambda key: statistics.mean(d[key] for d in fast)  # noqa: E731
    return {"devices": per_device, "fast": {key: mean(key) for key in
                                            ("blocked_s", "query_s", "exchange_s", "issue_s", "wait_last_push_s",
                                             "after_last_push_s")}}


def format_report(runs, model, slowdowns, budget):
    """Markdown: one line per run, then the median of each (label, ack) over repeats."""
    lines = ["ESync on the cluster: %s, slowdown %s, %g s per run. Blocked = State Server waits + push/pull, per "
             "round, mean of the fast devices; ratio = blocked / the fastest device's mean iteration." % (
                 model, ",".join("%g" % f for f in slowdowns), budget), "",
             "| run | fast blocked / round (ms) | fastest iteration (ms) | ratio | fast compute ratio "
             "| State Server / round per device (ms) | push/pull / round per device (ms) | n_i per device |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append("| %s-%s-%d | %.1f | %.1f | %.2f | %.2f | %s | %s | %s |" % (
            r["label"], r["ack"], r["repeat"], 1000 * r["fast_blocked_per_round_s"], 1000 * r["fastest_iteration_s"],
            r["blocked_over_iteration"], r["fast_compute_ratio"],
            " / ".join("%.1f" % (1000 * d["query_per_round_s"]) for d in r["devices"]),
            " / ".join("%.1f" % (1000 * d["sync_per_round_s"]) for d in r["devices"]),
            " / ".join("%.1f" % d["mean_n_i"] for d in r["devices"])))
    lines += ["", "| code | ack | runs | median fast blocked / round (ms) | median ratio | median fast compute ratio "
                  "| median State Server / round, fast (ms) | median push/pull / round, slowest device (ms) |",
              "|---|---|---|---|---|---|---|---|"]
    groups = {}
    for r in runs:
        groups.setdefault((r["ack"], r["label"]), []).append(r)
    for (ack, label), rs in sorted(groups.items()):
        fast = [d for r in rs for d in r["devices"] if d["slowdown"] == min(x["slowdown"] for x in r["devices"])]
        slow = [d for r in rs for d in r["devices"] if d["slowdown"] == max(x["slowdown"] for x in r["devices"])]
        lines.append("| %s | %s | %d | %.1f | %.2f | %.2f | %.1f | %.1f |" % (
            label, ack, len(rs), 1000 * statistics.median(r["fast_blocked_per_round_s"] for r in rs),
            statistics.median(r["blocked_over_iteration"] for r in rs),
            statistics.median(r["fast_compute_ratio"] for r in rs),
            1000 * statistics.median(d["query_per_round_s"] for d in fast),
            1000 * statistics.median(d["sync_per_round_s"] for d in slow)))
    split = [r for r in runs if r.get("breakdown")]
    if split:
        lines += ["", "Where a fast device's blocked time per round goes (ms, mean of the fast devices; "
                      "`bench.round_cost.breakdown`): State Server = its queries and RESET; issue = packing and "
                      "issuing push and pull; wait for the last push = from its push until the last worker's push "
                      "began; exchange after the last push = that push's transfer, the servers' updater and the "
                      "pull; the slowest device's own push/pull for comparison.", "",
                  "| run | fastest iteration | blocked | State Server | issue | wait for the last push "
                  "| exchange after the last push | slowest device's push/pull | rounds the slowest pushed last |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in split:
            b = r["breakdown"]
            f = b["fast"]
            slowest = max(b["devices"], key=lambda d: d["slowdown"])
            lines.append("| %s-%s-%d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %d of %d |" % (
                r["label"], r["ack"], r["repeat"], 1000 * r["fastest_iteration_s"], 1000 * f["blocked_s"],
                1000 * f["query_s"], 1000 * f["issue_s"], 1000 * f["wait_last_push_s"],
                1000 * f["after_last_push_s"], 1000 * slowest["exchange_s"], slowest["last_to_push"],
                slowest["rounds"]))
    return "\n".join(lines) + "\n"


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_costs(count=2000, warmup=200):
    """A worker's State Server costs on loopback, seconds: a blocking query's round
    trip (StateClient.query against a State Server process), and what the training
    thread spends with delayed ACKs: sending a query, polling, sending RESET."""
    from mxhet.control.client import StateClient
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mxhet.state_server", "--bind", "tcp://127.0.0.1:%d" % port,
                               "--num-workers", "1", "--heartbeat-timeout", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = StateClient("tcp://127.0.0.1:%d" % port, rank=0, slot=0, timeout=30)
        client.register(heartbeat=0)
        blocking, send, poll, reset = [], [], [], []
        k = 0
        for i in range(warmup + count):
            k += 1
            t0 = time.perf_counter()
            client.query(0, k, 0.01)
            t1 = time.perf_counter()
            if i >= warmup:
                blocking.append(t1 - t0)
        for i in range(count):
            k += 1
            t0 = time.perf_counter()
            client.send_query(0, k, 0.01)
            t1 = time.perf_counter()
            client.poll()
            t2 = time.perf_counter()
            send.append(t1 - t0)
            poll.append(t2 - t1)
            time.sleep(0.0005)
        client.poll(timeout=1.0)
        for r in range(1, 200):
            t0 = time.perf_counter()
            client.send_reset(r)
            reset.append(time.perf_counter() - t0)
            time.sleep(0.0005)
            client.poll(timeout=0.5)
            client.send_query(r, 1, 0.01)
            client.poll(timeout=0.5)
        client.bye()
        client.close()
    finally:
        server.terminate()
        server.wait(10)

    def pct(xs):
        xs = sorted(xs)
        return {"p50": xs[len(xs) // 2], "p90": xs[int(len(xs) * 0.9)], "p99": xs[int(len(xs) * 0.99)],
                "mean": statistics.mean(xs)}
    return {"blocking_query_s": pct(blocking), "delayed_send_query_s": pct(send), "delayed_poll_s": pct(poll),
            "send_reset_s": pct(reset), "count": count}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.round_cost", description=__doc__.splitlines()[0])
    p.add_argument("--code", type=_pairs, default=[("current", os.getcwd())],
                   help="LABEL=DIR pairs: checkouts of mxhet to compare (default: this one)")
    p.add_argument("--ack", default="blocking,delayed", help="ESync ack modes (default %(default)s)")
    p.add_argument("--model", default="smallcnn")
    p.add_argument("--slowdown", default="1,1,10")
    p.add_argument("--time-budget", type=float, default=60.0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--extra", default="", help="more training flags, space-separated")
    p.add_argument("--launcher-args", default="",
                   help="more mxhet-launch flags, space-separated (e.g. '--base-iter 0.15': iteration times "
                        "pinned by the profile instead of measured on a loaded machine)")
    p.add_argument("--allowance", type=float, default=600.0,
                   help="seconds for start-up and evaluation beyond the budget before a job counts as hung")
    p.add_argument("--out", default="runs/round-cost")
    p.add_argument("--client-only", action="store_true",
                   help="only measure a worker's State Server costs on loopback (no training job)")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.client_only:
        costs = client_costs()
        with open(os.path.join(out, "client-costs.json"), "w") as f:
            json.dump(dict(costs, command=sys.argv, machine=machine_info(), provenance=provenance()), f,
                      indent=1)
        for name in ("blocking_query_s", "delayed_send_query_s", "delayed_poll_s", "send_reset_s"):
            c = costs[name]
            print("%-22s p50 %7.1f µs  p90 %7.1f µs  p99 %7.1f µs  mean %7.1f µs" % (
                name, 1e6 * c["p50"], 1e6 * c["p90"], 1e6 * c["p99"], 1e6 * c["mean"]))
        return 0
    slowdowns = tuple(float(x) for x in args.slowdown.split(","))
    acks = [a for a in args.ack.split(",") if a]
    results = []
    home = os.getcwd()
    for rep in range(args.repeat):
        for ack in acks:
            for label, code in args.code:
                name = "%s-%s-%d" % (label, ack, rep)
                spec = JobSpec(mode="esync", slowdowns=slowdowns, model=args.model, time_budget=args.time_budget,
                               batch_size=args.batch_size, startup_allowance=args.allowance,
                               extra_train_args=("--ack", ack) + tuple(args.extra.split()),
                               launcher_args=tuple(args.launcher_args.split()))
                env_before = os.environ.get("PYTHONPATH")
                os.environ["PYTHONPATH"] = code
                os.chdir(code)
                started = time.time()
                try:
                    summary = run_job(spec, os.path.join(out, name))
                except JobFailed as exc:
                    print("FAILED %s: %s" % (name, exc), file=sys.stderr)
                    continue
                finally:
                    os.chdir(home)
                    if env_before is None:
                        os.environ.pop("PYTHONPATH", None)
                    else:
                        os.environ["PYTHONPATH"] = env_before
                row = dict(summarize(summary), label=label, ack=ack, repeat=rep, started_unix=started,
                           breakdown=breakdown(summary))
                results.append(row)
                print("%-22s fast blocked/round %6.1f ms  fastest iter %5.1f ms  ratio %5.2f  "
                      "fast compute ratio %.2f  q/round %s ms  sync/round %s ms  n_i %s  acc %s" % (
                          name, 1000 * row["fast_blocked_per_round_s"], 1000 * row["fastest_iteration_s"],
                          row["blocked_over_iteration"], row["fast_compute_ratio"],
                          "/".join("%.1f" % (1000 * d["query_per_round_s"]) for d in row["devices"]),
                          "/".join("%.1f" % (1000 * d["sync_per_round_s"]) for d in row["devices"]),
                          "/".join("%.1f" % d["mean_n_i"] for d in row["devices"]),
                          row["final_accuracy"]), flush=True)
                if row["breakdown"]:
                    f = row["breakdown"]["fast"]
                    print("%-22s fast per round: State Server %.1f ms, issue %.1f ms, wait for the last push %.1f ms, "
                          "exchange after it %.1f ms" % (name, 1000 * f["query_s"], 1000 * f["issue_s"],
                                                         1000 * f["wait_last_push_s"],
                                                         1000 * f["after_last_push_s"]), flush=True)
    with open(os.path.join(out, "round-cost.md"), "w") as f:
        f.write(format_report(results, args.model, slowdowns, args.time_budget))
    with open(os.path.join(out, "round-cost.json"), "w") as f:
        json.dump({"experiment": "round-cost", "command": sys.argv, "machine": machine_info(),
                   "provenance": provenance(seeds=[args.seed] if hasattr(args, "seed") else ()),
                   "model": args.model, "slowdown": list(slowdowns), "time_budget": args.time_budget,
                   "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
