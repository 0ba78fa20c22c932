"""Pure decision rules of every mode: *when* to query, abort, aggregate, commit or stop.

Nothing in this package touches MXNet, a socket or a clock. A policy is a
small state machine over plain data: an executor tells it what happened (an
iteration finished, taking this many seconds; the State Server answered;
a commit took this long) and carries out the action it returns. The real
cluster's executor is :mod:`mxhet.modes` (kvstore push/pull through
:mod:`mxhet.dataplane`, the State Server through ZeroMQ); a simulated one
drives the same objects on a virtual clock. The State Server's own rules are
in :mod:`mxhet.control.state_rule` and :mod:`mxhet.control.adsp`.

:mod:`mxhet.policy.specs` describes every mode (kvstore, State Server,
options with defaults and help) without importing MXNet, so the launcher and
the bench read it cheaply.
"""
from .spec import ModeSpec, Option, get_spec, spec_names
from . import specs  # noqa: F401  (registers the built-in modes' specs)

__all__ = ["ModeSpec", "Option", "get_spec", "spec_names"]
