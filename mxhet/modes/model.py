"""A worker model's identity: the signature every worker registers with (same
model everywhere), the digest of its final values, and the check that its
parameters share their contexts."""
import hashlib
import re

import numpy as np

from ..errors import ConfigError


def portable_names(names):
    """Parameter names without their top-level block's instance counter
    (``smallcnn3_conv0_weight`` -> ``smallcnn_conv0_weight``): removed only
    when every name starts with the same counted prefix."""
    names = list(names)
    prefixes = {name.split("_", 1)[0] for name in names if "_" in name}
    if len(prefixes) != 1 or not all("_" in name for name in names):
        return names
    prefix = prefixes.pop()
    match = re.fullmatch(r"(.*[^\d])\d+", prefix)
    if not match:
        return names
    return [match.group(1) + name[len(prefix):] for name in names]


def model_signature(params, weights):
    """A digest of the parameters' names, shapes and dtypes, in key order.

    Names count, so two same-shaped parameters in swapped order are caught;
    the top-level block's instance counter (``smallcnn0_`` vs
    ``smallcnn1_``, which depends on how many models the process built
    before) does not.
    """
    names = portable_names(p.name for p in params)
    text = ";".join("%s:%s:%s" % (name, tuple(w.shape), np.dtype(w.dtype).name)
                    for name, w in zip(names, weights))
    return hashlib.sha256(text.encode()).hexdigest()


def model_digest(arrays):
    """The sha256 (hex) of ``arrays``' values, in order: equal digests mean equal models."""
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a.asnumpy()).tobytes())
    return digest.hexdigest()


def check_contexts(params):
    """Raises ConfigError unless every parameter lives on the same contexts
    (one or several per worker; gluon's ``split_and_load`` pattern)."""
    first = None
    for p in params:
        ctxs = list(p.list_ctx())
        if first is None:
            first = (p.name, ctxs)
        elif ctxs != first[1]:
            raise ConfigError("parameter %s lives on %s but %s on %s; an mxhet worker's parameters must all "
                              "live on the same contexts" % (p.name, ctxs, first[0], first[1]))
