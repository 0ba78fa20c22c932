"""``python -m mxhet.train``: train a model on Fashion-MNIST under a sync mode.

Run by the launcher on every worker::

    mxhet-launch -n 3 -s 1 --sync esync --slowdown 1,1,10 -- \\
        python -m mxhet.train --model smallcnn --time-budget 60 --metrics-out runs/esync

Each worker writes ``DIR/worker-<slot>.json``; the worker of PS-LITE rank 0 also
saves snapshots of the global model during training, evaluates them on the
test set *after* training (so evaluation never slows training down), and writes
``DIR/summary.json``. Under ``mxhet-launch --elastic`` a chief that died is
replaced at the end by the rank the State Server names (the lowest still in the
job): it scores the chief's snapshots listed in ``DIR/snapshots/index.json``
and the final model, and writes the summary.
"""
import argparse
import glob
import json
import logging
import os
import sys
import time
import traceback

import numpy as np

from .config import worker_config
from .errors import ConfigError, ProtocolError, StateServerTimeout
from .evaluation import DEFAULT_BN_BATCHES
from .gluon_private import trainer_params
from .mxnet_import import import_mxnet
from .policy.flags import add_mode_arguments, resolve_args

LOG = logging.getLogger("mxhet.train")


def build_parser():
    p = argparse.ArgumentParser(prog="python -m mxhet.train", description=__doc__.splitlines()[0])
    g = p.add_argument_group("model and data")
    g.add_argument("--model", default="smallcnn", help="model name (mxhet.models.MODEL_NAMES)")
    g.add_argument("--input-size", type=int, default=None, help="input image side in pixels (default: per model)")
    g.add_argument("--norm", choices=["batch", "group"], default="batch",
                   help="the zoo networks' normalization layers: their own BatchNorm, or GroupNorm in their place "
                        "(no batch statistics: for non-i.i.d. data; default %(default)s)")
    g.add_argument("--loss", choices=["softmax", "l2"], default="softmax",
                   help="training loss: softmax cross-entropy, or l2: half the mean squared error against the "
                        "one-hot label (the G-CADA paper's linear regression, with --model linear)")
    g.add_argument("--dist", choices=["iid", "non-iid", "group"], default="iid",
                   help="how the training set is split ('group': the same shard for every member of a "
                        "group, disjoint across groups; needs --groups)")
    g.add_argument("--data-dir", default=None, help="Fashion-MNIST directory (default: MXHET_DATA_DIR or Debian's)")
    g.add_argument("--seed", type=int, default=0, help="seed of initialization, split and shuffling")
    g.add_argument("--worker-contexts", default="", metavar="LIST",
                   help="every worker trains on these contexts, e.g. cpu,cpu or cpu,gpu(0): each batch is split "
                        "across them (split_and_load) and their gradients summed (default: the launcher's one "
                        "context per worker, --contexts)")
    g = p.add_argument_group("optimization")
    g.add_argument("--sync", default=None, help="sync mode (default: the launcher's --sync, else local)")
    g.add_argument("--batch-size", type=int, default=64, help="samples per local iteration")
    g.add_argument("--optimizer", default="sgd", help="MXNet optimizer name (sgd, adam, ...)")
    g.add_argument("--lr", type=float, default=0.05, help="(local) learning rate")
    g.add_argument("--momentum", type=float, default=0.0, help="momentum, for sgd")
    g.add_argument("--wd", type=float, default=0.0, help="weight decay")
    g.add_argument("--on-nonfinite", choices=["stop", "skip"], default="stop",
                   help="NaN/Inf in a delta or gradient about to be pushed: stop the job with an error "
                        "naming the worker and round, or push zeros instead (default %(default)s)")
    g = p.add_argument_group("stopping and metrics")
    g.add_argument("--time-budget", type=float, default=60.0,
                   help="seconds of training (default %(default)s); a mode with rounds stops at a round "
                        "boundary after it, so a short budget is overrun by up to a round: at the paper-sim "
                        "profile an ESync round lasts at least a slow device's iteration (13.5 s)")
    g.add_argument("--max-rounds", type=int, default=0,
                   help="stop after this many aggregations (rounds; a step in sync/async/local); 0 = no limit")
    g.add_argument("--target-accuracy", type=float, default=0.8, help="test accuracy for time_to_target_s")
    g.add_argument("--eval-interval", type=float, default=2.0, help="seconds between snapshots of the global model")
    g.add_argument("--eval-samples", type=int, default=2000, help="test images per curve point (final: all)")
    g.add_argument("--final-eval-samples", type=int, default=0,
                   help="test images for the final point (default 0: all 10,000)")
    g.add_argument("--bn-batches", type=int, default=DEFAULT_BN_BATCHES,
                   help="before each evaluation, recompute BatchNorm statistics of the global model on this "
                        "many fixed training batches of --batch-size (precise BN; 0 = use the snapshot's own "
                        "statistics; default %(default)s)")
    g.add_argument("--metrics-out", required=True, help="directory for summary.json and worker files")
    g.add_argument("--tensorboard", default="", metavar="DIR",
                   help="write per-device and job scalars as TensorBoard event files under DIR "
                        "(runs device-<slot> and job; see mxhet.observe.tensorboard)")
    g.add_argument("--checkpoint-dir", default="", help="save checkpoints here (see mxhet.checkpoint)")
    g.add_argument("--checkpoint-every", type=int, default=10, help="rounds between checkpoints (default %(default)s)")
    g.add_argument("--resume", action="store_true", help="resume from the newest complete checkpoint")
    g.add_argument("--dump-rounds", type=int, default=0,
                   help="save weights (and esync deltas) of the first N rounds, for checking")
    add_mode_arguments(p)
    return p


