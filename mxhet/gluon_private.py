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

