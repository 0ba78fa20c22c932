"""The cluster's interpreter of worker programs (:mod:`mxhet.protocol`).

A :class:`ProgramMode` runs its mode's program one ``Trainer.step()`` at a
time: the step *is* the :class:`~mxhet.protocol.Compute` the program waits on
(forward and backward ran in the script; :class:`SyncMode` adds the emulated
slowdown and the time accounting, and this class the local optimizer step if
the program asked for one); then the program advances, every other effect
carried out with blocking calls (the kvstore channel, the real clock), up to
its next ``Compute``. When the program returns, training has stopped.
"""
from ..protocol import Clock, Compute, Exchange, Now, Payload, PushAsync, Session, WantsStop
from ..protocol import ShareSpeed
from ..protocol.effects import JOB_OVER
from .base import SyncMode


class ProgramMode(SyncMode):
    """Base of the modes whose worker protocol is a program (``program``:
    ``program(opts, stats)`` -> generator of effects, registered with the mode
    and run by the simulator too). Subclasses provide the data plane of the
    payloads their program exchanges (:meth:`exchange_gradients` for
    ``GRADIENTS``; ``DELTAS`` is :meth:`SyncMode.exchange_deltas`).

    ``trace``: a list to record the program's ``(effect, result)`` pairs in
    (None: not recorded). ``votes``: whether the program's exchanges carry
    a stop ballot (False for the asynchronous modes, whose workers stop alone).
    """
    program = None
    trace = None
    votes = True

    def on_setup(self, batch_size):
        super().on_setup(batch_size)
        if self.votes:
            self.stopping.open_vote(self.channel)
        self.session = Session(type(self).program(self.opts, self.stats), self.trace)
        if self.session.advance() is None:
            self.stopped = True

    def local_update(self, batch_size, ignore_stale_grad):
        """The pending Compute's end: the local optimizer step if it asked for one."""
        effect = self.session.pending
        if not isinstance(effect, Compute):
            raise RuntimeError("the %s program waits on %r, not a Compute" % (self.name, effect))
        if effect.local_step:
            self.trainer.local_step(batch_size, ignore_stale_grad)
            self.aggregated = False
        else:
            super().local_update(batch_size, ignore_stale_grad)

    def communicate(self, batch_size, capability, compute_end):
        self._step_batch = batch_size
        if self.session.run_until_compute(self.carry_out) is None:
            self.stopped = True

    def carry_out(self, effect):
        """Carry out one effect (not a Compute) with blocking calls; returns its result."""
        if isinstance(effect, WantsStop):
            return self.stopping.wants(self.stats)
        if isinstance(effect, Exchange):
            control = self.stopping.ballot(effect.vote)
            if effect.payload is Payload.DELTAS:
                if self.exchange_deltas(effect.round, *control) is JOB_OVER:
                    return JOB_OVER   # (RoundMembers: a round after the job's agreed stop, nothing pushed)
                self.aggregated = True
            else:
                self.exchange_gradients(self._step_batch, effect.round, *control)
            return self.stopping.tally()
        if isinstance(effect, PushAsync) and effect.payload is Payload.DELTAS:
            # Asynchronous local SGD (dylu): the servers apply the delta on arrival; the replica becomes
            # the global model pulled in the same exchange.
            self.exchange_deltas(effect.round)
            self.aggregated = True
            return None
        if isinstance(effect, ShareSpeed):
            return self.share_speed(effect.iteration_s)
        if isinstance(effect, PushAsync):
            if effect.payload is not Payload.GRADIENTS:
                raise TypeError("the cluster runtime pushes only gradients asynchronously, not %r" % (effect,))
            self.exchange_gradients(self._step_batch, effect.round)
            return None
        if isinstance(effect, Clock):
            t0 = self.clock()
            self.client.clock(effect.iterations)
            self.stats.query_s += self.clock() - t0
            self.stats.waited_iterations += 1
            return None
        if isinstance(effect, Now):
            return self.timer.since_start()
        raise TypeError("the cluster runtime cannot carry out %r" % (effect,))

    def share_speed(self, iteration_s):
        """Carry out a :class:`~mxhet.protocol.effects.ShareSpeed` (modes whose program yields one define it)."""
        raise TypeError("mode %s shares no speeds" % (self.name,))


class PreludeProgramMode(ProgramMode):
    """A :class:`ProgramMode` whose program yields effects before its first
    iteration (nodelay's initial ``x_init``, Partial Reduce's join with the
    controller): :meth:`on_setup` carries them out, so the first
    ``Trainer.step()`` finds the program waiting on a Compute. A subclass's
    ``on_setup`` makes what those effects need, then calls this one."""

    def on_setup(self, batch_size):
        super().on_setup(batch_size)
        effect = self.session.pending
        while effect is not None and not isinstance(effect, Compute):
            effect = self.session.advance(self.carry_out(effect))
        if effect is None:
            self.stopped = True
