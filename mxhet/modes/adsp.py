"""ADSP (``adsp``): no waiting, commits at scheduled rates (the ADSP paper).

Every worker trains its replica continuously. Its accumulated update since
the last commit is ``U_i = Σ η'·g``, i.e. ``w_pulled - w_local``; it commits
``Δ = -U_i`` to the servers through ``dist_async``, where
:class:`kvstore_ext.updaters.ESyncAverage` applies ``W ← W + (ε/M)·Δ`` on
arrival (global learning rate η = ε/M, 1/M by default), pulls W and goes on.
No worker ever waits for another.

When to commit comes from the scheduler in the State Server
(:mod:`mxhet.control.adsp`) and the worker's commit timer
(:class:`mxhet.policy.worker.ADSPPolicy`); the protocol is
:func:`mxhet.protocol.programs_adsp.adsp`, run here by
:class:`~mxhet.modes.program.PreludeProgramMode` (its first commit report
comes before the first iteration) and in the simulator by
:func:`mxhet.sim.program.run_program`. The worker's smoothed training loss
goes with each report and feeds the commit-rate search; rank 0 puts the
search's record in the run's summary (``adsp_search``).
"""
import logging

from ..dataplane.channel import DEFAULT_BUCKET_BYTES
from ..errors import ProtocolError, StateServerTimeout
from ..policy import specs
from ..protocol import Now
from ..protocol import programs_adsp
from ..protocol.effects import Measured, ReportCommits
from .program import PreludeProgramMode
from .registry import register

LOG = logging.getLogger(__name__)


@register
class ADSP(PreludeProgramMode):
    """ADSP on the real cluster: the worker program, commit reports to the State Server's scheduler."""
    spec = specs.ADSP
    program = staticmethod(programs_adsp.adsp)
    bucket_bytes = DEFAULT_BUCKET_BYTES
    votes = False   # each worker stops on its own, after committing its local work

    def __init__(self, trainer, config, **options):
        super().__init__(trainer, config, **options)
        programs_adsp.check_options(self.opts)   # before any connection: a bad option fails the worker at once
        self._last_loss = None
        self._t0 = None

    @classmethod
    def updater_for(cls, num_workers, batch_size, optimizer, opts):
        from kvstore_ext.updaters import ESyncAverage
        return ESyncAverage(num_workers, epsilon=opts["global_lr"])

    def on_connect(self):
        self.client = self.join_state_server()

    def on_setup(self, batch_size):
        # The program's clock starts at its first commit report, which comes before training's clock
        # (setup broadcasts the model in between): its times are only compared with each other.
        self._t0 = self.clock()
        super().on_setup(batch_size)

    def observe_loss(self, value):
        super().observe_loss(value)
        self._last_loss = float(value)

    def communicate(self, batch_size, capability, compute_end):
        # The pending MeasuredCompute's result: this step's seconds, the latest loss the script reported.
        self._step_batch = batch_size
        if self.session.run_until_compute(self.carry_out, Measured(capability, self._last_loss)) is None:
            self.stopped = True

    def carry_out(self, effect):
        if isinstance(effect, ReportCommits):
            t0 = self.clock()
            answer = self.client.commit_report(effect.commits, effect.loss, effect.commit_cost)
            self.stats.query_s += self.clock() - t0
            return answer
        if isinstance(effect, Now):
            return self.clock() - self._t0
        return super().carry_out(effect)

    def summary_fields(self):
        """The commit-rate search as the scheduler ran it (``adsp_search``; times in seconds from the
        scheduler's start, the first commit report, which comes just before the run's clock starts).
        None, with a warning, when the State Server cannot send it: the run's summary is still written."""
        try:
            return {"adsp_search": self.client.adsp_record()}
        except (ProtocolError, StateServerTimeout) as exc:
            LOG.warning("the ADSP search record could not be fetched: %s", exc)
            return {"adsp_search": None}

    def leave_at_exit(self):
        """A worker whose loop ended before the others' (an epoch loop over its
        shard) leaves alone (:meth:`SyncMode.leave_alone`): its goodbye tells
        the scheduler to stop waiting for its reports. As in local SGD, local
        work not committed yet is dropped: the script ended it."""
        return self.leave_alone()

    def request_stop(self):
        super().request_stop()
        if self.stats.iterations == sum(self.stats.local_iters):   # no local work left to commit
            self.stopped = True