def _validate(args):
    for name in ("batch_size", "eval_samples"):
        if getattr(args, name) < 1:
            raise ConfigError("--%s must be >= 1, got %r" % (name.replace("_", "-"), getattr(args, name)))
    for name in ("time_budget", "eval_interval", "lr"):
        if not getattr(args, name) > 0:
            raise ConfigError("--%s must be > 0, got %r" % (name.replace("_", "-"), getattr(args, name)))
    if args.checkpoint_every < 1:
        raise ConfigError("--checkpoint-every must be >= 1, got %r" % args.checkpoint_every)
    if args.resume and not args.checkpoint_dir:
        raise ConfigError("--resume needs --checkpoint-dir")
    for name in ("final_eval_samples", "bn_batches"):
        if getattr(args, name) < 0:
            raise ConfigError("--%s must be >= 0, got %r" % (name.replace("_", "-"), getattr(args, name)))
    if args.max_rounds < 0:
        raise ConfigError("--max-rounds must be >= 0, got %r" % args.max_rounds)
    if not 0 < args.target_accuracy <= 1:
        raise ConfigError("--target-accuracy must be in (0, 1], got %r" % args.target_accuracy)
    from .models import check_norm
    check_norm(args.model, args.norm)


def optimizer_params(args):
    """The local optimizer's parameters from the command line."""
    params = {"learning_rate": args.lr, "wd": args.wd}
    if args.optimizer == "sgd":
        params["momentum"] = args.momentum
    return params


def mode_options(args, mode):
    """Every option mode ``mode`` takes, by name: the command line's value, else
    the mode's default (flags of other modes are ignored), checked by its spec.

    Raises:
        ConfigError: naming the option, its flag and the bad value.
    """
    return resolve_args(args, mode)


def worker_contexts(args, config):
    """This worker's MXNet contexts: ``--worker-contexts``, else the launcher's one.

    Raises:
        ConfigError: both name a context (the launcher gave this worker a GPU).
    """
    from .config import mx_context, mx_contexts
    if not args.worker_contexts:
        return [mx_context(config.context)]
    if config.context != "cpu":
        raise ConfigError("--worker-contexts %s and the launcher's context %s for slot %d: give one of them"
                          % (args.worker_contexts, config.context, config.slot))
    return mx_contexts(args.worker_contexts)


