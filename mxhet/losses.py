"""Training losses, and the smoothness constant of the quadratic one.

``softmax`` is the softmax cross-entropy every model trains with by default.
``l2`` is the G-CADA paper's quadratic error loss (its §VI trains a linear
regression model under it): per sample
``ℓ(θ; x, y) = ½ · mean_j (f_j(x) − e_y[j])²`` over the ``K`` outputs, with
``e_y`` the one-hot vector of the label (MXNet's ``gluon.loss.L2Loss`` on a
one-hot target). With the ``linear`` model (``f(x) = W x + b``) the loss of a
shard is quadratic in θ = (W, b), so its smoothness constant is known exactly:
:func:`quadratic_smoothness`.
"""
import numpy as np
from mxnet import gluon

from .errors import ConfigError
from .policy.specs import SMOOTHNESS

LOSS_NAMES = ("softmax", "l2")


class OneHotL2Loss(gluon.loss.Loss):
    """``½ · mean_j (pred_j − onehot(label)_j)²`` per sample (``classes`` outputs)."""

    def __init__(self, classes=10, **kwargs):
        super().__init__(weight=None, batch_axis=0, **kwargs)
        self._classes = classes

    def hybrid_forward(self, F, pred, label):
        target = F.one_hot(label, depth=self._classes)
        return F.mean(F.square(pred - target), axis=1) / 2


def check_loss(name):
    """Raises ConfigError for an unknown loss name."""
    if name not in LOSS_NAMES:
        raise ConfigError("unknown loss %r; known losses: %s" % (name, ", ".join(LOSS_NAMES)))
    return name


def get_loss(name, classes=10):
    """The per-sample loss block named ``name``.

    Raises:
        ConfigError: for an unknown name.
    """
    if check_loss(name) == "l2":
        return OneHotL2Loss(classes)
    return gluon.loss.SoftmaxCrossEntropyLoss()


SMOOTHNESS_CHOICES = SMOOTHNESS
"""How G-CADA's and CADA's lazy condition gets the smoothness constants L_g:
``folded``: L_g = 1 (the constants are folded into c; any model and loss);
``shard``: L_g computed exactly from the group's shard (``linear`` with ``l2`` only)."""


def check_smoothness(smoothness, model, loss):
    """Raises ConfigError naming a bad ``smoothness`` choice or a model/loss it cannot serve."""
    if smoothness not in SMOOTHNESS_CHOICES:
        raise ConfigError("smoothness must be one of %s, got %r" % (", ".join(SMOOTHNESS_CHOICES), smoothness))
    if smoothness == "shard" and (model, loss) != ("linear", "l2"):
        raise ConfigError("smoothness 'shard' computes L_g exactly, which needs a quadratic loss: --model linear "
                          "--loss l2 (got --model %s --loss %s); use smoothness 'folded'" % (model, loss))
    return smoothness


def quadratic_smoothness(features, outputs=10, rtol=1e-10, max_iter=10000):
    """L, the smoothness constant of the mean ``l2`` loss of a linear model over
    the samples ``features`` (n x d, the model's flattened inputs).

    The loss is ``(1/n) Σ_i ½ · (1/K) Σ_j (w_jᵀx̃_i − t_ij)²`` with x̃ = (x, 1)
    (the bias); its Hessian is block diagonal with K equal blocks
    ``X̃ᵀX̃ / (n K)``, so L = λ_max(X̃ᵀX̃ / n) / K (K = ``outputs``).
    λ_max is found by power iteration on X̃ (two matrix-vector products a
    step, never forming the d x d matrix), from the all-ones vector, until the
    Rayleigh quotient changes by less than ``rtol`` (relative): the same
    samples always give the same value.

    Raises:
        ValueError: for an empty or non-2-D ``features``, a bad ``outputs``,
            or no convergence in ``max_iter`` steps.
    """
    x = np.asarray(features)
    if x.ndim != 2 or not len(x):
        raise ValueError("features must be a non-empty n x d array, got shape %s" % (x.shape,))
    if isinstance(outputs, bool) or not isinstance(outputs, int) or outputs < 1:
        raise ValueError("outputs must be a positive integer, got %r" % (outputs,))
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    n = len(x)
    v = np.ones(x.shape[1] + 1) / np.sqrt(x.shape[1] + 1)   # (weights, bias) direction
    lam = 0.0
    for _ in range(max_iter):
        xv = x @ v[:-1].astype(x.dtype) + v[-1]                       # X̃ v
        w = np.append(x.T @ xv, xv.sum()).astype(np.float64) / n       # X̃ᵀ X̃ v / n
        new = float(v @ w)
        norm = np.linalg.norm(w)
        if norm == 0:
            return 0.0
        v = w / norm
        if abs(new - lam) <= rtol * new:
            return new / outputs
        lam = new
    raise ValueError("power iteration did not converge in %d steps" % max_iter)


def shard_smoothness(images, indices, input_size=28, outputs=10):
    """L_g of the ``l2`` loss of the ``linear`` model over one shard: the
    samples ``images[indices]`` as the model sees them (normalized as
    :mod:`mxhet.data` does, flattened). See :func:`quadratic_smoothness`.

    Raises:
        ConfigError: for an input size other than the images' own (the
            resized inputs are not computed here).
        ValueError: for an empty shard.
    """
    from . import data
    indices = np.asarray(indices)
    if not len(indices):
        raise ValueError("the shard is empty")
    if images.shape[1:] != (input_size, input_size):
        raise ConfigError("L_g from the shard needs the images' own size %s, got --input-size %d"
                          % (images.shape[1:], input_size))
    x = images[indices].reshape(len(indices), -1).astype(np.float32)
    x *= 1.0 / (255.0 * data.STD)    # as data._to_batch normalizes
    x -= data.MEAN / data.STD
    return quadratic_smoothness(x, outputs)
