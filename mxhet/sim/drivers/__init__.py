"""Simulator drivers of the modes kept in their own modules.

Each module registers ``driver(sim, dev)`` with :func:`mxhet.sim.engine.sim_driver`;
importing this package registers them all. The first modes' drivers are methods
of :class:`mxhet.sim.engine.Simulation`.
"""
from . import gcada  # noqa: F401