def split_batch(x, y, contexts):
    """``(data, label)`` parts of one batch, one pair per context (gluon's ``split_and_load``)."""
    if len(contexts) == 1:
        return [(x, y)]
    from mxnet import gluon
    return list(zip(gluon.utils.split_and_load(x, contexts), gluon.utils.split_and_load(y, contexts)))


def context_digests(trainer, contexts, keys):
    """Per context, the digest of parameters ``keys`` (in key order) as that
    context holds them: the same as ``final_model_sha256`` when every copy is
    the job's final model."""
    from .modes.base import model_digest
    params = trainer_params(trainer)
    return [model_digest([params[i].data(c) for i in keys]) for c in contexts]


SNAPSHOT_INDEX = "index.json"
"""The chief's list of its snapshots (seconds, file name) and loss points, rewritten after each
snapshot, in the snapshot directory, with the Unix time its training started (``started_unix``, the
job's clock) and the chief's restarts so far: what a survivor that takes over the chief's end-of-job
duties (``--elastic``) scores, and what a chief started again continues."""


def write_snapshot_index(snap_dir, snapshots, losses, started_unix=None, restarts=()):
    """Record the chief's ``snapshots`` ([(seconds, path), ...]) and ``losses`` so far (atomically),
    the Unix time ``started_unix`` its seconds count from, and ``restarts`` (dicts, see
    :func:`continue_chief_record`)."""
    _atomic_json(os.path.join(snap_dir, SNAPSHOT_INDEX),
                 {"snapshots": [[t, os.path.basename(path)] for t, path in snapshots], "train_loss": losses,
                  "started_unix": started_unix, "chief_restarts": list(restarts)})


def read_snapshot_record(snap_dir):
    """The chief's index as it last wrote it: a dict with ``snapshots`` ([(seconds, path), ...], those
    whose file still exists), ``train_loss``, ``started_unix`` (None if the index has none) and
    ``chief_restarts``; None when it wrote none (it died before its first snapshot) or the index cannot
    be read."""
    try:
        with open(os.path.join(snap_dir, SNAPSHOT_INDEX)) as f:
            index = json.load(f)
        snapshots = [(float(t), os.path.join(snap_dir, name)) for t, name in index["snapshots"]]
        losses = [list(point) for point in index["train_loss"]]
        started = index.get("started_unix")
        started = None if started is None else float(started)
        restarts = [dict(r) for r in index.get("chief_restarts", ())]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {"snapshots": [(t, path) for t, path in snapshots if os.path.exists(path)], "train_loss": losses,
            "started_unix": started, "chief_restarts": restarts}


def read_snapshot_index(snap_dir):
    """The chief's snapshots ([(seconds, path), ...]) and loss points as its index last listed them;
    ([], []) when it wrote none (it died before its first snapshot) or the index cannot be read."""
    record = read_snapshot_record(snap_dir)
    return ([], []) if record is None else (record["snapshots"], record["train_loss"])


def next_snapshot_number(snapshots):
    """The number of the next ``NNNNNN.params`` after every one in ``snapshots`` ([(seconds, path), ...])."""
    numbers = [int(stem) for stem in (os.path.splitext(os.path.basename(p))[0] for _, p in snapshots)
               if stem.isdigit()]
    return max(numbers) + 1 if numbers else 0


