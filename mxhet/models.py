"""Models for 1-channel Fashion-MNIST input.

``smallcnn`` is a small, fast CNN for tests and smoke runs. The other names are
GluonCV model-zoo networks built with ``pretrained=False``. Every zoo network
here leaves its first layer's input channels to deferred shape inference, so it
takes (b, 1, S, S) batches unchanged (checked for each name). One adaptation:
``inceptionv3`` ends with a fixed 8 x 8 average pool that only fits 299-pixel
inputs; it is replaced by a global average pool (identical at 299 pixels, no
parameters), which lets the network run from 75 pixels up. Built for an
``input_size``, a network computes each convolution that sees a single pixel
through its kernel's center tap (:func:`one_pixel_convs`): the same function,
about twice as fast for ResNet-18 at 32 pixels on a CPU.

Input sizes (pixels per side) were measured with MXNet 1.9.1 / GluonCV 0.11.0:
``min_input_size`` is the smallest size whose forward pass infers shapes (the
ResNets and MobileNet pad every stride-2 layer and accept even 1 pixel), and
``default_input_size`` a size that is cheap on a CPU.
"""
import collections

from mxnet.gluon import nn

from .errors import ConfigError
from .gluon_private import block_children, blocks, center_tap_forward, conv_options, forget_symbol

MODEL_NAMES = ("smallcnn", "alexnet", "resnet18_v1", "resnet50_v1", "resnet50_v2",
               "mobilenet1.0", "inceptionv3", "linear")
NORMS = ("batch", "group")
"""``norm``: the networks' own BatchNorm layers, or GroupNorm in their place."""
GROUPS = 16
"""Groups of a GroupNorm layer: every normalized layer of the zoo networks has a
multiple of 16 channels (Inception-v3 has 48-channel layers, so not 32). In
MXNet 1.x a GroupNorm layer's gamma and beta have one value per group."""
_BN_ONLY_KWARGS = ("momentum", "use_global_stats", "running_mean_initializer", "running_variance_initializer",
                   "fuse_relu", "axis")

_Spec = collections.namedtuple("_Spec", "build default_size min_size has_batchnorm")


def _smallcnn(classes):
    net = nn.HybridSequential(prefix="smallcnn_")
    with net.name_scope():
        net.add(nn.Conv2D(16, kernel_size=5, activation="relu"),
                nn.MaxPool2D(pool_size=2),
                nn.Conv2D(32, kernel_size=5, activation="relu"),
                nn.MaxPool2D(pool_size=2),
                nn.Dense(128, activation="relu"),
                nn.Dense(classes))
    return net


def _linear(classes):
    """A linear model on the flattened pixels (multinomial logistic regression
    under the softmax loss): the G-CADA paper's experiment uses a linear model."""
    net = nn.HybridSequential(prefix="linear_")
    with net.name_scope():
        net.add(nn.Dense(classes))
    return net


def group_norm(**kwargs):
    """A GroupNorm layer in place of a zoo network's ``BatchNorm(**kwargs)``.

    The BatchNorm-only arguments are dropped. A layer with neither scale nor
    shift normalizes the network's input image (ResNet-v2's first layer, one
    channel here): it gets one group, i.e. each image to zero mean and unit
    variance.
    """
    for name in _BN_ONLY_KWARGS:
        kwargs.pop(name, None)
    groups = 1 if kwargs.get("scale") is False and kwargs.get("center") is False else GROUPS
    return nn.GroupNorm(num_groups=groups, **kwargs)


def _zoo(name, classes, norm="batch"):
    import gluoncv  # slow to import (about 2 s): only when a zoo model is asked for
    extra = {"norm_layer": group_norm} if norm == "group" else {}
    return gluoncv.model_zoo.get_model(name, classes=classes, pretrained=False, **extra)


def _zoo_builder(name):
    return lambda classes, norm="batch": _zoo(name, classes, norm)


def _inceptionv3(classes, norm="batch"):
    net = _zoo("inceptionv3", classes, norm)
    keys = list(block_children(net.features))
    pool_key = keys[-2]  # features end with AvgPool2D(8), Dropout(0.5)
    if not isinstance(block_children(net.features)[pool_key], nn.AvgPool2D):
        raise RuntimeError("unexpected GluonCV inceptionv3 layout: %r" % (net.features,))
    net.features.register_child(nn.GlobalAvgPool2D(), pool_key)
    return net


# name -> (builder(classes), default input size, smallest accepted input size)
_SPECS = {
    # 28 -> conv5 24 -> pool 12 -> conv5 8 -> pool 4; below 16 a pool gets 1 x 1.
    "smallcnn": _Spec(_smallcnn, 28, 16, False),
    # conv11/4 + three 3x3/2 max pools without padding need 63 pixels.
    "alexnet": _Spec(_zoo_builder("alexnet"), 64, 63, False),
    "resnet18_v1": _Spec(_zoo_builder("resnet18_v1"), 32, 1, True),
    "resnet50_v1": _Spec(_zoo_builder("resnet50_v1"), 32, 1, True),
    "resnet50_v2": _Spec(_zoo_builder("resnet50_v2"), 32, 1, True),
    "mobilenet1.0": _Spec(_zoo_builder("mobilenet1.0"), 32, 1, True),
    # With the global pool; the original fixed 8x8 pool needs 299.
    "inceptionv3": _Spec(_inceptionv3, 75, 75, True),
    "linear": _Spec(_linear, 28, 1, False),
}


