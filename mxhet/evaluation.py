"""The evaluation protocol every mode shares: precise BatchNorm, then test accuracy.

A snapshot of the global model holds the weights every mode agrees on, but its
BatchNorm running statistics (``grad_req='null'``) mean different things per
mode: ESync and the other delta-averaging modes average them with the deltas,
while in the gradient modes (sync, async, SSP, DC-ASGD) they stay local to each
worker, and rank 0's lag behind the global weights when rank 0 is a slow
device. Scored as they are, such snapshots fall to chance accuracy although
their weights are good, and the comparison between modes says nothing.

So before every evaluation the statistics are recomputed for the snapshot's
weights ("precise BN", Wu & Johnson 2021): the running mean and variance of
every BatchNorm layer become the average of the per-batch statistics over a
fixed set of training batches -- the same batches for every mode, snapshot and
worker count, drawn from the whole training set. This happens after training,
on rank 0, off the training clock. Models without BatchNorm are evaluated as
they are.

Snapshots are scored on a network of their own (:func:`evaluation_network`),
built once per job and never trained, not on a training replica.
"""
import numpy as np

from .errors import ConfigError
from .gluon_private import block_option, blocks

DEFAULT_BN_BATCHES = 10
"""Training batches over which the BatchNorm statistics are recomputed."""
BN_SEED = 20240229
"""Seed of the fixed recalibration batches (the same for every run)."""


def evaluation_network(model, input_size, norm="batch", ctx=None):
    """A network of ``model``'s architecture (as :func:`mxhet.models.get_model` builds
    it) that only scores snapshots: initialized, hybridized without static memory and
    shapes resolved. Build it once per job and load each snapshot with :func:`load_snapshot`.
    """
    import mxnet as mx

    from . import models
    net = models.get_model(model, classes=10, input_size=input_size, norm=norm)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    # Never static_alloc/static_shape, and never a training replica (the simulator's were built
    # that way until they hit the same race, see build_devices): in MXNet 1.9.1 such a CachedOp's BatchNorm writes the running statistics of a
    # training-mode pass without ordering later reads of the Parameter after that write (a read
    # right after the pass may see the value from before it; after mx.nd.waitall() it sees the
    # update), so precise BatchNorm on a replica may average nothing and keep the snapshot's
    # stale statistics: a good model then scores near chance, depending on timing (issue 36).
    net.hybridize()
    net(mx.nd.zeros((1, 1, input_size, input_size), ctx=ctx))
    return net


def _structural_name(name):
    """A parameter's name without its network's prefix (``resnetv10_`` of ``resnetv10_conv0_weight``),
    which a counter makes differ between two networks of one process."""
    return name.split("_", 1)[1] if "_" in name else name


def load_snapshot(net, snapshot):
    """Copy a snapshot of the global model into ``net``'s parameters.

    ``snapshot`` is the path of an ``mx.nd.save`` file or a dict (parameter name ->
    NDArray, names as the training network has them), or a list of NDArrays in the
    order of the parameters sorted by name (the engines' key order). Names are matched
    without the network prefix.

    Raises:
        ConfigError: when the snapshot's parameters are not ``net``'s.
    """
    import mxnet as mx
    if isinstance(snapshot, str):
        snapshot = mx.nd.load(snapshot)
    params = sorted(net.collect_params().items())
    if isinstance(snapshot, dict):
        by_name = {_structural_name(name): arr for name, arr in snapshot.items()}
        missing = [name for name, _ in params if _structural_name(name) not in by_name]
        if missing or len(by_name) != len(params):
            raise ConfigError("the snapshot's %d parameters are not the evaluation network's %d (missing: %s)"
                              % (len(by_name), len(params), ", ".join(missing[:5]) or "none"))
        arrays = [by_name[_structural_name(name)] for name, _ in params]
    else:
        arrays = list(snapshot)
    if [tuple(a.shape) for a in arrays] != [p.shape for _, p in params]:
        raise ConfigError("the snapshot's parameter shapes do not match the evaluation network's")
    for (_, p), a in zip(params, arrays):
        p.set_data(a)


def batchnorm_layers(net):
    """Every BatchNorm block of ``net`` that updates running statistics in training, in order."""
    from mxnet.gluon import nn  # MXNet is imported only when needed: the flag defaults above are read without it
    return [b for b in blocks(net) if isinstance(b, nn.BatchNorm) and not block_option(b, "use_global_stats", False)]


def calibration_batches(images, labels, count, batch_size, input_size, ctx=None, seed=BN_SEED):
    """``count`` fixed batches of ``batch_size`` training images, drawn without
    replacement from the whole training set (not one worker's shard).

    Raises:
        ConfigError: for a bad count or batch size, or too few images.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError("the number of BatchNorm batches must be a positive integer, got %r" % (count,))
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("batch_size must be a positive integer, got %r" % (batch_size,))
    if count * batch_size > len(images):
        raise ConfigError("%d BatchNorm batches of %d need %d images; the training set has %d"
                          % (count, batch_size, count * batch_size, len(images)))
    from . import data
    order = np.random.RandomState(seed).permutation(len(images))[:count * batch_size]
    return [next(iter(data.eval_batches(images[idx], labels[idx], batch_size, input_size, ctx)))[0]
            for idx in np.split(order, count)]


def recompute_batchnorm(net, batches):
    """Set every BatchNorm layer's running statistics to the average of its
    per-batch statistics over ``batches`` (NDArrays the net takes as input).

    A layer that no gradient passes through (e.g. ResNet-v2's BatchNorm of the
    input image, without scale and shift) is never updated by MXNet, in
    training or here; it keeps the statistics it has.

    Returns:
        the number of BatchNorm layers recomputed (0: nothing to do).
    """
    import mxnet as mx
    layers = [layer for layer in batchnorm_layers(net) if float(block_option(layer, "momentum", 0.9)) < 1.0]
    if not layers or not batches:
        return 0
    # MXNet updates the running statistics in BatchNorm's backward pass, with
    # the batch's statistics: a statistic set to 0 becomes (1 - momentum) x
    # the batch's after one training-mode forward and backward, whatever the
    # backend (plain, oneDNN, cuDNN) or hybridization. Zero, run, rescale, sum.
    # (The parameters' gradient buffers are overwritten: this runs after training.)
    params = [(layer.running_mean, layer.running_var, 1.0 - float(block_option(layer, "momentum", 0.9)))
              for layer in layers]
    saved = [(mean.data().copy(), var.data().copy()) for mean, var, _ in params]
    sums = [[mx.nd.zeros_like(mean.data()), mx.nd.zeros_like(var.data())] for mean, var, _ in params]
    for x in batches:
        for mean, var, _ in params:
            mean.data()[:] = 0
            var.data()[:] = 0
        with mx.autograd.record(train_mode=True):
            out = net(x)
        out.backward()
        for (mean, var, keep), acc in zip(params, sums):
            acc[0] += mean.data() / keep
            acc[1] += var.data() / keep
    recomputed = 0
    for (mean, var, _), (mean_sum, var_sum), (old_mean, old_var) in zip(params, sums, saved):
        if float(var_sum.abs().sum().asscalar()) == 0.0:  # never updated: a variance is never exactly 0
            mean.set_data(old_mean)
            var.set_data(old_var)
            continue
        mean.set_data(mean_sum / len(batches))
        var.set_data(var_sum / len(batches))
        recomputed += 1
    mx.nd.waitall()
    return recomputed