def continue_chief_record(record, started_unix, first_round=None, slot=0):
    """A chief started again (``--max-restarts``) continues the dead chief's record: from its index
    ``record`` (:func:`read_snapshot_record`, or None) and the Unix time its own training started.

    Returns:
        ``(offset_s, snapshots, losses, job_started_unix, restarts)``: the seconds to add to this
        process's times to put them on the job's clock (its training start; 0 when the index names
        none: the curve then starts again at this process's start), the snapshots and loss points kept,
        the job's start and the chief's restarts with this one appended (``t_s`` on the job's clock,
        ``round``: its first round, None where the mode names none, ``slot``, ``curve_kept_until_s``:
        the last snapshot kept).
    """
    if record is None or record["started_unix"] is None:
        snapshots, losses, job_started, restarts = [], [], started_unix, []
        if record is not None:   # an index of before started_unix was recorded: its times are on no known clock
            restarts = list(record["chief_restarts"])
    else:
        snapshots, losses = list(record["snapshots"]), [list(p) for p in record["train_loss"]]
        job_started, restarts = record["started_unix"], list(record["chief_restarts"])
    offset = max(0.0, started_unix - job_started)
    restarts.append({"t_s": round(offset, 3), "round": first_round, "slot": slot,
                     "curve_kept_until_s": round(snapshots[-1][0], 3) if snapshots else None})
    return offset, snapshots, losses, job_started, restarts


def job_round_members(record_members, own, first_round):
    """``round_members`` of a chief started again: the member count of each round before its
    ``first_round`` from the State Server's record (``record_members``: round -> ranks; the dead
    chief's own list died with it), then its own list ``own`` (from ``first_round`` on)."""
    before = sorted((int(r), len(ranks)) for r, ranks in (record_members or {}).items()
                    if int(r) < first_round)
    return [n for _, n in before] + list(own)


def shift_event_times(elastic, offset_s):
    """The ``elastic`` record (:func:`mxhet.control.membership.job_events`) with every known ``t_s``
    moved by ``offset_s`` (onto the job's clock); None stays None."""
    if not elastic:
        return elastic
    events = [dict(e, t_s=None if e["t_s"] is None else round(e["t_s"] + offset_s, 3))
              for e in elastic.get("events", ())]
    return dict(elastic, events=events)


def _atomic_json(path, obj):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


class RoundDumper:
    """Saves the first N rounds' weights of this worker as .npz (for checks)."""

    def __init__(self, directory, slot, limit):
        self.directory, self.slot, self.limit = directory, slot, limit
        os.makedirs(directory, exist_ok=True)

    def delta_hook(self, round_, before, deltas, after, memory=None):
        """``memory``: ESync's --late-memory, the keeper's term of the absent devices' memories in ``deltas``."""
        if round_ < self.limit:
            arrays = {}
            for i, (b, d, a) in enumerate(zip(before, deltas, after)):
                arrays["before_%d" % i], arrays["delta_%d" % i], arrays["after_%d" % i] = b, d, a
            for i, m in enumerate(memory or ()):
                arrays["memory_%d" % i] = m
            np.savez(os.path.join(self.directory, "slot%d_round%d.npz" % (self.slot, round_)), **arrays)

    def weights(self, round_, trainer, loss=None):
        if round_ < self.limit:
            arrays = {"after_%d" % i: p.list_data()[0].asnumpy() for i, p in enumerate(trainer_params(trainer))}
            if loss is not None:
                arrays["loss"] = np.array(loss)
            np.savez(os.path.join(self.directory, "slot%d_round%d.npz" % (self.slot, round_)), **arrays)


