"""``python -m mxhet.sim``: repeat a job in virtual time, in one process.

It takes the launcher's cluster flags and ``python -m mxhet.train``'s training
flags on one command line, so a real job::

    mxhet-launch -n 3 -s 1 --sync esync --slowdown 1,1,10 --base-iter 0.05 -- \\
        python -m mxhet.train --model smallcnn --time-budget 60 --metrics-out runs/real

runs in virtual time as::

    python -m mxhet.sim -n 3 --sync esync --slowdown 1,1,10 --base-iter 0.05 \\
        --model smallcnn --time-budget 60 --metrics-out runs/sim

and writes the same ``summary.json`` (times in virtual seconds, marked
``"engine": "sim"``). ``--base-iter`` is required: it is the virtual time of a
slowdown-1 iteration.
"""
import argparse
import glob
import json
import logging
import os
import sys
import time

from tqdm import tqdm

from ..config import (WorkerConfig, mx_context, parse_base_iter, parse_context, parse_delay_ms, parse_slowdown,
                      parse_slowdown_schedule)
from ..errors import ConfigError
from ..policy import get_spec
from ..policy.specs import executor_spec
from ..train import _atomic_json, _validate, build_parser as train_parser, mode_options, optimizer_params
from ..control.membership import ELASTIC_MODES

SIM_EVENT_MODES = ELASTIC_MODES + ("preduce", "async", "gcada", "cada")
"""``--events`` accepts these: the round modes, Partial Reduce, whose controller groups a device
that joins again from its first READY (it starts from the latest complete group's model), async,
where a device that joins again pulls the global model and pushes from its next iteration on, and
gcada and cada, whose coordinator re-selects when a device leaves and takes it back into its group
from the iteration after its first request (as on the cluster under ``--max-restarts``)."""
from .engine import DEFAULT_BANDWIDTH_GBPS, DEFAULT_LATENCY_MS, DEFAULT_PER_KEY_MS, Network, SimJob
from .events import parse_schedule
from .members import MemberScores
from . import checkpoint

LOG = logging.getLogger("mxhet.sim")
MEMBER_MODES = ("esync", "localsgd")
"""The modes whose rounds ``--score-members`` scores (the simulator hooks their delta exchange)."""


