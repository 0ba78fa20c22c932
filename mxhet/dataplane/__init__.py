"""The data plane: moving tensors through MXNet's parameter server (PS-LITE).

:class:`~mxhet.dataplane.channel.KVChannel` owns a worker's dist kvstore: it
creates it, shares the initial model, ships and checks the server-side
updater (:mod:`kvstore_ext`), pushes and pulls, and counts the bytes and the
seconds. What to push and when is decided elsewhere (:mod:`mxhet.policy`).
"""
from .channel import KVChannel, check_kvstore, copy_all, is_dist_kvstore, live_dist_kvstores, nbytes

__all__ = ["KVChannel", "check_kvstore", "copy_all", "is_dist_kvstore", "live_dist_kvstores", "nbytes"]
