"""Server-side update rules of mxhet.

Each rule is an ``mx.optimizer.Optimizer`` subclass registered with MXNet, so a
worker ships it with ``kv.set_optimizer(rule)`` and every server unpickles it by
its module path (``kvstore_ext.updaters.<Class>``): this package must be
importable on every server process, which :mod:`kvstore_ext.server` ensures.

In ``dist_sync`` a server calls the rule once per key and round with the *sum*
of all workers' pushes; in ``dist_async`` once per push.
"""
import logging

import mxnet as mx

from . import keys


class ServerUpdater(mx.optimizer.Optimizer):
    """Base of mxhet's server-side rules.

    Handles the reserved keys (control values and the updater probe) and hands
    parameter keys to :meth:`apply`.

    Args:
        num_workers: number of workers pushing to the servers (positive int).
    """

    def __init__(self, num_workers, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("num_workers must be a positive integer, got %r" % (num_workers,))
        self.num_workers = num_workers

    def create_state(self, index, weight):
        if keys.is_param_key(index):
            return self.create_param_state(index, weight)
        return None

    def create_param_state(self, index, weight):  # pylint: disable=unused-argument
        return None

    def update(self, index, weight, grad, state):
        if keys.is_probe_key(index):
            weight[:] = grad + keys.PROBE_STAMP
        elif keys.is_control_key(index):
            weight[:] = grad
        else:
            self.apply(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self.update(index, weight, grad, state)

    def apply(self, index, weight, grad, state):
        """Update parameter ``weight`` in place from the merged push ``grad``."""
        raise TypeError("%s does not define apply()" % type(self).__name__)


@mx.optimizer.register
class ESyncAverage(ServerUpdater):
    """ESync's aggregation (Algorithm 1, lines 19-20).

    Workers push their model deltas ``Δ_i = w_local - w_global``; the server
    receives their sum and applies ``w_global += epsilon * sum(Δ_i) / p``.

    Args:
        num_workers: p, the number of workers.
        epsilon: global learning rate ε (> 0; the paper uses 1).
    """

    def __init__(self, num_workers, epsilon=1.0, **kwargs):
        super().__init__(num_workers, **kwargs)
        if not epsilon > 0:
            raise ValueError("epsilon (global learning rate) must be > 0, got %r" % (epsilon,))
        self.epsilon = float(epsilon)

    def apply(self, index, weight, grad, state):
        weight[:] += grad * (self.epsilon / self.num_workers)

    @property
    def elementwise(self):
        """True when every element of every parameter key gets the same
        arithmetic and no per-key state, so a worker may exchange many
        parameters as one flat bucket key (:mod:`mxhet.dataplane.channel`). A
        subclass that overrides the rule is per-key unless it says otherwise."""
        cls = type(self)
        return (cls.apply is ESyncAverage.apply and cls.update is ServerUpdater.update
                and cls.create_param_state is ServerUpdater.create_param_state)


@mx.optimizer.register
class ServerOptimizer(ServerUpdater):
    """Any MXNet optimizer applied on the servers, for gradient-pushing modes.

    The wrapped optimizer's ``rescale_grad`` turns the received value into the
    gradient to apply: ``1 / (batch_size * num_workers)`` for ``sync`` (the
    servers receive the sum over workers), ``1 / batch_size`` for ``async``.

    Args:
        num_workers: number of workers.
        optimizer: an ``mx.optimizer.Optimizer`` (pickled with this one).
    """

    def __init__(self, num_workers, optimizer, **kwargs):
        super().__init__(num_workers, **kwargs)
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise ValueError("optimizer must be an mx.optimizer.Optimizer, got %r" % (optimizer,))
        self.inner = optimizer

    def create_param_state(self, index, weight):
        return self.inner.create_state_multi_precision(index, weight)

    def apply(self, index, weight, grad, state):
        self.inner.update_multi_precision(index, weight, grad, state)


@mx.optimizer.register
class DelayCompensatedSGD(mx.optimizer.DCASGD):
    """MXNet's ``DCASGD`` rule (Zheng et al. 2017), run by mode ``dcasgd``'s servers:
    ``m = μ·m - lr·(g + wd·w + λ·g⊙g⊙(w - w_prev))``, ``w_prev = w``, ``w += m``.

    Two differences from MXNet 1.9.1's class, none in the arithmetic: it runs
    with momentum (MXNet's tests ``if mom:`` on an array, which raises for any
    parameter of more than one element, so a script's ``'sgd', {'momentum':
    0.9}`` crashed the servers at their first update), and it writes each of
    the rule's eleven element-wise passes into three scratch arrays per
    parameter instead of allocating a new array for each: at async's push rate
    the update is a large part of a DC-ASGD job's CPU time (a short ResNet-18 run at
    117x, start-up included, now takes 0.925 of its CPU time:
    bench/results/sim-speed/dcasgd-scratch.json). The operators and their
    order are MXNet's, so the weights are bit-identical to its class's
    (momentum 0, where it runs).
    The scratch arrays are not pickled: servers and checkpoints get the
    optimizer and its states, ``(m or None, w_prev)``, as before.
    """

    def update(self, index, weight, grad, state):
        self._update_count(index)
        lr = self._get_lr(index)
        wd = self._get_wd(index)
        g, total, comp = self._scratch_for(index, weight)
        nd = mx.nd
        nd._internal._mul_scalar(grad, scalar=float(self.rescale_grad), out=g)
        if self.clip_gradient is not None:
            nd.clip(g, -self.clip_gradient, self.clip_gradient, out=g)
        mom, previous_weight = state
        nd._internal._mul_scalar(weight, scalar=float(wd), out=total)
        nd.broadcast_add(g, total, out=total)                            # g + wd·w
        nd._internal._mul_scalar(g, scalar=float(self.lamda), out=comp)
        nd.broadcast_mul(comp, g, out=comp)                               # λ·g⊙g
        nd.broadcast_sub(weight, previous_weight, out=g)                  # (g is no longer needed)
        nd.broadcast_mul(comp, g, out=comp)
        nd.broadcast_add(total, comp, out=total)
        nd._internal._mul_scalar(total, scalar=float(-lr), out=total)
        step = total
        if mom is not None:
            nd._internal._mul_scalar(mom, scalar=float(self.momentum), out=mom)
            nd.broadcast_add(mom, total, out=mom)
            step = mom
        previous_weight[:] = weight
        nd.broadcast_add(weight, step, out=weight)

    def _scratch_for(self, index, weight):
        scratch = self.__dict__.setdefault("_scratch", {})
        arrays = scratch.get(index)
        if arrays is None or arrays[0].shape != weight.shape or arrays[0].context != weight.context:
            arrays = [mx.nd.empty(weight.shape, weight.context, dtype=weight.dtype) for _ in range(3)]
            scratch[index] = arrays
        return arrays

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_scratch", None)
        return state


@mx.optimizer.register
class PartialReduceSum(ServerUpdater):
    """Partial Reduce's rendezvous buffers (mode ``preduce``, on ``dist_async``).

    A group's m = P members each push β_j·x_j to the keys of the group's slot;
    the first push of a round overwrites what the slot held, the next m − 1 are
    added, so after the m-th the slot holds Σ β_j·x_j for the members to pull.
    The parameter keys work the same way with all N workers (each pushes x_i/N
    once at the end: the average of all models, Algorithm 2's output). The
    controller reuses a slot only after every member pulled, and the members
    pull only after all m pushed (the State Server's barrier), so a round's
    first push always finds the previous round fully read.

    Args:
        num_workers: N.
        group_size: P, the pushes per round on a slot key.
    """

    def __init__(self, num_workers, group_size, **kwargs):
        super().__init__(num_workers, **kwargs)
        if isinstance(group_size, bool) or not isinstance(group_size, int) or not 2 <= group_size <= num_workers:
            raise ValueError("group_size must be an integer in [2, %d], got %r" % (num_workers, group_size))
        self.group_size = group_size
        self.arrivals = {}   # key -> pushes received in its current round

    def update(self, index, weight, grad, state):
        if keys.is_preduce_key(index):
            expected = self.group_size
        elif keys.is_param_key(index):
            expected = self.num_workers
        else:
            return super().update(index, weight, grad, state)
        count = self.arrivals.get(index, 0)
        if count == 0:
            weight[:] = grad
        else:
            weight[:] += grad
        count += 1
        self.arrivals[index] = 0 if count == expected else count
        return None


@mx.optimizer.register
class ESyncAggregate(ESyncAverage):
    """ESync's aggregation with an outer optimizer (``--outer-optimizer``).

    The servers receive the sum of the (already weighted, see
    :mod:`mxhet.policy.aggregation`) deltas; ``a = ε·sum/p`` is the combined
    delta. ``outer="none"``: ``w += a``. ``outer="nesterov"`` (DiLoCo): the
    pseudo-gradient ``g = -a`` drives Nesterov momentum kept here, one buffer
    per key: ``m = μ·m + g``, ``w -= lr·(g + μ·m)``. Keys in ``plain_keys``
    (BatchNorm running statistics) always take the plain mean ``w += sum/p``,
    without ε: ε is a step size of the optimisation, and statistics moved ε > 1
    times their mean change can leave the model with a negative running
    variance.

    Args:
        num_workers: p.
        epsilon: ε (> 0).
        outer: ``"none"`` or ``"nesterov"``.
        outer_lr: the outer learning rate (> 0).
        outer_momentum: μ in [0, 1).
        plain_keys: keys updated by the plain mean.
        initial_momentum: key -> numpy array, the buffers to start from
            (resuming a checkpoint); other keys start at zero.

    Raises:
        ValueError: naming the bad argument.
    """

    def __init__(self, num_workers, epsilon=1.0, outer="none", outer_lr=1.0, outer_momentum=0.0,
                 plain_keys=(), initial_momentum=None, **kwargs):
        super().__init__(num_workers, epsilon=epsilon, **kwargs)
        if outer not in ("none", "nesterov"):
            raise ValueError("outer must be 'none' or 'nesterov', got %r" % (outer,))
        if not outer_lr > 0:
            raise ValueError("outer_lr must be > 0, got %r" % (outer_lr,))
        if not 0 <= outer_momentum < 1:
            raise ValueError("outer_momentum must be in [0, 1), got %r" % (outer_momentum,))
        self.outer = outer
        self.outer_lr = float(outer_lr)
        self.outer_momentum = float(outer_momentum)
        self.plain_keys = frozenset(int(k) for k in plain_keys)
        # MXNet ships the updater as a protocol-0 pickle in a UTF-8 string: arrays travel as base64 text.
        self.initial_momentum = {int(k): _to_text(v) for k, v in (initial_momentum or {}).items()}
        self.server_rank, self.num_servers = 0, 1

    def bind_server(self, rank, num_servers):
        """Tell the updater which server runs it (:mod:`kvstore_ext.server` calls this after
        unpickling): with several servers it holds only its part of a large array.

        Raises:
            ValueError: unless ``0 <= rank < num_servers``.
        """
        if not (isinstance(num_servers, int) and isinstance(rank, int) and 0 <= rank < num_servers):
            raise ValueError("need 0 <= rank < num_servers, got rank %r of %r" % (rank, num_servers))
        self.server_rank, self.num_servers = rank, num_servers

    def create_param_state(self, index, weight):
        if self.outer == "none" or index in self.plain_keys:
            return None
        start = self.initial_momentum.get(index)
        if start is not None:
            start = _from_text(start)
        if start is None:
            return mx.nd.zeros(weight.shape, ctx=weight.context, dtype=weight.dtype)
        start = start.reshape(-1)
        if start.size != weight.size:
            # MXNet splits a large array across the servers (MXNET_KVSTORE_BIGARRAY_BOUND): this one
            # holds its part, flat, so the saved buffer is cut the same way.
            lo, hi = server_part(start.size, self.num_servers, self.server_rank)
            if hi - lo != weight.size:
                # MXNet's callback swallows the error: log it where the server's log shows it.
                message = ("the saved outer momentum of key %d has %d elements; server %d of %d holds %d, not "
                           "its part %d:%d (a checkpoint of another model?)" % (
                               index, start.size, self.server_rank, self.num_servers, weight.size, lo, hi))
                logging.getLogger("kvstore_ext.updaters").critical(message)
                raise ValueError(message)
            start = start[lo:hi]
        return mx.nd.array(start.reshape(weight.shape), ctx=weight.context, dtype=weight.dtype)

    @property
    def elementwise(self):
        """Flat buckets only without an outer optimizer: its momentum is one
        buffer per parameter key (checkpointed by key). The plain keys' own
        rule (ε ≠ 1) does not forbid them: this rule runs only on the
        simulator's servers, key by key (their buckets are the wire's cost,
        as the cluster's, whose members scale their own pushes for
        :class:`MemberSum` to add)."""
        return self.outer == "none"

    def apply(self, index, weight, grad, state):
        if index in self.plain_keys:
            weight[:] += grad * (1.0 / self.num_workers)
            return
        if state is None:
            weight[:] += grad * (self.epsilon / self.num_workers)
            return
        agg = grad * (self.epsilon / self.num_workers)
        mu = self.outer_momentum
        state[:] = mu * state - agg
        weight[:] += self.outer_lr * (agg - mu * state)


def server_part(num_elements, num_servers, rank):
    """``(start, stop)``: the elements of a flat array that server ``rank`` holds when MXNet's
    ``dist`` kvstore splits it over ``num_servers`` servers (``KVStoreDist::EncodeDefaultKey``: part
    ``i`` ends at ``round(n / S * (i + 1))``, C's round, halves away from zero)."""
    import math

    def bound(i):
        return int(math.floor(float(num_elements) / num_servers * i + 0.5))
    return bound(rank), bound(rank + 1)


def _to_text(array):
    """``(shape, dtype, base64)`` of a numpy array: ASCII, so it survives MXNet's command channel."""
    import base64

    import numpy as np
    a = np.ascontiguousarray(np.asarray(array))
    return (tuple(int(x) for x in a.shape), a.dtype.str, base64.b64encode(a.tobytes()).decode("ascii"))


def _from_text(text):
    import base64

    import numpy as np
    shape, dtype, data = text
    return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape)


@mx.optimizer.register
class DelayedNesterov(ServerUpdater):
    """Asynchronous local SGD's outer optimizer (mode ``dylu``, on
    ``dist_async``): Delayed Nesterov (Liu et al. 2024, arXiv 2401.09135).

    Each push is one worker's delta ``Δ = replica - the global model it
    started from``; ``g = -Δ`` is its pseudo-gradient. Per key, on every push:
    ``w -= (lr / N)·g`` and ``g`` is added to a buffer ``b``; on every N-th push
    of the key, the momentum takes the buffer's mean and its term is applied:
    ``m = μ·m + b / N``, ``w -= lr·μ·m``, ``b = 0``. Over N pushes this is one
    Nesterov step ``m = μ·m + ḡ; w -= lr·(ḡ + μ·m)`` on their mean ḡ, while
    each pseudo-gradient still reaches the model when it arrives (N = 1:
    Nesterov on every push). Keys in ``plain_keys`` (BatchNorm statistics)
    take ``w += Δ / num_workers`` and no momentum.

    Args:
        num_workers: number of workers.
        outer_lr: lr (> 0).
        outer_momentum: μ in [0, 1).
        period: N, pushes per momentum update (positive integer).
        plain_keys: keys updated by the plain rule.

    Raises:
        ValueError: naming the bad argument.
    """

    def __init__(self, num_workers, outer_lr=0.7, outer_momentum=0.9, period=1, plain_keys=(), **kwargs):
        super().__init__(num_workers, **kwargs)
        if not outer_lr > 0:
            raise ValueError("outer_lr must be > 0, got %r" % (outer_lr,))
        if not 0 <= outer_momentum < 1:
            raise ValueError("outer_momentum must be in [0, 1), got %r" % (outer_momentum,))
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise ValueError("period (N) must be a positive integer, got %r" % (period,))
        self.outer_lr = float(outer_lr)
        self.outer_momentum = float(outer_momentum)
        self.period = period
        self.plain_keys = frozenset(int(k) for k in plain_keys)
        self.arrivals = {}   # key -> pushes since its last momentum update

    def create_param_state(self, index, weight):
        if index in self.plain_keys:
            return None
        # (momentum m, buffer b of the pseudo-gradients since the last momentum update)
        return (mx.nd.zeros(weight.shape, ctx=weight.context, dtype=weight.dtype),
                mx.nd.zeros(weight.shape, ctx=weight.context, dtype=weight.dtype))

    def apply(self, index, weight, grad, state):
        if index in self.plain_keys or state is None:
            weight[:] += grad * (1.0 / self.num_workers)
            return
        momentum, buffered = state
        # grad is the delta Δ = -g: subtracting it accumulates the pseudo-gradient.
        buffered[:] -= grad
        weight[:] += grad * (self.outer_lr / self.period)
        count = self.arrivals.get(index, 0) + 1
        if count == self.period:
            momentum[:] = self.outer_momentum * momentum + buffered * (1.0 / self.period)
            weight[:] -= (self.outer_lr * self.outer_momentum) * momentum
            buffered[:] = 0
            count = 0
        self.arrivals[index] = count


class MemberSum(ServerUpdater):
    """The aggregation of synchronous rounds on ``dist_async`` (the round
    rendezvous, :mod:`mxhet.control.membership`): each push is added to the
    global model on arrival, ``w += pushed``. Each of a round's m members
    pushes its delta already scaled by ε/m (m named by the State Server), so
    once all m are in, ``w`` moved by ε times the members' mean delta -- the
    servers never need to know how many pushes make a round, and a round
    whose member died goes on with the pushes that arrived.

    The sum is kept in float64 (the state) and the model is its float32
    rounding: ``w += pushed`` in float32 would make the model depend on which
    member's push arrived first (``(w + a) + b != (w + b) + a``), and training
    amplifies that last-bit difference, so no two runs of a job would end on
    the same model. Float32 pushes add exactly in float64 unless their
    exponents differ by more than 29 bits, so the order no longer matters.

    The late memory of ESync (``--late-memory``, :func:`kvstore_ext.keys.memory_keys`)
    keeps the last push instead: each is a device's whole latest delta.

    Args:
        num_workers: the job's workers at launch (informative only).
    """

    def create_param_state(self, index, weight):
        return weight.astype("float64")

    def apply(self, index, weight, grad, state):
        if keys.is_preduce_key(index):   # a memory key (the only keys of this range a member round has)
            weight[:] = grad
            return
        state[:] += grad.astype("float64")
        weight[:] = state.astype(weight.dtype)

    @property
    def elementwise(self):
        """Every element gets the same addition: flat buckets are fine."""
        return True