def build_parser():
    p = train_parser()
    p.prog = "python -m mxhet.sim"
    p.description = __doc__.splitlines()[0]
    g = p.add_argument_group("the cluster (as mxhet-launch)")
    g.add_argument("-n", "--num-workers", type=int, required=True, help="number of devices")
    g.add_argument("--contexts", default="cpu", help="where the replicas compute: cpu or gpu(i) (one for all)")
    g.add_argument("--slowdown", default="1", help="slowdown factor per device (one value, or one per device)")
    g.add_argument("--slowdown-schedule", action="append", default=None, metavar="SLOT:SPEC",
                   help="speed change of one device over virtual time, e.g. 0:60-=8")
    g.add_argument("--net-delay-ms", default="0", help="extra one-way delay per device link, ms")
    g.add_argument("--base-iter", type=float, required=True, metavar="SECONDS",
                   help="virtual seconds of one iteration of a slowdown-1 device (required)")
    g.add_argument("--epsilon", type=float, default=None, help="State Server: Algorithm 2's ε, seconds")
    g.add_argument("--staleness", type=int, default=None, help="ssp: the staleness bound s")
    g.add_argument("--adsp-period", type=float, default=None, help="adsp: check period Γ, seconds")
    g.add_argument("--adsp-epoch", type=float, default=None, help="adsp: search epoch, seconds")
    g.add_argument("--adsp-window", type=int, default=None, help="adsp: check periods per evaluated rate")
    g = p.add_argument_group("the model of the cluster (simulator only)")
    g.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_MS,
                   help="one-way latency of every link before --net-delay-ms, ms (default %(default)s)")
    g.add_argument("--per-key-ms", type=float, default=DEFAULT_PER_KEY_MS,
                   help="fixed cost of one key's message in a push or pull, ms (default %(default)s)")
    g.add_argument("--bandwidth-gbps", type=float, default=DEFAULT_BANDWIDTH_GBPS,
                   help="bandwidth of every device's link to the servers, Gbit/s (default %(default)s)")
    g.add_argument("--slowdown-dist", choices=["fixed", "exp"], default="fixed",
                   help="'exp': each iteration's virtual time is exponential with mean slowdown x --base-iter, "
                        "seeded per device (the G-CADA paper's model; default %(default)s)")
    g.add_argument("--events", default="", metavar="SLOT:leave@SECONDS,...",
                   help="devices that leave the job at a virtual time and may join again later (e.g. "
                        "3:leave@120,3:join@300), in the modes whose rounds the State Server names and preduce "
                        "(%s); the others train on, and a device that joins takes part from the next round "
                        "boundary (preduce: the groups from its first READY)"
                   % ", ".join(SIM_EVENT_MODES))
    g.add_argument("--jitter", type=float, default=0.0,
                   help="sigma of a log-normal factor on every iteration time (default 0: none)")
    g.add_argument("--stop-at-target", action="store_true",
                   help="evaluate every snapshot during the run (precise BN, --eval-samples test images) and "
                        "stop once it reaches --target-accuracy; --time-budget is then a cap")
    g.add_argument("--max-iterations", type=int, default=0,
                   help="compute cap: stop once all devices together ran this many real iterations "
                        "(deterministic; default 0: no cap); the summary records when it stopped the run")
    g.add_argument("--eval-growth", type=float, default=0.0,
                   help="snapshots at t + max(--eval-interval, G x t): the same relative resolution of the "
                        "time to target for fast and slow runs (default 0: every --eval-interval)")
    g.add_argument("--eval-min-iterations", type=int, default=0, metavar="K",
                   help="skip a point of the snapshot grid until the devices ran K real iterations in all since "
                        "the last snapshot, so that scoring does not outweigh training where iterations are "
                        "few (a standalone device, Sync at a large slowdown); default 0: every point")
    g.add_argument("--score-members", type=int, default=0, metavar="N",
                   help="esync, localsgd: at every aggregation score each member's replica before its push and "
                        "the new global model, on the first N test images (precise BN), into the summary's "
                        "'members'; costs real CPU, no virtual time, and does not change the training "
                        "(default 0: off)")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar on stderr")
    # "resolve": the simulator's --checkpoint-dir and --resume replace the training entry point's
    g = p.add_argument_group("checkpoints (simulator only; see docs/bench.md)", conflict_handler="resolve")
    checkpoint.add_flags(
        g, 0.0,
        "save the run every MINUTES of wall time, on SIGTERM or SIGINT (then stop, status 143 or 130) and at the "
        "end of training, into --checkpoint-dir (default METRICS_OUT/checkpoint; saves are atomic); the same "
        "command with --resume continues it and ends with the same final model as an uninterrupted run (modes %s; "
        "default 0: off)" % ", ".join(checkpoint.MODES),
        "continue from the checkpoint in --checkpoint-dir if there is one (refused if another run wrote it); "
        "without it a run starts afresh and replaces the checkpoint",
        dir_help="where --checkpoint-every-min keeps the run's checkpoint (default METRICS_OUT/checkpoint)")
    g.add_argument("--checkpoint-stop-at", type=float, default=None, help=argparse.SUPPRESS)  # test hook
    for action in p._actions:   # the training entry point's flag, as the simulator reads it
        if action.dest == "checkpoint_every":
            action.help = "(cluster rounds between checkpoints; the simulator saves by --checkpoint-every-min)"
    return p



def scorer(args, net, ctx, input_size, images, labels, samples):
    """``score(arrays) -> accuracy``: a model's accuracy on the first ``samples`` test
    images, scored exactly as a snapshot after training (on ``net``, the job's
    evaluation network, with precise BN on the same batches)."""
    from .. import data, evaluation
    bn = (evaluation.calibration_batches(images, labels, args.bn_batches, args.batch_size, input_size, ctx)
          if args.bn_batches and evaluation.batchnorm_layers(net) else [])
    test_x, test_y = data.load_fashion_mnist("test", args.data_dir)

    def score(arrays):
        evaluation.load_snapshot(net, arrays)
        evaluation.recompute_batchnorm(net, bn)
        return data.evaluate(net, test_x, test_y, input_size=input_size, ctx=ctx, limit=samples)
    return score


