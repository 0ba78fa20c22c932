"""``mxhet-bench scale``: the same policies driving 100 to 10,000 simulated devices.

Each run is the virtual-time engine (:mod:`mxhet.sim.engine`) with its real
decision code -- :class:`~mxhet.sim.engine.Simulation`'s ESync, SSP and ADSP
device processes and the Partial Reduce worker program (its slots in :mod:`mxhet.sim.slots`,
its :class:`~mxhet.control.preduce.PartialReduceController` behind the
service), the worker policies of :mod:`mxhet.policy`, and one
:class:`~mxhet.control.server.StateService` (the class the State Server's
socket loop serves with), answering every request -- over N devices.

What is real and what is not:

* Real: every decision (Algorithm 2's QUERY-STATE/RESET, SSP's staleness gate,
  ADSP's commit targets and rate search), the server-side updaters of
  :mod:`kvstore_ext.updaters` applied through MXNet's ``get_updater`` as a
  PS-LITE server applies them, and the training: every device trains its own
  replica on its own shard of Fashion-MNIST, and the final global model is
  scored on the test set.
* Not the paper's model: the replicas are a softmax regression (multinomial
  logistic regression, 196 x 10 + 10 parameters) on 2x2-pooled 14x14 pixels
  in NumPy, so that 10,000 replicas fit in memory (80 KB each with their
  copies) and an iteration costs microseconds: the decisions, not the
  arithmetic, dominate. A Gluon replica per device is too heavy at 10,000.
* Virtual: time. Device i's iteration takes ``base_iter x s_i`` virtual
  seconds, ``s_i`` log-normal (see :func:`speeds`); a few devices slow down
  mid-run; messages cost the engine's default link model.

Speeds: log-normal, ``s_i = exp(sigma * Z_i)`` with sigma = 0.5 (the median
device at ``base_iter``, the 99th percentile 3.2x slower, the slowest of
10,000 about 7x). Device speeds in measured fleets are right-skewed and
roughly log-normal (FedScale's device traces, mobile benchmarks): most devices
are near the median and a long tail is much slower; a heavier tail
(Pareto) would make one straggler set every ESync round and say less about
the rest.

One run per (mode, N) in a fresh process, so peak memory is that run's.
Reported per run: wall time per simulated round (ESync: a round; SSP and
ADSP: N device updates, one per device on average), decisions (State Server
requests answered) per wall second, the wall time spent inside
``StateService.handle`` per decision, peak memory, the distribution of
local iterations per round (n_i) over the devices, and the slowed devices'
n_i before and after their slowdown.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

SIZES = (100, 1000, 10000)
MODES = ("esync", "ssp", "adsp", "preduce")
SIGMA = 0.5
BASE_ITER_S = 0.1
SLOWED = 3           # devices that slow down mid-run
SLOWDOWN = 4.0       # by this factor, from half the budget on
FEATURES = 14 * 14
CLASSES = 10
BATCH = 8
LR = 0.1


def budget_for(n):
    """Virtual seconds per run: enough rounds to see the slowdown, few enough for 10,000 devices."""
    return {100: 20.0}.get(n, 8.0 if n <= 1000 else 1.5)


def speeds(n, seed, sigma=SIGMA):
    """Per-device slowdown factors: log-normal with median 1."""
    return np.exp(sigma * np.random.RandomState([seed, 17]).randn(n))


def features(split):
    """Fashion-MNIST as 2x2-pooled 14x14 pixels in [0, 1], float32, and labels."""
    from mxhet import data
    images, labels = data.load_fashion_mnist(split)
    x = images.reshape(-1, 14, 2, 14, 2).mean(axis=(2, 4)).reshape(-1, FEATURES) / 255.0
    return x.astype(np.float32), labels


class Buf(np.ndarray):
    """A NumPy array with NDArray's ``copyto`` and ``context``, so the engine's helpers move it."""

    def copyto(self, other):
        np.copyto(other, self)

    @property
    def context(self):
        import mxnet as mx
        return mx.cpu()


def buf(array):
    return np.array(array, dtype=np.float32).view(Buf)


class Param:
    """What the engine reads of a Gluon parameter: its data and gradient."""

    def __init__(self, value):
        self.value = buf(value)
        self.gradient = np.zeros_like(self.value)

    def data(self):
        return self.value

    def grad(self):
        return self.gradient


def make_device_class():
    from mxhet.sim.engine import Device

    class LinearDevice(Device):
        """A :class:`~mxhet.sim.engine.Device` whose replica is a NumPy softmax regression."""

        def __init__(self, slot, config, params, x, y, shard, rng):
            super().__init__(slot, config, None, params, None, None, BATCH, rng)
            self.x, self.y, self.shard = x, y, shard

        def compute(self, local_step, read_loss=False):
            idx = self.shard[self.rng.randint(0, len(self.shard), BATCH)]
            x, y = self.x[idx], self.y[idx]
            w, b = self.params[0].value, self.params[1].value
            z = x @ w + b
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            if read_loss:
                self.last_loss = float(-np.log(p[np.arange(BATCH), y] + 1e-12).mean())
            p[np.arange(BATCH), y] -= 1.0
            p /= BATCH
            gw, gb = self.params[0].gradient, self.params[1].gradient
            np.matmul(x.T, p, out=gw)
            gb[:] = p.sum(axis=0)
            if local_step:
                w -= LR * gw
                b -= LR * gb
            self.stats.iterations += 1
            self.stats.samples += BATCH

        def skip_batch(self):
            self.rng.randint(0, len(self.shard), BATCH)

    return LinearDevice


def make_servers_class():
    import mxnet as mx
    from mxhet.sim.engine import Servers

    class LinearServers(Servers):
        """The global model in MXNet arrays, updated by the real updater through
        ``mx.optimizer.get_updater``; what devices receive is NumPy."""

        def __init__(self, arrays, updater):
            super().__init__([mx.nd.array(a) for a in arrays], updater)
            self.applied = 0

        def apply(self, key, value):
            self.applied += 1
            super().apply(key, mx.nd.array(value))

        def snapshot(self, keys=None):
            keys = range(len(self.weights)) if keys is None else keys
            return [buf(self.weights[k].asnumpy()) for k in keys]

        def pulled(self, keys):
            return self.snapshot(keys)

    return LinearServers


class NumpySlots:
    """Partial Reduce's slot store for NumPy replicas: the driver's own store (MXNet arrays
    and the real ``PartialReduceSum`` updater) inside, NumPy arrays outside."""

    def __init__(self, store):
        self.store = store
        self.applied = 0

    def apply(self, key, value):
        import mxnet as mx
        self.applied += 1
        self.store.apply(key, mx.nd.array(value))

    def snapshot(self, keys):
        return [buf(self.store.weights[k].asnumpy()) for k in keys]


def run_one(mode, n, seed=0, budget=None, progress=False):
    """One simulated run of ``mode`` with ``n`` devices; returns its record."""
    import mxnet as mx
    from mxhet import data
    from mxhet.config import WorkerConfig
    from mxhet.modes import get_mode
    from mxhet.policy import get_spec
    from mxhet.sim import engine

    budget = budget_for(n) if budget is None else budget
    factors = speeds(n, seed)
    # the slowed devices: those nearest the median speed, so their n_i visibly drops
    slowed = [int(i) for i in np.argsort(np.abs(np.log(factors)))[:SLOWED]]
    configs = []
    for i in range(n):
        schedule = ((budget / 2, None, float(factors[i] * SLOWDOWN)),) if i in slowed else ()
        configs.append(WorkerConfig(sync=mode, slot=i, num_slots=n, slowdown=float(factors[i]),
                                    slowdown_schedule=schedule))
    network = engine.Network(latency_s=(engine.DEFAULT_LATENCY_MS / 1000.0,) * n,
                             bandwidth=engine.DEFAULT_BANDWIDTH_GBPS * 1e9 / 8)
    job = engine.SimJob(mode=mode, configs=tuple(configs), network=network, base_iter_s=BASE_ITER_S,
                        time_budget=budget, seed=seed, eval_interval=budget / 4, batch_size=BATCH,
                        adsp={"period": budget / 6, "epoch": budget / 2, "window": 1} if mode == "adsp" else {})
    x, y = features("train")
    rng = np.random.RandomState(seed)
    init = [rng.randn(FEATURES, CLASSES).astype(np.float32) * 0.01, np.zeros(CLASSES, np.float32)]
    spec = get_spec(mode)
    mode_cls = get_mode(mode)
    optimizer = mx.optimizer.SGD(learning_rate=LR)
    updater = mode_cls.updater_for(n, BATCH, optimizer, spec.resolve({}))
    Device = make_device_class()
    devices = []
    for i, config in enumerate(configs):
        shard = data.partition(y, n, i, dist="iid", seed=seed)
        dev = Device(i, config, [Param(a) for a in init], x, y, shard, np.random.RandomState([seed, i, 7]))
        if spec.exchanges_deltas:
            dev.global_copy = [buf(a) for a in init]
        devices.append(dev)
    servers = make_servers_class()(init, updater)
    sim = engine.Simulation(job, devices, servers, grad_keys=[0, 1])
    if mode == "preduce":
        # the slots and their evaluation point, with NumPy replicas
        from mxhet.sim.slots import rendezvous as make_rendezvous
        rendezvous = make_rendezvous(sim)
        rendezvous.store = NumpySlots(rendezvous.store)
    handle = sim.service.handle
    inside = [0.0]

    def timed(request, now, sender=None):  # CPU time: the machine may be shared
        t0 = time.process_time()
        try:
            return handle(request, now, sender=sender)
        finally:
            inside[0] += time.process_time() - t0
    sim.service.handle = timed
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=int(budget * 10), desc="%s N=%d" % (mode, n), unit="0.1 s virtual", leave=False)
        sim.progress = lambda now: bar.update(max(0, int(now * 10) - bar.n))
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    virtual = sim.run()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if progress:
        bar.close()
    if mode == "preduce":
        servers.applied += rendezvous.store.applied   # the slots' updates (the parameter keys see none)
    tx, ty = features("test")
    w, b = servers.snapshot()
    accuracy = float(((tx @ w + b).argmax(axis=1) == ty).mean())
    return _record(mode, n, seed, budget, factors, slowed, devices, sim, servers, virtual, wall, cpu, inside[0],
                   accuracy)


def _pcts(values):
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return {"min": float(a.min()), "p10": float(np.percentile(a, 10)), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "max": float(a.max()), "mean": float(a.mean())}


def _record(mode, n, seed, budget, factors, slowed, devices, sim, servers, virtual, wall, cpu, inside, accuracy):
    iterations = sum(d.stats.iterations for d in devices)
    updates = sum(d.stats.rounds for d in devices)
    if mode == "esync":
        rounds = max(d.stats.rounds for d in devices)
    else:
        rounds = updates / n   # N device updates (one per device on average) make a round
    per_device_ni = [statistics.mean(d.stats.local_iters) for d in devices if d.stats.local_iters]
    half = budget / 2
    slowed_ni = []
    for i in slowed:
        s = devices[i].stats
        ends = s.round_end_s if s.round_end_s else []
        before = [k for k, t in zip(s.local_iters, ends) if t < half]
        after = [k for k, t in zip(s.local_iters, ends) if t >= half]
        if not ends:  # SSP / ADSP record no round ends: split the list in two
            before, after = s.local_iters[:len(s.local_iters) // 2], s.local_iters[len(s.local_iters) // 2:]
        slowed_ni.append({"device": i, "speed_factor": float(factors[i]),
                          "mean_n_i_before": statistics.mean(before) if before else None,
                          "mean_n_i_after": statistics.mean(after) if after else None})
    return {
        "mode": mode, "devices": n, "seed": seed, "virtual_s": virtual, "budget_virtual_s": budget,
        "speeds": {"distribution": "log-normal", "sigma": SIGMA, "base_iter_s": BASE_ITER_S,
                   "factor": _pcts(list(factors)), "slowed": slowed, "slowdown": SLOWDOWN,
                   "slowdown_at_s": half},
        "wall_s": wall, "cpu_s": cpu, "rounds": rounds, "iterations": iterations, "device_updates": updates,
        "wall_per_round_s": wall / rounds if rounds else None,
        "cpu_per_round_s": cpu / rounds if rounds else None,
        "decisions": sim.decisions, "decisions_per_s": sim.decisions / wall,
        "decisions_per_cpu_s": sim.decisions / cpu,
        "handle_us_per_decision": 1e6 * inside / max(1, sim.decisions),
        "handle_share_of_cpu": inside / cpu,
        "wall_us_per_iteration": 1e6 * wall / max(1, iterations),
        "cpu_us_per_iteration": 1e6 * cpu / max(1, iterations),
        "server_updates": servers.applied,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "n_i": _pcts(per_device_ni), "slowed_n_i": slowed_ni,
        "final_accuracy": accuracy,
    }


def _child(mode, n, seed, budget, timeout):
    """One run in a fresh process; None if it did not finish within ``timeout`` wall seconds."""
    cmd = [sys.executable, "-m", "bench.scale", "--one", mode, str(n), "--seed", str(seed)]
    if budget:
        cmd += ["--budget", str(budget)]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=os.getcwd(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def growth(records, key):
    """Exponent b of ``key ~ N^b`` fitted over the sizes (least squares in log-log)."""
    pts = [(math.log(r["devices"]), math.log(r[key])) for r in records if r.get(key)]
    if len(pts) < 2:
        return None
    xs, ys = zip(*pts)
    mx_, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx_) * (y - my) for x, y in pts) / sum((x - mx_) ** 2 for x in xs)


def report(records, command):
    lines = ["# Scale: the same decision code driving 100 to 10,000 simulated devices", "",
             "`%s`" % command, "",
             "Virtual-time engine, one `StateService` answering every request; NumPy softmax-regression replicas on "
             "Fashion-MNIST (see `bench/scale.py` for what is real and what is not). Speeds log-normal (sigma %.1f, "
             "median iteration %.0f ms virtual); %d devices near the median slow down %gx at half the run. "
             "Shared 2-core machine: wall times are indicative." % (SIGMA, 1000 * BASE_ITER_S, SLOWED, SLOWDOWN), "",
             "Wall times depend on the load of the machine (shared); CPU seconds of the simulating process do not "
             "(it is single-threaded), so cost is stated in CPU time too. A *round* is an ESync aggregation; for "
             "SSP and ADSP, N device updates (gradient pushes, commits).", "",
             "| mode | N | virtual s | rounds | wall s | CPU s | CPU s / round | wall s / round | decisions "
             "| decisions / CPU s | decisions / wall s | StateService CPU µs / decision | CPU µs / iteration "
             "| peak RSS MB | n_i p10/p50/p90/max | slowed devices' n_i before → after | test accuracy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        ni = r["n_i"] or {}
        slowed = ", ".join("%.1f→%.1f" % (s["mean_n_i_before"] or 0, s["mean_n_i_after"] or 0)
                           for s in r["slowed_n_i"])
        lines.append("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %d | %.0f | %.0f | %.1f | %.0f | %.0f "
                     "| %s | %s | %.3f |" % (
                         r["mode"], r["devices"], r["virtual_s"], r["rounds"], r["wall_s"], r["cpu_s"],
                         r["cpu_per_round_s"] or 0, r["wall_per_round_s"] or 0, r["decisions"],
                         r["decisions_per_cpu_s"], r["decisions_per_s"], r["handle_us_per_decision"],
                         r["cpu_us_per_iteration"], r["peak_rss_mb"],
                         "/".join("%.1f" % ni.get(k, 0) for k in ("p10", "p50", "p90", "max")) if ni else "-",
                         slowed, r["final_accuracy"]))
    lines += ["", "Growth with N (fitted exponent b of cost ~ N^b, from the sizes above):", ""]
    for mode in sorted({r["mode"] for r in records}):
        rs = [r for r in records if r["mode"] == mode]
        lines.append("- %s: CPU per round N^%.2f, CPU per iteration N^%.2f, StateService CPU per decision "
                     "N^%.2f" % (mode, growth(rs, "cpu_per_round_s") or float("nan"),
                                 growth(rs, "cpu_us_per_iteration") or float("nan"),
                                 growth(rs, "handle_us_per_decision") or float("nan")))
    return "\n".join(lines) + "\n"


def plot(records, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for mode in sorted({r["mode"] for r in records}):
        rs = sorted((r for r in records if r["mode"] == mode), key=lambda r: r["devices"])
        ns = [r["devices"] for r in rs]
        axes[0].plot(ns, [r["cpu_per_round_s"] for r in rs], "o-", label=mode)
        axes[1].plot(ns, [r["handle_us_per_decision"] for r in rs], "o-", label=mode)
        axes[2].plot(ns, [r["peak_rss_mb"] for r in rs], "o-", label=mode)
    for ax, title in zip(axes, ("CPU s per simulated round", "StateService CPU µs per decision", "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_title(title)
        ax.set_xlabel("devices N")
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(prog="mxhet-bench scale", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="device counts (default %(default)s)")
    p.add_argument("--modes", default=",".join(MODES), help="modes (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, default=0.0, help="virtual seconds per run (default: per size)")
    p.add_argument("--timeout", type=float, default=1800.0, help="wall seconds per run at most (default %(default)s)")
    p.add_argument("--out", default="runs/scale")
    p.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        record = run_one(args.one[0], int(args.one[1]), seed=args.seed, budget=args.budget or None)
        print(json.dumps(record))
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        raise SystemExit("mxhet-bench scale: --sizes must be comma-separated integers, got %r" % args.sizes)
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in MODES:
            raise SystemExit("mxhet-bench scale: mode %r is not one of %s" % (mode, ",".join(MODES)))
    if any(n < 2 for n in sizes):
        raise SystemExit("mxhet-bench scale: every size must be >= 2, got %s" % args.sizes)
    from tqdm import tqdm
    os.makedirs(args.out, exist_ok=True)
    records, unfinished = [], []
    done_path = os.path.join(args.out, "runs.jsonl")   # one finished run a line: a restarted bench resumes
    done = {}
    if os.path.exists(done_path):
        with open(done_path) as f:
            for line in f:
                r = json.loads(line)
                done[(r["mode"], r["devices"], r["seed"])] = r
    with tqdm(total=len(sizes) * len(modes), desc="scale", unit="run") as bar:
        for n in sizes:
            for mode in modes:
                bar.set_postfix_str("%s N=%d" % (mode, n))
                record = done.get((mode, n, args.seed))
                if record is None:
                    record = _child(mode, n, args.seed, args.budget, args.timeout)
                    if record is not None:
                        with open(done_path, "a") as f:
                            f.write(json.dumps(record) + "\n")
                bar.update(1)
                if record is None:
                    unfinished.append({"mode": mode, "devices": n, "timeout_s": args.timeout})
                    tqdm.write("%-5s N=%-6d did not finish within %.0f s" % (mode, n, args.timeout))
                    continue
                records.append(record)
                tqdm.write("%-5s N=%-6d wall %6.1f s  CPU %6.1f s  %.3f CPU s/round  %6.0f decisions/CPU s  "
                           "%.1f µs/handle  %.0f MB" % (mode, n, record["wall_s"], record["cpu_s"],
                                                        record["cpu_per_round_s"] or 0, record["decisions_per_cpu_s"],
                                                        record["handle_us_per_decision"], record["peak_rss_mb"]))
    from .provenance import provenance
    from .runner import machine_info
    command = "mxhet-bench scale " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(os.path.join(args.out, "scale.json"), "w") as f:
        json.dump({"experiment": "scale", "command": command, "machine": machine_info(), "runs": records,
                   "provenance": provenance(["mxhet-bench", "scale"] + list(argv if argv is not None
                                                                              else sys.argv[1:])),
                   "unfinished": unfinished}, f, indent=1)
    text = report(records, command) + "".join("\n%s with %d devices did not finish within %.0f wall seconds.\n"
                                              % (u["mode"], u["devices"], u["timeout_s"]) for u in unfinished)
    with open(os.path.join(args.out, "scale.md"), "w") as f:
        f.write(text)
    plot(records, os.path.join(args.out, "scale.png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
