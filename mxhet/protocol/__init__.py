"""Each mode's worker protocol, written once, sans I/O.

A mode's *worker program* is a generator that yields effects
(:mod:`.effects`: compute one iteration, exchange with the servers, ask
whether to stop, read the clock) and receives their results; it holds the
mode's policy (:mod:`mxhet.policy.worker`), the stop protocol
(:mod:`mxhet.policy.stop`) and the per-round statistics. It never touches
MXNet, a socket or a clock, so it runs unchanged under two interpreters:

* the cluster's (:class:`mxhet.modes.program.ProgramMode`): ``Trainer.step()``
  advances the program to its next :class:`~.effects.Compute`, carrying the
  effects out with the kvstore channel and the real clock;
* the simulator's (:func:`mxhet.sim.program.run_program`): a SimPy process
  that carries them out with the simulated servers, the link model and the
  virtual clock.

Programs are found through the mode registry (a mode class's ``program``,
:func:`mxhet.modes.registry.get_program`). Every mode is a program: ``localsgd``, ``sync``,
``async``, ``dcasgd``, ``ssp``, ``esync`` and ``local`` (:mod:`.programs`), ``nodelay`` and
``preduce`` (:mod:`.programs_groups`), ``adsp`` (:mod:`.programs_adsp`), ``gcada`` and ``cada``
(:mod:`.programs_gcada`), ``dylu`` (:mod:`.programs_async_local`).
"""
from .effects import Clock, Compute, Exchange, Now, Payload, PushAsync, WantsStop
from .runtime import Session
from .programs import asynchronous, localsgd, ssp, sync

__all__ = ["Clock", "Compute", "Exchange", "Now", "Payload", "PushAsync", "WantsStop", "Session",
           "asynchronous", "localsgd", "ssp", "sync"]

from .effects import ShareSpeed  # noqa: E402  (asynchronous local SGD's DyLU: programs_async_local)
__all__ += ["ShareSpeed"]