def target_check(args, net, ctx, input_size, images, labels):
    """``check(arrays) -> (accuracy, reached)``: the global model's accuracy on
    ``--eval-samples`` test images (:func:`scorer`) and whether it reaches ``--target-accuracy``."""
    score = scorer(args, net, ctx, input_size, images, labels, args.eval_samples)

    def check(arrays):
        accuracy = score(arrays)
        return accuracy, accuracy >= args.target_accuracy
    return check


def _per_device(text, n, parse, flag):
    values = [parse(v) for v in str(text).split(",")]
    if len(values) == 1:
        values *= n
    if len(values) != n:
        raise ConfigError("%s takes one value or one per device (%d), got %d" % (flag, n, len(values)))
    return values


def make_job(args):
    """The :class:`SimJob` of a parsed command line.

    Raises:
        ConfigError: naming the bad value.
    """
    if hasattr(args, "checkpoint_every_min"):
        checkpoint.check_args(args, args.sync or "esync")
        if (args.checkpoint_every_min or args.checkpoint_stop_at is not None) and not args.checkpoint_dir:
            args.checkpoint_dir = os.path.join(args.metrics_out, "checkpoint")
    _validate(args)
    n = args.num_workers
    if n < 1:
        raise ConfigError("-n must be >= 1, got %d" % n)
    mode = args.sync or "esync"
    spec = get_spec(mode)
    if not spec.distributed and n != 1:
        raise ConfigError("--sync %s runs one standalone device; got -n %d" % (mode, n))
    if getattr(args, "worker_contexts", ""):
        raise ConfigError("--worker-contexts %s: a simulated device is one replica on one context; "
                          "give its speed with --slowdown" % args.worker_contexts)
    base = parse_base_iter(args.base_iter)
    if not base > 0:
        raise ConfigError("--base-iter must be > 0 seconds in the simulator, got %r" % (args.base_iter,))
    if not args.eval_growth >= 0:
        raise ConfigError("--eval-growth must be >= 0, got %r" % (args.eval_growth,))
    if args.eval_min_iterations < 0:
        raise ConfigError("--eval-min-iterations must be >= 0 (0: every point), got %d" % args.eval_min_iterations)
    if args.max_iterations < 0:
        raise ConfigError("--max-iterations must be >= 0 (0: no cap), got %d" % args.max_iterations)
    if args.score_members < 0:
        raise ConfigError("--score-members must be >= 0 test images (0: off), got %d" % args.score_members)
    if args.score_members and mode not in MEMBER_MODES:
        raise ConfigError("--score-members scores the members of a delta average: modes %s, not %s"
                          % (", ".join(MEMBER_MODES), mode))
    if not args.latency_ms >= 0 or not args.per_key_ms >= 0 or not args.bandwidth_gbps > 0 or not args.jitter >= 0:
        raise ConfigError("--latency-ms and --per-key-ms must be >= 0, --bandwidth-gbps > 0 and --jitter >= 0")
    parse_context(args.contexts)
    slowdowns = _per_device(args.slowdown, n, parse_slowdown, "--slowdown")
    delays = _per_device(args.net_delay_ms, n, parse_delay_ms, "--net-delay-ms")
    schedules = {}
    for item in args.slowdown_schedule or ():
        slot_text, _, text = item.partition(":")
        if not slot_text.isdigit() or not 0 <= int(slot_text) < n:
            raise ConfigError("--slowdown-schedule %r must start with a device slot 0..%d and ':'" % (item, n - 1))
        schedules[int(slot_text)] = parse_slowdown_schedule(text)
    configs = tuple(WorkerConfig(sync=mode, slot=i, num_slots=n, context=args.contexts, slowdown=slowdowns[i],
                                 slowdown_schedule=schedules.get(i, ()), base_iter_s=base,
                                 slowdown_dist=args.slowdown_dist,
                                 net_delay_ms=delays[i]) for i in range(n))
    network = Network(latency_s=tuple((args.latency_ms + d) / 1000.0 for d in delays),
                      bandwidth=args.bandwidth_gbps * 1e9 / 8, per_key_s=args.per_key_ms / 1000.0)
    return SimJob(mode=mode, configs=configs, network=network, base_iter_s=base, time_budget=args.time_budget,
                  max_rounds=args.max_rounds, seed=args.seed, jitter=args.jitter,
                  mode_options=mode_options(args, mode), epsilon=args.epsilon,
                  staleness=args.staleness,
                  adsp={"period": args.adsp_period, "epoch": args.adsp_epoch, "window": args.adsp_window},
                  eval_interval=args.eval_interval, eval_growth=args.eval_growth, batch_size=args.batch_size,
                  max_iterations=args.max_iterations, eval_min_iterations=args.eval_min_iterations,
                  on_nonfinite=getattr(args, "on_nonfinite", "stop"),
                  **_events(args.events, n, mode))


