"""Simulator drivers of the modes kept in their own modules.

Each module registers ``driver(sim, dev)`` with :func:`mxhet.sim.engine.sim_driver`;
importing this package registers them all. None is left: ``gcada`` and ``cada``
are worker programs now (:mod:`mxhet.protocol.programs_gcada`, their simulator
effects in :mod:`mxhet.sim.program_gcada`).
"""
