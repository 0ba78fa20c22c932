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


def split_into(flat, offsets, outs):
    """Copy consecutive pieces of the 1-D ``flat`` into ``outs`` in one operator:
    piece i starts at ``offsets[i]`` and fills ``outs[i]`` (any shape, default layout).
    ``mx.nd.split_v2``'s public wrapper takes no ``out``."""
    import mxnet as mx
    mx.nd._internal._split_v2(flat, indices=tuple(offsets), axis=0, squeeze_axis=False, sections=0,
                              out=[o.reshape((-1,)) for o in outs])