def _spec(name):
    try:
        return _SPECS[name]
    except (KeyError, TypeError):
        raise ConfigError("unknown model %r; known models: %s"
                          % (name, ", ".join(MODEL_NAMES))) from None


def default_input_size(name):
    """Side in pixels of the square input ``name`` uses by default.

    Raises:
        ConfigError: for an unknown model name.
    """
    return _spec(name).default_size


def min_input_size(name):
    """Smallest input side in pixels that ``name`` accepts.

    Raises:
        ConfigError: for an unknown model name.
    """
    return _spec(name).min_size


def check_norm(name, norm):
    """Raise ConfigError unless ``norm`` is one of :data:`NORMS` and fits model ``name``."""
    spec = _spec(name)
    if norm not in NORMS:
        raise ConfigError("unknown norm %r; known: %s" % (norm, ", ".join(NORMS)))
    if norm != "batch" and not spec.has_batchnorm:
        raise ConfigError("%s has no BatchNorm layers for --norm %s to replace" % (name, norm))


def get_model(name, classes=10, input_size=None, norm="batch"):
    """An uninitialized HybridBlock mapping (b, 1, S, S) to (b, classes) logits.

    ``input_size`` (S) is only checked here; the network infers its shapes on
    the first forward pass. With ``norm="batch"`` BatchNorm layers are kept:
    their running statistics are parameters with ``grad_req='null'``. With
    ``norm="group"`` every BatchNorm layer of a zoo network is a GroupNorm
    layer (:func:`group_norm`): no batch statistics, so a device's local
    batches (on non-i.i.d. data, of a few labels) do not shape what the
    global model computes.

    Raises:
        ConfigError: for an unknown name, a bad ``classes``, an
            ``input_size`` below :func:`min_input_size`, or a ``norm``
            :func:`check_norm` refuses.
    """
    spec = _spec(name)
    check_norm(name, norm)
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 1:
        raise ConfigError("classes must be a positive integer, got %r" % (classes,))
    if input_size is not None:
        if isinstance(input_size, bool) or not isinstance(input_size, int):
            raise ConfigError("input_size must be an integer, got %r" % (input_size,))
        if input_size < spec.min_size:
            raise ConfigError("%s needs input_size >= %d, got %d"
                              % (name, spec.min_size, input_size))
    net = spec.build(classes, norm=norm) if spec.has_batchnorm else spec.build(classes)
    if input_size is not None:
        for conv, weight_shape in one_pixel_convs(net, input_size):
            # the center tap's slice hides the weight's input channels from Gluon's deferred shape inference
            # (MobileNet's depthwise layers leave them to it): give them now, and drop the symbol variable
            # the search made while the shape lacked them
            conv.weight.shape = weight_shape
            forget_symbol(conv.weight)
            center_tap_forward(conv)
    return net


def one_pixel_convs(net, input_size):
    """The ``Conv2D`` layers of ``net`` that see a 1 x 1 input when it takes (b, 1, S, S) batches with
    S = ``input_size`` and whose kernel there reduces to its center tap: odd kernel, padding of half
    the kernel, stride and dilation 1 (their output is 1 x 1 too): at 32 pixels the zoo ResNets' last
    stage has two or three such 3 x 3 layers and MobileNet one, where oneDNN's weight gradient takes a
    slow path (:func:`~mxhet.gluon_private.center_tap_forward`). Found by symbolic shape inference,
    which needs no initialized parameters. Returns ``[(layer, its weight's inferred shape)]``."""
    import mxnet as mx
    convs = {}
    for block in blocks(net):
        if isinstance(block, nn.Conv2D):
            options = conv_options(block)
            if (options["layout"] == "NCHW" and tuple(options["stride"]) == (1, 1)
                    and tuple(options["dilate"]) == (1, 1)
                    and all(k % 2 == 1 and p == k // 2 for k, p in zip(options["kernel"], options["pad"]))
                    and tuple(options["kernel"]) != (1, 1)):
                convs[block.name + "_fwd_output"] = block
    if not convs:
        return []
    internals = net(mx.sym.var("data")).get_internals()
    arg_shapes, shapes, _ = internals.infer_shape_partial(data=(1, 1, input_size, input_size))
    shape_of = dict(zip(internals.list_outputs(), shapes))
    arg_shape_of = dict(zip(internals.list_arguments(), arg_shapes))
    return [(conv, tuple(arg_shape_of[conv.weight.name])) for name, conv in convs.items()
            if tuple(shape_of.get(name) or ())[2:] == (1, 1)]
