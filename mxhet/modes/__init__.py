"""Synchronization modes' executors on the real cluster, selected by name
through a strict registry. What each mode is (kvstore, State Server, options)
is in :mod:`mxhet.policy.specs`; its decisions are in :mod:`mxhet.policy.worker`.
"""
from .base import SyncMode, WorkerStats
from .registry import get_mode, get_program, mode_names, register
from . import adsp, esync, gradient, local, localsgd  # noqa: F401  (register the built-in modes)
from . import preduce  # noqa: F401
from . import nodelay  # noqa: F401
from . import gcada  # noqa: F401
from . import async_local  # noqa: F401

__all__ = ["SyncMode", "WorkerStats", "get_mode", "get_program", "mode_names", "register"]
