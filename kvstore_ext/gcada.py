"""G-CADA's server side: per-group last gradients and the AMSGrad step.

Runs inside the PS-LITE servers (``dist_async``: every push is applied on
arrival), shipped with ``kv.set_optimizer`` like the other rules. Three kinds of
pushes reach it (key layout in :mod:`kvstore_ext.keys`):

* group g's gradient of parameter i, at ``group_grad_key(i, g)``: stored there
  (the group's *last* gradient, the stale one of later iterations), and g is
  marked fresh for i;
* the step trigger, at parameter key i itself, once per iteration (under
  ``mxhet-launch --elastic`` the pushed value is k+1, k the iteration, and a
  parameter already stepped for k is not stepped again: a trigger that died
  mid-step stepped some parameters and not others, and the worker told to
  trigger again pushes to all; 0, as outside ``--elastic`` and in the
  simulator, always steps): the server takes ∇̂ = Σ_g (last gradient of g), the fresh
  uploads and the stale ones alike, and applies AMSGrad exactly as the paper's
  eqs. (8a-c) write it -- no bias correction, v starts from v̂::

      h ← β1·h + (1 − β1)·∇̂
      v ← β2·v̂ + (1 − β2)·∇̂²
      v̂ ← max(v̂, v)
      θ ← θ − α·h / sqrt(ε + v̂)

  then computes parameter i's share of the norms the selection rule needs:
  ‖θ^{k+1} − θ^k‖² and, per group, ‖θ^{k+1} − θ^{(g)}‖², θ^{(g)} the model
  group g's last gradient was computed on (θ^k for the fresh groups);
* a push to ``group_norm_key(i)``: the server writes those norms there, for the
  worker that triggered the step to pull and sum over the parameters.

A gradient arrives as the sum over a mini-batch; ``rescale`` (1/batch size)
makes it the mini-batch mean before it is stored for the sum.
"""
import mxnet as mx

from . import keys
from .updaters import ServerUpdater


@mx.optimizer.register
class GroupAMSGrad(ServerUpdater):
    """AMSGrad over per-group last gradients (G-CADA, CADA, distributed AMSGrad).

    Args:
        num_workers: number of workers.
        groups: G, number of groups (M for CADA).
        num_servers: number of server processes (must divide the key layout's stride).
        alpha, beta1, beta2, epsilon: AMSGrad's α > 0, β1 and β2 in [0, 1), ε > 0.
        rescale: factor turning a pushed gradient into the one summed (> 0).
        once_per_iteration: read the iteration (k+1) from the trigger's value and
            step a parameter once per iteration (``mxhet-launch --elastic``).

    Raises:
        ValueError: naming a bad argument.
    """

    def __init__(self, num_workers, groups, num_servers=1, alpha=0.01, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, rescale=1.0, once_per_iteration=False, **kwargs):
        super().__init__(num_workers, **kwargs)
        self.layout = keys.group_key_layout(groups, num_servers)
        for name, value in (("alpha", alpha), ("epsilon", epsilon), ("rescale", rescale)):
            if not value > 0:
                raise ValueError("%s must be > 0, got %r" % (name, value))
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= value < 1:
                raise ValueError("%s must be in [0, 1), got %r" % (name, value))
        self.groups = groups
        self.alpha, self.beta1, self.beta2 = float(alpha), float(beta1), float(beta2)
        self.epsilon, self.rescale = float(epsilon), float(rescale)
        self._last = {}    # (param, group) -> the group's last gradient, rescaled
        self._fresh = {}   # param -> groups that uploaded since its last step
        self._model = {}   # (param, group) -> θ the group's last gradient was computed on
        self._norms = {}   # param -> NDArray [‖Δθ‖², ‖θ − θ^(g)‖² per group] of its last step
        self.steps = {}    # param -> steps applied
        self.once_per_iteration = bool(once_per_iteration)
        self.stepped_for = {}   # param -> k+1 of the latest iteration its step was applied for (--elastic)

    def create_param_state(self, index, weight):
        return (mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),   # h
                mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype))   # v̂

    def update(self, index, weight, grad, state):
        where = keys.split_group_key(index, self.layout)
        if where is None:
            super().update(index, weight, grad, state)
            return
        slot, param = where
        if slot == 0:
            norms = self._norms.get(param)
            weight[:] = norms if norms is not None else 0
        else:
            self._last[(param, slot - 1)] = grad * self.rescale
            self._fresh.setdefault(param, set()).add(slot - 1)
            weight[:] = grad

    def apply(self, index, weight, grad, state):
        mark = int(round(float(grad.reshape((-1,))[0:1].asscalar()))) if self.once_per_iteration else 0
        if mark > 0:
            if mark <= self.stepped_for.get(index, 0):
                return   # a second trigger of an iteration this parameter was stepped for: nothing applied twice
            self.stepped_for[index] = mark
        h, v_hat = state
        for group in self._fresh.pop(index, ()):
            self._model[(index, group)] = weight.copy()
        total = None
        for group in range(self.groups):
            last = self._last.get((index, group))
            if last is not None:
                total = last.copy() if total is None else total + last
        if total is None:
            total = mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype)
        before = weight.copy()
        h[:] = self.beta1 * h + (1.0 - self.beta1) * total
        v = self.beta2 * v_hat + (1.0 - self.beta2) * mx.nd.square(total)
        v_hat[:] = mx.nd.maximum(v_hat, v)
        weight[:] = weight - self.alpha * h / mx.nd.sqrt(self.epsilon + v_hat)
        norms = [mx.nd.sum(mx.nd.square(weight - before))]
        for group in range(self.groups):
            model = self._model.get((index, group))
            norms.append(mx.nd.sum(mx.nd.square(weight - model)) if model is not None
                         else mx.nd.zeros((1,), weight.context, dtype=weight.dtype))
        self._norms[index] = mx.nd.concat(*[n.reshape((1,)) for n in norms], dim=0)
        self.steps[index] = self.steps.get(index, 0) + 1

