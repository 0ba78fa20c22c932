"""Synchronization modes, selected by name through a strict registry.

========  ============  ============  ================================================
name      kvstore       State Server  what it does
========  ============  ============  ================================================
esync     dist_sync     yes           ESync: local iterations, State Server decides
sync      dist_sync     no            synchronous SGD, gradient averaged every step
async     dist_async    no            asynchronous SGD, gradient applied on arrival
dcasgd    dist_async    no            asynchronous SGD with delay compensation
ssp       dist_async    yes           async SGD, at most s iterations ahead
localsgd  dist_sync     no            τ local steps, then a synchronous model average
adsp      dist_async    yes           ADSP: commits at scheduler-set rates, no waiting
local     (none)        no            standalone training on one device
========  ============  ============  ================================================
"""
from .base import SyncMode, WorkerStats
from .registry import get_mode, mode_names, register
from . import adsp, esync, gradient, local, localsgd  # noqa: F401  (register the built-in modes)

__all__ = ["SyncMode", "WorkerStats", "get_mode", "mode_names", "register"]
