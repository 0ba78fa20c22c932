"""Calibration: how long one training iteration of a model takes here, and the
base iteration time that lets an emulated cluster fit this machine.

An emulated device of slowdown ``f`` runs every iteration in ``f x T`` seconds
(the worker pads its measured compute time with sleep; see
``MXHET_BASE_ITER_S`` in :mod:`mxhet.config`). ``T`` must be long enough that
all devices sharing a resource can compute at the same time: a device that
needs ``t`` seconds of one CPU core (or of a GPU) per iteration occupies
``t / (f x T)`` of it, so per resource ``sum(t / f) <= capacity x utilization``,
and ``T >= t`` for every device. :func:`base_iteration` returns the smallest
such ``T``. Without it, devices contend for the cores and the emulated speed
ratios are not the profile's.

``python -m bench.calibrate --model M`` measures one model (used in a child
process, so that ``OMP_NUM_THREADS`` takes effect).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from mxhet.errors import ConfigError


def measure(model, input_size, batch_size, context="cpu", threads=1, iterations=4, timeout=600):
    """Median seconds of one iteration (forward, backward, SGD update) of ``model``.

    Runs in a child process with ``OMP_NUM_THREADS=threads``.

    Raises:
        RuntimeError: if the child fails (its error output is included).
    """
    argv = [sys.executable, "-m", "bench.calibrate", "--model", model, "--input-size", str(input_size),
            "--batch-size", str(batch_size), "--context", context, "--iterations", str(iterations)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("measuring %s on %s failed:\n%s" % (model, context, proc.stderr[-2000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def base_iteration(devices, seconds, cpu_cores, utilization=0.75):
    """The smallest base iteration time ``T`` at which ``devices`` fit the machine.

    Args:
        devices: list of ``(context, slowdown)``.
        seconds: ``{context: measured seconds per iteration}`` (one thread on CPU).
        cpu_cores: cores shared by the ``cpu`` devices (one thread each).
        utilization: the share of each resource the devices may fill; the rest
            is left to the parameter servers, the State Server and the OS.

    Returns:
        ``(T, detail)``: ``detail`` names the resource that set ``T``.
    """
    if not 0 < utilization <= 1:
        raise ValueError("utilization must be in (0, 1], got %r" % utilization)
    demand = {}  # resource -> sum of t / f
    own = 0.0
    for context, slowdown in devices:
        t = seconds[context]
        demand[context] = demand.get(context, 0.0) + t / slowdown
        own = max(own, t / slowdown)  # a device cannot run faster than its own hardware
    base, limit = own, "the fastest device's own iteration time"
    for resource, load in sorted(demand.items()):
        capacity = cpu_cores if resource == "cpu" else 1.0  # one GPU per gpu(i)
        needed = load / (capacity * utilization)
        if needed > base:
            base = needed
            limit = "%s: %.3g device-seconds per base iteration on %g %s at %.0f%%" % (
                resource, load, capacity, "cores" if resource == "cpu" else "device", 100 * utilization)
    return base, limit


def _main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.calibrate")
    p.add_argument("--model", required=True)
    p.add_argument("--input-size", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--context", default="cpu")
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--norm", choices=["batch", "group"], default="batch", help="as python -m mxhet.train's")
    args = p.parse_args(argv)

    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    from mxhet import models

    from mxhet.config import mx_context
    ctx = mx_context(args.context)
    net = models.get_model(args.model, classes=10, input_size=args.input_size, norm=args.norm)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.rand(args.batch_size, 1, args.input_size, args.input_size), ctx=ctx)
    y = mx.nd.array(rng.randint(0, 10, args.batch_size), ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    times = []
    for i in range(args.iterations + 1):  # the first one builds the graph
        t0 = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(args.batch_size)
        mx.nd.waitall()
        if i:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"model": args.model, "norm": args.norm, "seconds": float(np.median(times))}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_main())
    except ConfigError as exc:
        sys.exit("python -m bench.calibrate: error: %s" % exc)