def run(args, config=None):
    """Train under the configuration; returns this worker's stats dict."""
    import mxnet as mx
    from mxnet import autograd

    from . import checkpoint, data, models
    from . import losses as losses_mod
    from .observe.worker import WorkerObserver
    from .trainer import Trainer

    _validate(args)
    config = config or worker_config()
    if args.sync and config.launched and args.sync != config.sync:
        raise ConfigError("--sync %s contradicts the launcher's --sync %s" % (args.sync, config.sync))
    mode = args.sync or config.sync
    options = mode_options(args, mode)
    contexts = worker_contexts(args, config)
    ctx = contexts[0]   # data, snapshots and evaluation; the mode synchronizes this copy
    os.makedirs(args.metrics_out, exist_ok=True)

    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    input_size = args.input_size or models.default_input_size(args.model)
    net = models.get_model(args.model, classes=10, input_size=input_size, norm=args.norm)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize()

    images, labels = data.load_fashion_mnist("train", args.data_dir or config.data_dir)
    shard = data.partition(labels, config.num_slots, config.slot, dist=args.dist, seed=args.seed,
                           groups=options.get("groups", args.groups))
    batches = data.ShardIterator(images, labels, shard, args.batch_size, seed=args.seed + 1000 * config.slot,
                                 input_size=input_size, ctx=ctx)
    x, _ = next(batches)
    net(x)  # resolve deferred shapes before the initial model is shared

    trainer = Trainer(net.collect_params(), args.optimizer, optimizer_params(args), sync=mode, config=config,
                      on_nonfinite=args.on_nonfinite, **options)
    smoothness = options.get("smoothness")
    if smoothness is not None:   # gcada, cada: eq. (9)'s L_g
        losses_mod.check_smoothness(smoothness, args.model, args.loss)
        if smoothness == "shard":
            trainer.mode.set_smoothness(losses_mod.shard_smoothness(images, shard, input_size))
    # dist_async: rounds of their own, unless the State Server names each round's members (esync, localsgd)
    executor = type(trainer.mode)   # (sync under --elastic: ElasticSync, rounds the State Server names)
    if (args.checkpoint_dir and executor.kvstore_type == "dist_async"
            and not getattr(executor, "member_rounds", False)):
        raise ConfigError("checkpoints need a mode whose workers finish rounds together (esync, sync, localsgd, "
                          "local); %s workers run rounds of their own" % mode)
    if args.resume:
        resumed, directory, record = checkpoint.load(args.checkpoint_dir, config.slot, config.num_slots)
        params = net.collect_params()
        for name, arr in mx.nd.load(os.path.join(directory, "global.params")).items():
            params[name].set_data(arr)  # every worker starts from the saved global model
        trainer.load_states(os.path.join(directory, "slot%d.states" % config.slot))
        batches.load_state_dict(record["iterator"])
        trainer.mode.restore_state(record["mode"])
        LOG.info("slot %d resumes from round %d (%s)", config.slot, resumed, directory)
    # The first snapshot is the model every worker starts from (rank 0's, which kv.init shares). Read after
    # setup it could already hold other workers' updates in the dist_async modes, which start training
    # as soon as they have pulled it.
    initial = {p.name: p.data(ctx).copy() for p in trainer_params(trainer)}
    trainer.setup(args.batch_size)
    rank = trainer.rank
    is_chief = rank == 0
    LOG.info("slot %d is PS-LITE rank %d, mode %s, contexts %s, slowdown %g",
             config.slot, rank, mode, ",".join(str(c) for c in contexts), config.slowdown)

    dumper = RoundDumper(os.path.join(args.metrics_out, "dump"), config.slot, args.dump_rounds) \
        if args.dump_rounds else None
    deltas = trainer.mode.exchanges_deltas
    if dumper is not None and deltas:
        trainer.mode.round_hook = dumper.delta_hook

    snap_dir = os.path.join(args.metrics_out, "snapshots")
    snapshots = []
    losses = []
    start = time.monotonic()
    start_unix = time.time()
    # The chief started again into a running job (--max-restarts): it continues the dead chief's record
    # on the job's clock (offset: seconds from the job's training start to its own) instead of its own.
    chief_back = is_chief and bool(getattr(trainer.mode.client, "rejoined", False))
    offset, job_started, chief_restarts = 0.0, start_unix, []
    observer = WorkerObserver(mode, config.slot, live_dir=config.live_dir, tensorboard_dir=args.tensorboard,
                              chief=is_chief)
    if chief_back:
        os.makedirs(snap_dir, exist_ok=True)
        offset, snapshots[:], losses[:], job_started, chief_restarts = continue_chief_record(
            read_snapshot_record(snap_dir), start_unix, trainer.stats.rejoined_at_round, config.slot)
        LOG.warning("rank 0 (slot %d) started again: it continues the chief's record, %d snapshots kept, "
                    "%.1f s into the job", config.slot, len(snapshots), offset)
    elif is_chief:
        os.makedirs(snap_dir, exist_ok=True)
        for old in glob.glob(os.path.join(snap_dir, "*.params")) + glob.glob(os.path.join(snap_dir, SNAPSHOT_INDEX)):
            os.remove(old)
    next_number = [next_snapshot_number(snapshots)]

    def snapshot(arrays=None):
        t = time.monotonic() - start + offset if arrays is None else 0.0
        path = os.path.join(snap_dir, "%06d.params" % next_number[0])
        next_number[0] += 1
        if arrays is None:
            trainer.save_global(path)
        else:
            mx.nd.save(path, arrays)
        snapshots.append((t, path))

    def write_index():
        write_snapshot_index(snap_dir, snapshots, losses, job_started, chief_restarts)

    if is_chief:
        if not chief_back:   # a chief back holds no initial model of the job: the servers' is newer
            snapshot(initial)
        write_index()
    del initial
    loss_fn = losses_mod.get_loss(args.loss)
    last_snap = last_log = time.monotonic()

    def done(stats):
        return (time.monotonic() - start >= args.time_budget
                or bool(args.max_rounds and stats.rounds >= args.max_rounds))

    trainer.set_stop_condition(done)
    last_checkpoint = trainer.stats.rounds
    while not trainer.should_stop:
        x, y = next(batches)
        with autograd.record():
            parts = [loss_fn(net(xp), yp) for xp, yp in split_batch(x, y, contexts)]
        autograd.backward(parts)
        loss = parts[0] if len(parts) == 1 else mx.nd.concat(*[p.as_in_context(ctx) for p in parts], dim=0)
        if trainer.mode.uses_loss:  # reading the loss waits for the backward pass: only when it is used
            trainer.observe_loss(loss.mean().asscalar())   # this batch's, before its step may send it
        trainer.step(args.batch_size)
        observer.step(trainer.stats, lambda: loss.mean().asscalar())
        if dumper is not None and not deltas:
            dumper.weights(trainer.stats.rounds - 1, trainer, loss=float(loss.mean().asscalar()))
        rounds = trainer.stats.rounds
        if args.checkpoint_dir and trainer.mode.aggregated and rounds % args.checkpoint_every == 0 \
                and rounds != last_checkpoint:
            t0 = time.monotonic()
            checkpoint.save_worker(args.checkpoint_dir, rounds, config.slot, trainer, batches, args.seed)
            if is_chief:
                checkpoint.save_global(args.checkpoint_dir, rounds, trainer)
                checkpoint.prune(args.checkpoint_dir, config.num_slots)
            trainer.mode.pause(time.monotonic() - t0)
            last_checkpoint = rounds
        now = time.monotonic()
        if is_chief and trainer.mode.aggregated and now - last_snap >= args.eval_interval:
            snapshot()
            losses.append([round(now - start + offset, 3), float(loss.mean().asscalar())])
            observer.loss_point(now - start + offset, losses[-1][1], trainer.stats.rounds)
            write_index()
            last_snap = now
        if is_chief and now - last_log >= 10.0:
            LOG.info("%.0f s: %d rounds, %d local iterations", now - start,
                     trainer.stats.rounds, trainer.stats.iterations)
            last_log = now
    train_time = time.monotonic() - start
    all_keys = range(len(trainer_params(trainer)))
    # the last step left every context with the worker's model (BatchNorm statistics included)
    equal_after_steps = len(contexts) == 1 or len(set(context_digests(trainer, contexts, all_keys))) == 1
    observer.set_phase("finishing", trainer.stats, elapsed_s=train_time)
    trainer.finish()  # every worker now holds the job's final global model
    if is_chief:
        snapshot()
        extra = trainer.mode.summary_fields()   # now: the State Server is still up, every commit is in

    stats = trainer.stats.as_dict()
    stats["train_time_s"] = train_time
    stats["contexts"] = [str(c) for c in contexts]
    if len(contexts) > 1:   # each copy against the final model (final_model_sha256's keys), and against each other
        stats["context_model_sha256"] = context_digests(trainer, contexts, trainer.mode.global_keys())
        stats["contexts_equal_after_steps"] = equal_after_steps
        stats["contexts_equal"] = len(set(context_digests(trainer, contexts, all_keys))) == 1
    _atomic_json(os.path.join(args.metrics_out, "worker-%d.json" % config.slot), stats)
    trainer.mode.barrier()  # every worker file is written
    # Rank 0, unless it left the job (--elastic: the State Server's barrier names the lowest rank still in it).
    writes_summary = getattr(trainer.mode, "summary_rank", 0) == rank
    if writes_summary and not is_chief:
        # The chief died: its snapshots up to its last index and its loss points stand; the curve after
        # them is lost. This worker holds the job's final model (finish() pulled it).
        LOG.warning("rank %d (slot %d) writes the summary in place of the chief (rank 0), which left the job",
                    rank, config.slot)
        record = read_snapshot_record(snap_dir)
        if record is not None:
            snapshots[:], losses[:] = record["snapshots"], record["train_loss"]
            if record["started_unix"] is not None:   # this worker's times onto the job's clock (the chief's)
                offset = start_unix - record["started_unix"]
        chief_until = round(snapshots[-1][0], 3) if snapshots else None
        os.makedirs(snap_dir, exist_ok=True)
        final = os.path.join(snap_dir, "final-rank%d.params" % rank)
        trainer.save_global(final)
        snapshots.append((time.monotonic() - start + offset, final))
        extra = trainer.mode.summary_fields()
        extra["elastic"] = shift_event_times(extra.get("elastic"), offset)
        extra["written_by"] = {"rank": rank, "slot": config.slot, "took_over": True,
                               "chief_curve_until_s": chief_until}
        if record is not None and record["chief_restarts"]:
            extra["written_by"]["chief_restarts"] = record["chief_restarts"]
    elif writes_summary:
        extra["written_by"] = {"rank": rank, "slot": config.slot, "took_over": False, "chief_curve_until_s": None}
        if chief_back:
            extra["written_by"]["chief_restarts"] = chief_restarts
            extra["elastic"] = shift_event_times(extra.get("elastic"), offset)
            if "round_members" in extra and trainer.stats.rejoined_at_round is not None:
                extra["round_members"] = job_round_members(_state_server_members(trainer.mode),
                                                           extra["round_members"], trainer.stats.rejoined_at_round)
    if writes_summary:
        # Before leaving the job: PS-LITE's scheduler and servers stop once every
        # worker has left, and the launcher takes a worker still running long
        # after them for a hung one (evaluating a big model takes minutes).
        observer.set_phase("evaluating", trainer.stats)
        summary = evaluate_run(args, config, mode, snapshots, ctx, input_size, train_time + offset, losses,
                               train_set=(images, labels),
                               on_point=lambda t, acc: observer.evaluated(t, acc, trainer.stats))
        summary.update(extra)
        _atomic_json(os.path.join(args.metrics_out, "summary.json"), summary)
        observer.finished(summary)
        LOG.info("summary: final accuracy %.4f, time to %.2f: %s", summary["final_accuracy"],
                 args.target_accuracy, summary["time_to_target_s"])
    observer.close(trainer.stats)
    trainer.close()
    return stats


