"""The one place mxhet reaches into MXNet/Gluon private attributes.

Gluon offers no public API for these; keeping every use here means an MXNet
upgrade that renames one breaks this module alone.
"""


def trainer_params(trainer):
    """A ``gluon.Trainer``'s parameters, in its (key) order."""
    return trainer._params


def trainer_optimizer(trainer):
    """A ``gluon.Trainer``'s optimizer object."""
    return trainer._optimizer


def clear_optimizer_state(trainer):
    """Drop a ``gluon.Trainer``'s local optimizer state (momentum, moments)."""
    for updater in trainer._updaters:
        updater.states.clear()
        updater.states_synced.clear()


def has_fresh_grad(array):
    """True if backward wrote ``array``'s gradient since the last step."""
    return bool(array._fresh_grad)


def mark_grad_used(array):
    """Mark ``array``'s gradient as consumed (what ``Trainer.step`` does)."""
    array._fresh_grad = False


def kvstore_barrier(kv):
    """Wait until every worker of a dist kvstore reaches the barrier."""
    kv._barrier()


def block_option(block, name, default=None):
    """A layer's constructor option as the block keeps it (e.g. BatchNorm's momentum)."""
    return block._kwargs.get(name, default)


def block_children(block):
    """A block's child blocks, name -> block, in order."""
    return block._children


def blocks(block):
    """``block`` and every block under it, depth first, in order."""
    yield block
    for child in block._children.values():
        yield from blocks(child)


def conv_options(block):
    """A Gluon convolution layer's operator arguments (kernel, stride, dilate, pad, num_group, layout, ...)."""
    return dict(block._kwargs)


def forget_symbol(param):
    """Drop a Gluon parameter's cached symbol variable, which keeps the shape the parameter had when a
    symbolic pass first made it (a hybridized network builds its graph from these variables)."""
    param._var = None


def center_tap_forward(conv):
    """Make ``conv`` (a ``Conv2D`` with an odd kernel, "same" padding, stride 1, no dilation, seeing 1 x 1
    inputs) compute as a 1 x 1 convolution with its kernel's center taps: on a one-pixel input every
    other tap meets only the zero padding, so the output and every gradient are the same up to
    floating-point rounding (the other taps' gradients are exactly zero either way), while oneDNN's
    1 x 1 kernels avoid the slow gemm path its 3 x 3 weight gradient takes there. The weight keeps
    its shape and name (checkpoints, kvstore keys and optimizers see no change)."""
    kwargs = dict(conv._kwargs)
    (ph, pw) = kwargs["pad"]
    kwargs.update(kernel=(1, 1), pad=(0, 0))
    op_name, act = conv._op_name, conv.act

    def hybrid_forward(F, x, weight, bias=None):
        center = F.slice(weight, begin=(None, None, ph, pw), end=(None, None, ph + 1, pw + 1))
        args = (x, center) if bias is None else (x, center, bias)
        out = getattr(F, op_name)(*args, name="fwd", **kwargs)
        return act(out) if act is not None else out

    conv.hybrid_forward = hybrid_forward