def _events(text, n, mode):
    """``--events`` as SimJob's ``leaves`` and ``joins``, checked against the mode (see :mod:`mxhet.sim.events`)."""
    leaves, joins = parse_schedule(text, n)
    if leaves and mode not in SIM_EVENT_MODES:
        raise ConfigError("--events: devices can leave in modes %s, not %s" % (", ".join(SIM_EVENT_MODES), mode))
    return {"leaves": leaves, "joins": joins}


def run(args):
    """Simulate the job of ``args``; returns the summary dict (also written to ``--metrics-out``)."""
    import mxnet as mx

    from .. import data, evaluation, losses, models, train
    from ..modes import get_mode
    from . import engine

    job = make_job(args)
    spec = executor_spec(job.mode, elastic=bool(job.leaves))   # (sync with --events: its elastic form)
    ctx = mx_context(args.contexts)
    os.makedirs(args.metrics_out, exist_ok=True)
    input_size = args.input_size or models.default_input_size(args.model)
    images, labels = data.load_fashion_mnist("train", args.data_dir)
    wall0 = time.monotonic()
    # Snapshots are scored on a network of their own, never on a replica (see evaluation_network).
    # Scoring members during the run needs it then: built before build_devices seeds MXNet's
    # random stream, so its initialization draws nothing the training would draw.
    eval_net = evaluation.evaluation_network(args.model, input_size, args.norm, ctx) if args.score_members else None
    devices = engine.build_devices(job, args.model, input_size, images, labels, args.dist, args.optimizer,
                                   optimizer_params(args), ctx, spec, norm=args.norm)
    for dev in devices:
        dev.loss_fn = losses.get_loss(args.loss)
    smoothness = job.mode_options.get("smoothness")
    if smoothness is not None:   # gcada, cada: eq. (9)'s L_g
        losses.check_smoothness(smoothness, args.model, args.loss)
        if smoothness == "shard":   # each device's shard, as build_devices drew it (once per distinct shard)
            known = {}
            for dev in devices:
                shard = data.partition(labels, len(devices), dev.slot, dist=args.dist, seed=job.seed,
                                       groups=job.mode_options.get("groups"))
                key = shard.tobytes()
                if key not in known:
                    known[key] = losses.shard_smoothness(images, shard, input_size)
                dev.smoothness = known[key]
    first = devices[0]
    grad_keys = [k for k, p in enumerate(first.params) if p.grad_req != "null"]
    updater = None
    if spec.distributed:
        optimizer = mx.optimizer.create(args.optimizer, **optimizer_params(args))
        executor = get_mode(job.mode, elastic=bool(job.leaves))   # (sync with --events: ElasticSync)
        updater = executor.updater_for(len(devices), args.batch_size, optimizer, job.mode_options)
        if hasattr(updater, "plain_keys"):  # esync: BatchNorm statistics are averaged, never extrapolated
            updater.plain_keys = frozenset(k for k, p in enumerate(first.params) if p.grad_req == "null")
    servers = engine.Servers([mx.nd.array(p.data().asnumpy(), ctx=ctx) for p in first.params],
                             updater if updater is not None else mx.optimizer.create("sgd"))
    sim = engine.Simulation(job, devices, servers, grad_keys)
    ckpt = _checkpointer(args, job, wall0)
    sim.checkpointer = ckpt
    kept = ckpt.state["record"]["snapshots"] if ckpt is not None and ckpt.state is not None else 0
    snap_dir = os.path.join(args.metrics_out, "snapshots")
    os.makedirs(snap_dir, exist_ok=True)
    for old in glob.glob(os.path.join(snap_dir, "*.params")):  # a previous run's (not those of the run resumed)
        index = os.path.basename(old)[:-len(".params")]
        if not (index.isdigit() and int(index) < kept):
            os.remove(old)
    missing = [i for i in range(kept) if not os.path.exists(os.path.join(snap_dir, "%06d.params" % i))]
    if missing:
        raise ConfigError("the checkpoint in %s counts %d snapshots, but %s lacks %d of them (the first: %06d.params); "
                          "remove the checkpoint to run from the start" % (args.checkpoint_dir, kept, snap_dir,
                                                                            len(missing), missing[0]))
    names = [p.name for p in first.params]

    def save(index, t, arrays):  # to disk at once: a long run's snapshots would not fit in memory
        path = os.path.join(snap_dir, "%06d.params" % index)
        if not sim.replaying:   # (replaying to a checkpoint: written before it)
            mx.nd.save(path, dict(zip(names, arrays)))
        return path
    sim.keep_snapshot = save
    # Otherwise the evaluation network is built where the run's random draws are not changed by it
    # (after the run unless checked in it).
    if args.stop_at_target:
        if eval_net is None:
            eval_net = evaluation.evaluation_network(args.model, input_size, args.norm, ctx)
        sim.target_check = target_check(args, eval_net, ctx, input_size, images, labels)
    if args.score_members:
        sim.members = MemberScores(scorer(args, eval_net, ctx, input_size, images, labels, args.score_members),
                                   args.score_members)
    with tqdm(total=round(job.time_budget, 1), unit="virtual s", desc="%s %s" % (job.mode, args.model),
              file=sys.stderr, mininterval=2.0, disable=not args.progress) as bar:
        sim.progress = lambda t: bar.update(max(0.0, round(min(t, job.time_budget), 1) - bar.n))
        virtual = sim.run()
    mx.nd.waitall()   # the threaded engine may still be computing what the loop issued: count it as the run's
    wall = time.monotonic() - wall0 if ckpt is None else ckpt.wall_s()   # (every session's, when resumed)

    # The job's final global model, as every worker would pull it.
    global_keys = grad_keys if not spec.exchanges_deltas and spec.distributed else list(range(len(first.params)))
    final = servers.snapshot()
    sim.snapshots.append((virtual, save(len(sim.snapshots), virtual, final)))
    digest = engine.model_digest([final[k] for k in global_keys])
    for dev in devices:
        dev.stats.final_model_sha256 = digest
        dev.stats.final_model_keys = len(global_keys)
        stats = dev.stats.as_dict()
        stats["train_time_s"] = virtual
        _atomic_json(os.path.join(args.metrics_out, "worker-%d.json" % dev.slot), stats)

    snapshots = list(sim.snapshots)
    config = WorkerConfig(sync=job.mode, num_slots=len(devices), data_dir=args.data_dir or WorkerConfig().data_dir)
    # Points scored during the run (stop at the target) are not scored again; eval_net None: built there.
    summary = train.evaluate_run(args, config, job.mode, snapshots, ctx, input_size, virtual, [],
                                 train_set=(images, labels), scores=sim.scores, eval_net=eval_net)
    summary["engine"] = "sim"
    summary["time_unit"] = "virtual seconds"
    cpu = time.process_time() if ckpt is None else ckpt.cpu_s()
    summary["sim"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "virtual_s": round(virtual, 3),
                      "virtual_s_per_wall_s": round(virtual / wall, 3) if wall > 0 else None,
                      "base_iter_s": job.base_iter_s, "latency_ms": args.latency_ms, "per_key_ms": args.per_key_ms,
                      "bandwidth_gbps": args.bandwidth_gbps, "jitter": job.jitter,
                      "state_server_decisions": sim.decisions,
                      "preduce": sim.service.stats().get("preduce"),   # Partial Reduce's groups and interventions
                      "stopped_at_target_s": sim.target_reached_at,
                      "max_iterations": job.max_iterations, "stopped_at_cap_s": sim.capped_at,
                      "command": ["python", "-m", "mxhet.sim"] + checkpoint.without_checkpoint_flags(args.argv)}
    if ckpt is not None:   # how the run was kept; the command above is the same with or without
        summary["sim"]["checkpoint"] = {"every_min": args.checkpoint_every_min, "resumed_at_s": ckpt.resumed_at_s,
                                        "commit": ckpt.header["commit"], "segments": ckpt.segments}
    if job.mode_options.get("round_deadline"):   # --round-deadline: every push's (slot, round, share)
        summary["sim"]["deadline_pushes"] = [list(p) for p in sim.deadline_log]
    if job.mode_options.get("late_memory"):   # --late-memory: every memory push and keeper's pull
        summary["sim"]["memory_log"] = [list(p) for p in sim.memory_log]
    if job.mode_options.get("wait_needed"):   # --wait-needed: the slots each round also waited for, as needed
        slot_of = {dev.rank: dev.slot for dev in devices}
        summary["sim"]["needed_rounds"] = [[r["round"], sorted(slot_of[int(x)] for x in r["needed"])]
                                           for r in sim.service.rule("esync").stats() if r.get("needed")]
    if job.mode == "adsp":   # the commit-rate search as it ran, times in virtual seconds of the run
        scheduler = sim.service.adsp
        summary["adsp_search"] = scheduler.search_record(origin=scheduler.start) if scheduler is not None else None
    summary["members"] = sim.members.summary() if sim.members is not None else None
    if job.leaves:   # --events: when each device left and joined again, and the rounds each took part in
        summary["elastic"] = {
            "left_at_s": {str(d.slot): round(d.departed_at, 6) for d in devices
                          if getattr(d, "departed_at", None) is not None},
            "joined_at_s": {str(d.slot): round(d.joined_at, 6) for d in devices
                            if getattr(d, "joined_at", None) is not None},
            "membership": sim.service.stats()["membership"]}
    rule = sim.service.rule("gcada")   # G-CADA: every iteration's selection and counts
    gcada = rule.coordinator if rule is not None else None
    summary["gcada"] = gcada.stats(args.batch_size) if gcada is not None else None
    _atomic_json(os.path.join(args.metrics_out, "summary.json"), summary)
    if ckpt is not None:   # the run is finished: its summary is what --resume keeps now
        ckpt.remove()
    if args.tensorboard:  # the tags of a real job's event files, in virtual seconds
        from ..observe.tensorboard import write_summary
        write_summary(args.tensorboard, summary)
    return summary