def evaluate_run(args, config, mode, snapshots, ctx, input_size, train_time, losses, train_set, scores=(),
                 on_point=None, eval_net=None):
    """Evaluate the snapshots of the global model and merge the worker files.

    Every snapshot is scored the same way in every mode (:mod:`mxhet.evaluation`):
    loaded into ``eval_net``, a network of its own that never trains
    (:func:`mxhet.evaluation.evaluation_network`, built here when None), its
    BatchNorm statistics are recomputed on ``--bn-batches`` fixed training
    batches, then its accuracy is measured on the test set. ``scores`` holds
    accuracies already measured this way for the first snapshots (the last
    one, scored on the whole test set, is always measured here). ``on_point(seconds,
    accuracy)`` is called as each point is known (the live view and TensorBoard).
    """
    from . import data, evaluation
    from .control.gcada import loads_of

    test_x, test_y = data.load_fashion_mnist("test", args.data_dir or config.data_dir)
    net = eval_net if eval_net is not None else evaluation.evaluation_network(args.model, input_size, args.norm, ctx)
    bn_layers = len(evaluation.batchnorm_layers(net))
    bn_inputs = evaluation.calibration_batches(train_set[0], train_set[1], args.bn_batches, args.batch_size,
                                               input_size, ctx) if bn_layers and args.bn_batches else []
    curve = []
    final_accuracy = None
    t0 = time.monotonic()
    for i, (t, path) in enumerate(snapshots):
        last = i == len(snapshots) - 1
        if i < len(scores) and not last:
            curve.append([round(t, 3), round(float(scores[i]), 4)])
            if on_point is not None:
                on_point(*curve[-1])
            continue
        evaluation.load_snapshot(net, path)
        evaluation.recompute_batchnorm(net, bn_inputs)
        final_limit = args.final_eval_samples or None
        acc = data.evaluate(net, test_x, test_y, input_size=input_size, ctx=ctx,
                            limit=final_limit if last else args.eval_samples)
        curve.append([round(t, 3), round(float(acc), 4)])
        if on_point is not None:
            on_point(*curve[-1])
        if last:
            final_accuracy = float(acc)
    reached = [t for t, acc in curve if acc >= args.target_accuracy]
    workers, departed = [], []
    for slot in range(config.num_slots):
        path = os.path.join(args.metrics_out, "worker-%d.json" % slot)
        if config.elastic and not os.path.exists(path):
            departed.append(slot)   # --elastic: a worker that died wrote no record; the job went on without it
            continue
        with open(path) as f:
            workers.append(json.load(f))
    return {
        "departed_slots": departed,
        "mode": mode,
        "ack": mode_options(args, mode).get("ack"),   # esync's; None in other modes
        "model": args.model,
        "norm": args.norm,
        "loss": args.loss,
        "input_size": input_size,
        "dist": args.dist,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
        "num_workers": config.num_slots,
        "target_accuracy": args.target_accuracy,
        "time_to_target_s": reached[0] if reached else None,
        "final_accuracy": final_accuracy,
        "train_time_s": train_time,
        "curve": curve,
        "train_loss": losses,
        "eval_samples": args.eval_samples,
        "evaluation": {
            "batchnorm": "precise" if bn_inputs else ("none in model" if not bn_layers else "as trained"),
            "bn_layers": bn_layers,
            "bn_batches": len(bn_inputs),
            "bn_batch_size": args.batch_size if bn_inputs else 0,
            "final_samples": args.final_eval_samples or len(test_y),
            "curve_samples": args.eval_samples,
            "seconds": round(time.monotonic() - t0, 3),
        },
        "workers": workers,
        "loads": loads_of(workers, args.batch_size),   # G-CADA eqs. (5)-(6); None in other modes
    }


def _state_server_members(mode):
    """The State Server's record of each round's members (round -> ranks), or None (with a warning)."""
    try:
        return mode.client.membership_record().get("members")
    except (ProtocolError, StateServerTimeout) as exc:
        LOG.warning("the membership record could not be fetched: %s", exc)
        return None


def _die(code):
    # A worker that leaves with a live dist kvstore hangs in MXNet's exit
    # barrier, which the other workers never reach: end the process at once so
    # that the launcher sees the failure and ends the job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv=None):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        import_mxnet()   # first, lean: the worker runs mxhet's code only
        run(args)
    except ConfigError as exc:
        print("mxhet.train: error: %s" % exc, file=sys.stderr)
        _die(2)
    except BaseException:  # noqa: BLE001  (any failure must end the process)
        traceback.print_exc()
        _die(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
