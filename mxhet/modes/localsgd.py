"""Local SGD / fixed ADACOMM (``localsgd``): τ local steps, then a synchronous model average.

Every worker applies ``local_steps`` (τ) optimizer steps to its replica, then
the workers still training average their model deltas: the State Server names
the round's m members, each pushes Δ/m to ``dist_async`` servers that add
every push (:mod:`mxhet.modes.rounds`), and every member pulls the average once
all m are in. Fast workers wait for the slowest at every average: that is the
point of this baseline. The stop vote rides on the round's entry, so every
worker stops after the same round. A worker whose script leaves the training
loop early, or that dies under ``mxhet-launch --elastic``, leaves the rounds;
the others average without it. The protocol is :func:`mxhet.protocol.programs.localsgd`, run here
by :class:`~mxhet.modes.program.ProgramMode` and in the simulator by
:func:`mxhet.sim.program.run_program`.
"""
from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..policy import specs
from ..protocol import programs
from .program import ProgramMode
from .registry import register
from .rounds import RoundMembers


@register
class LocalSGD(RoundMembers, ProgramMode):
    """Local SGD on the real cluster: the worker program over the rounds whose
    members the State Server names (:class:`~mxhet.modes.rounds.RoundMembers`)."""
    spec = specs.LOCALSGD
    program = staticmethod(programs.localsgd)
    bucket_bytes = DEFAULT_BUCKET_BYTES
