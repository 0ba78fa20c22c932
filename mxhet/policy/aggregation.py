"""How ESync combines the devices' model deltas: pure functions over plain numbers.

Algorithm 1 averages the deltas, ``w += ε·mean(Δ_i)``. Two devices of very
different speeds then pull the model apart: a slow device's one-iteration
delta halves each round's step, and a fast device's many steps on its own
labels (non-i.i.d. data) count as one vote. The options here fix the weights
(``aggregation``) and what the servers do with the combined delta
(``outer_optimizer``).

``aggregation`` (the weights ``c_i`` of ``Σ c_i·Δ_i``):

* ``mean``: ``c_i = 1/n`` (Algorithm 1).
* ``normalized`` (FedNova, Wang et al. 2020): each delta divided by its
  device's effective local step count ``a_i``, re-scaled by the mean count
  ``τ_eff = mean(a_j)``: ``c_i = τ_eff / (n·a_i)``. Every device's *per-step*
  direction counts equally and the step stays ``τ_eff`` steps long. With
  momentum ``ρ`` in the local SGD, ``a_i`` is FedNova's momentum-adjusted
  count ``(τ - ρ(1-ρ^τ)/(1-ρ)) / (1-ρ)``.
* ``weighted``: by samples processed in the round, ``c_i = s_i / Σ s_j``.

Devices that completed no iteration in the round (possible with delayed ACKs)
push a zero delta; ``normalized`` then averages over the ``m`` devices that
did work (``n`` above becomes ``m``).

Every device knows only its own count; the sums travel through a control key
of the parameter servers (:data:`kvstore_ext.keys.ESYNC_COUNT_KEY`) right
before the deltas: a device pushes :func:`count_vector`, pulls the sums, and
scales its own delta by ``n·c_i`` (:func:`push_scale`), so that the servers'
``ε·Σ/n`` gives ``ε·Σ c_i·Δ_i``. Keys without a gradient (BatchNorm running
statistics) are always plain means: they are statistics, not steps.

``outer_optimizer`` (DiLoCo, Douillard et al. 2023):

* ``none``: ``w += ε·Σ c_i·Δ_i``.
* ``nesterov``: ``g = -ε·Σ c_i·Δ_i`` is a pseudo-gradient;
  ``m = μ·m + g``, ``w -= lr·(g + μ·m)`` (PyTorch's Nesterov SGD), with ``m``
  kept on the servers (:class:`kvstore_ext.updaters.ESyncAggregate`).
"""
from ..errors import ConfigError

AGGREGATIONS = ("mean", "normalized", "weighted")
OUTER_OPTIMIZERS = ("none", "nesterov")
COUNT_FIELDS = 3
"""A device's count vector: effective steps ``a_i``, samples ``s_i``, and 1 if it did any work."""


def check_options(opts):
    """Validate the aggregation options of a resolved ESync option dict
    (``aggregation``, ``outer_optimizer``, ``outer_lr``, ``outer_momentum``),
    by ESync's spec.

    Raises:
        ConfigError: naming the bad value.
    """
    from .specs import ESYNC   # specs.py declares these options with this module's choices
    ESYNC.check({name: opts[name] for name in ("aggregation", "outer_optimizer", "outer_lr", "outer_momentum")})


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def needs_counts(aggregation):
    """True if the devices must exchange their counts before pushing deltas."""
    return aggregation != "mean"


def effective_steps(steps, momentum=0.0):
    """FedNova's ``a_i``: the local step count, momentum-adjusted.

    Args:
        steps: local iterations ``τ`` in the round (>= 0).
        momentum: the local SGD momentum ``ρ`` in [0, 1) (0 for plain SGD).

    Raises:
        ValueError: for a negative count or a momentum outside [0, 1).
    """
    if steps < 0:
        raise ValueError("steps must be >= 0, got %r" % (steps,))
    if not 0 <= momentum < 1:
        raise ValueError("momentum must be in [0, 1), got %r" % (momentum,))
    if momentum == 0:
        return float(steps)
    rho = float(momentum)
    return (steps - rho * (1.0 - rho ** steps) / (1.0 - rho)) / (1.0 - rho)


def count_vector(steps, samples, momentum=0.0):
    """What a device pushes to the count key: ``[a_i, s_i, 1 if it worked]``."""
    return [effective_steps(steps, momentum), float(samples), 1.0 if steps > 0 else 0.0]


def coefficient(aggregation, own, totals, num_workers):
    """``c_i``: the weight of this device's delta in the combined delta.

    Args:
        aggregation: one of :data:`AGGREGATIONS`.
        own: this device's :func:`count_vector`.
        totals: the element-wise sum of every device's count vector.
        num_workers: ``n``.

    Raises:
        ConfigError: for an unknown aggregation.
    """
    a, samples, worked = own
    total_a, total_samples, participants = totals
    if aggregation == "mean":
        return 1.0 / num_workers
    if aggregation == "normalized":
        if not worked or a <= 0 or participants < 1:
            return 0.0
        tau_eff = total_a / participants
        return tau_eff / (participants * a)
    if aggregation == "weighted":
        return samples / total_samples if total_samples > 0 else 0.0
    raise ConfigError("aggregation must be one of %s, got %r" % (AGGREGATIONS, aggregation))


def push_scale(aggregation, own, totals, num_workers):
    """The factor a device applies to its delta before pushing it: ``n·c_i``
    (the servers divide the sum of the pushes by ``n``)."""
    return num_workers * coefficient(aggregation, own, totals, num_workers)


def nesterov_step(weight, momentum_buf, aggregate, lr, momentum):
    """One outer step on plain numbers or numpy arrays (the reference of the
    servers' rule): returns ``(weight, momentum_buf)`` after it.

    ``aggregate`` is ``ε·Σ c_i·Δ_i``; the pseudo-gradient is its negative.
    """
    g = -aggregate
    momentum_buf = momentum * momentum_buf + g
    return weight - lr * (g + momentum * momentum_buf), momentum_buf


def recover_momentum(momentum_buf, update, lr, momentum):
    """The servers' new momentum from the update they applied.

    Every worker sees ``update = w_new - w_old`` when it pulls; with
    ``update = -lr·((1+μ)·g + μ²·m)`` the pseudo-gradient ``g`` follows, and
    ``m_new = μ·m + g`` simplifies to ``(μ·m - update/lr) / (1+μ)``: two
    scaled arrays summed, which :class:`mxhet.modes.esync_outer.OuterMomentumMirror`
    computes in place. Rounding errors shrink by ``μ/(1+μ)`` a round, so a
    worker's copy stays within float32 rounding of the servers' (used for
    checkpoints).
    """
    return (momentum * momentum_buf - update / lr) / (1.0 + momentum)
