"""Several contexts per worker: split a batch across them by their speed.

``gluon.utils.split_and_load`` gives every context an equal share; with a CPU
beside a GPU (or two unequal GPUs) the worker's step then waits for the
slowest. :func:`measure_speeds` times one forward and backward pass on each
context alone, and :func:`split_by_speed` sizes each context's part of a batch
in proportion to those speeds (:func:`mxhet.policy.batch_split.split_sizes`),
so the contexts finish together::

    speeds = mxhet.measure_speeds(net, loss_fn, data, label, ctx)   # once, before training
    for data, label in train_data:
        xs = mxhet.split_by_speed(data, ctx, speeds)
        ys = mxhet.split_by_speed(label, ctx, speeds)
        ...   # forward and backward per part, then trainer.step(data.shape[0]) as usual

The Trainer sums the parts' gradients (each part's loss summed over its
samples, as with ``split_and_load``), so the split changes the time, not the
update.
"""
import time

from .policy.batch_split import split_sizes


def split_by_speed(data, contexts, speeds, batch_axis=0):
    """``data`` cut along ``batch_axis`` into one part per context, sized in
    proportion to ``speeds`` (samples/s, one per context), each part loaded on
    its context (``split_and_load`` with unequal parts).

    Raises:
        ValueError: ``speeds`` and ``contexts`` differ in length, or a bad
            speed or batch (see :func:`~mxhet.policy.batch_split.split_sizes`).
    """
    contexts, speeds = list(contexts), list(speeds)
    if len(speeds) != len(contexts):
        raise ValueError("one speed per context: %d contexts, %d speeds" % (len(contexts), len(speeds)))
    sizes = split_sizes(data.shape[batch_axis], speeds)
    parts, start = [], 0
    for ctx, size in zip(contexts, sizes):
        parts.append(data.slice_axis(batch_axis, start, start + size).as_in_context(ctx))
        start += size
    return parts


def measure_speeds(net, loss_fn, data, label, contexts, repeats=3):
    """Samples per second of one forward and backward pass of ``net`` on each
    context alone, on the batch ``data``/``label`` (the best of ``repeats``
    timed passes after one warm-up).

    Run before training: the passes run with ``train_mode=False`` (BatchNorm
    statistics and dropout untouched), and the gradients they leave are zeroed.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    import mxnet as mx
    from mxnet import autograd
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError("repeats must be an integer >= 1, got %r" % (repeats,))
    speeds = []
    for ctx in contexts:
        x, y = data.as_in_context(ctx), label.as_in_context(ctx)
        best = None
        for i in range(repeats + 1):
            mx.nd.waitall()
            t0 = time.perf_counter()
            with autograd.record(train_mode=False):
                loss = loss_fn(net(x), y)
            loss.backward()
            mx.nd.waitall()
            if i:   # the first pass is a warm-up (memory, operator selection)
                spent = time.perf_counter() - t0
                best = spent if best is None else min(best, spent)
        speeds.append(data.shape[0] / max(best, 1e-9))
    for p in net.collect_params().values():
        if p.grad_req != "null":
            p.zero_grad()
    return speeds


__all__ = ["measure_speeds", "split_by_speed"]
