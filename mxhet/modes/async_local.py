"""Asynchronous local SGD with Delayed Nesterov and Dynamic Local Updates (``dylu``).

Liu, Douillard et al., "Asynchronous Local-SGD Training for Language
Modeling" (2024, arXiv 2401.09135). Each worker runs H_i local steps (H
scaled by its measured speed relative to the fastest device's), pushes its
model delta through ``dist_async`` and pulls the global model; nobody waits.
The servers apply each delta on arrival with Delayed Nesterov
(:class:`kvstore_ext.updaters.DelayedNesterov`). The protocol is
:func:`mxhet.protocol.programs_async_local.dylu`, run here by
:class:`~mxhet.modes.program.ProgramMode` and in the simulator by
:func:`mxhet.sim.program.run_program`.
"""
import mxnet as mx

from kvstore_ext import keys as ps_keys
from ..gluon_private import trainer_optimizer, trainer_params
from ..policy import specs
from ..policy.dylu import check_options
from ..protocol import programs_async_local
from .program import ProgramMode
from .registry import register


@register
class DyLU(ProgramMode):
    """Asynchronous local SGD on the real cluster: the worker program, the
    speeds on control keys (one per rank), Delayed Nesterov on the servers."""
    spec = specs.DYLU
    program = staticmethod(programs_async_local.dylu)
    votes = False   # each worker stops on its own

    def __init__(self, trainer, config, **kwargs):
        super().__init__(trainer, config, **kwargs)
        check_options(self.opts)   # before any connection: a bad option fails the worker at once

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts, plain_keys=()):
        from kvstore_ext.updaters import DelayedNesterov
        check_options(opts)
        return DelayedNesterov(num_workers, outer_lr=opts["outer_lr"], outer_momentum=opts["outer_momentum"],
                               period=opts["nesterov_period"] or num_workers, plain_keys=plain_keys)

    def server_updater(self, batch_size):
        # BatchNorm statistics (no gradient) are averaged in, never moved by the momentum.
        plain = [i for i, p in enumerate(trainer_params(self.trainer)) if p.grad_req == "null"]
        return self.updater_for(self.channel.num_workers, batch_size, trainer_optimizer(self.trainer), self.opts,
                                plain_keys=plain)

    def on_setup(self, batch_size):
        # Every worker initializes the speed keys here, at the same point (kvstore init is collective).
        self._speed_keys = ps_keys.speed_keys(self.channel.num_workers)
        self._speeds = [mx.nd.zeros((1,)) for _ in self._speed_keys]
        self.channel.init(self._speed_keys, [mx.nd.zeros((1,)) for _ in self._speed_keys])
        super().on_setup(batch_size)

    def share_speed(self, iteration_s):
        """Push this rank's seconds per iteration, pull every rank's; returns them (0: not known)."""
        rank = self.channel.rank
        mine = self._speed_keys[rank]
        self.channel.push_pull([mine], [mx.nd.full((1,), iteration_s)], [self._speeds[rank]])
        self.channel.pull(self._speed_keys, self._speeds)
        times = [float(v.asscalar()) for v in self._speeds]
        times[rank] = float(iteration_s)   # the pull may not hold this worker's own latest push yet
        return tuple(times)

    def leave_at_exit(self):
        """A worker whose loop ended before the others' leaves alone
        (:meth:`SyncMode.leave_alone`); nobody waits for its next push. Its
        local steps since its last push are dropped, as in ``localsgd`` and
        ``adsp``: the script ended them, and a short last round would reach
        the servers as a delta of fewer steps than its H_i, at no one's
        request."""
        return self.leave_alone()

    def on_leave(self):
        # Its speed key reads 0 ("not known") from now on, so the others' DyLU scales their local
        # steps to the fastest worker still training, not to one that left.
        rank = self.channel.rank
        self.channel.push([self._speed_keys[rank]], [mx.nd.zeros((1,))])

    def request_stop(self):
        # Nobody waits for this worker: it stops at once, not at its next push.
        super().request_stop()
        self.stopped = True
