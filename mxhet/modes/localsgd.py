"""Local SGD / fixed ADACOMM (``localsgd``): τ local steps, then a synchronous model average.

Every worker applies ``local_steps`` (τ) optimizer steps to its replica, then
all workers push their model deltas through ``dist_sync`` and the servers
average them (:class:`kvstore_ext.updaters.ESyncAverage` with ε = 1). Fast
workers wait for the slowest at every average: that is the point of this
baseline. The stop vote rides on the average, so every worker stops after the
same round. The protocol is :func:`mxhet.protocol.programs.localsgd`, run here
by :class:`~mxhet.modes.program.ProgramMode` and in the simulator by
:func:`mxhet.sim.program.run_program`.
"""
from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..policy import specs
from ..protocol import programs
from .program import ProgramMode
from .registry import register


@register
class LocalSGD(ProgramMode):
    """Local SGD on the real cluster: the worker program plus the servers' average."""
    spec = specs.LOCALSGD
    program = staticmethod(programs.localsgd)
    bucket_bytes = DEFAULT_BUCKET_BYTES

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=1.0)