def _checkpointer(args, job, started):
    """The run's :class:`checkpoint.Checkpointer` (None without --checkpoint-every-min), loaded with the
    checkpoint to resume from under --resume, or with the old one removed otherwise."""
    if not (getattr(args, "checkpoint_every_min", 0) or getattr(args, "checkpoint_stop_at", None) is not None):
        return None
    header = {"argv": checkpoint.run_argv(getattr(args, "argv", None) or []), "mode": job.mode, "seed": job.seed,
              "commit": checkpoint.code_commit()}
    ckpt = checkpoint.Checkpointer(args.checkpoint_dir, 60.0 * args.checkpoint_every_min, header,
                                   stop_at=args.checkpoint_stop_at, started=started)
    if args.resume:
        at = ckpt.load()
        LOG.info("%s", "no checkpoint in %s: the run starts from the beginning" % args.checkpoint_dir if at is None
                 else "resuming from the checkpoint at %.3f virtual s in %s" % (at, args.checkpoint_dir))
    else:
        ckpt.remove()
    return ckpt


def main(argv=None):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        summary = run(args)
    except ConfigError as exc:
        print("mxhet.sim: error: %s" % exc, file=sys.stderr)
        return 2
    except checkpoint.Stopped as exc:
        print("mxhet.sim: %s; the same command with --resume continues it" % exc, file=sys.stderr)
        return 128 + exc.signum if exc.signum else 3
    s = summary["sim"]
    print("simulated %.1f virtual seconds in %.1f s of wall time (%.2f virtual s per wall s), %d State Server "
          "decisions; final accuracy %.4f, time to %.2f: %s"
          % (s["virtual_s"], s["wall_s"], s["virtual_s_per_wall_s"] or 0, s["state_server_decisions"],
             summary["final_accuracy"], summary["target_accuracy"],
             "%.1f virtual s" % summary["time_to_target_s"] if summary["time_to_target_s"] is not None
             else "not reached"))
    print(json.dumps({"summary": os.path.join(args.metrics_out, "summary.json")}))
    return 0
