"""The worker of asynchronous SGD without gradient delay (``nodelay``), as counters.

Algorithm 1 of "Asynchronous SGD without gradient delay for efficient
distributed training": a worker keeps a replica ``x``, the last global model
it received ``x_init`` and its local update ``w.x = x - x_init``. Thread 1
computes gradients and steps ``x``; thread 2 hands ``w.x`` over whenever the
master asks for it, and the worker keeps computing while the update is merged.

This module holds the bookkeeping only (no arrays, no MXNet, no clock): the
iteration counter ``i``, ``i_init`` (``i`` at the last transfer), the
staleness ``s`` (gradients that are not in the last global model received)
and the transfer rounds. An executor moves the arrays:

* after every local step it calls :meth:`NoDelayPolicy.completed`; on
  :attr:`~mxhet.policy.worker.Action.QUERY` it tells the master that it holds
  at least one gradient for round :attr:`NoDelayPolicy.round` (line 16);
* when the master's request for that round arrives it calls
  :meth:`NoDelayPolicy.requested`, then, at the next point where ``x`` is not
  being written, hands ``w.x`` over and calls :meth:`NoDelayPolicy.transferred`;
* when the merged global model arrives it calls :meth:`NoDelayPolicy.arrived`
  (lines 8-11: ``x_init = PS.x; x = x_init + w.x; s = i - i_init``);
* while :attr:`NoDelayPolicy.blocked` (``s == tau``, line 5) it computes no
  further gradient and waits for the next global model.

Where the paper's prose and its pseudo-code differ, this follows the
pseudo-code: at a transfer thread 2 sets ``x_init = x`` and ``i_init = i``
(line 23), so ``w.x`` becomes zero while ``x`` keeps the local work (the prose
says "sets the local model x to x_init", which would throw that work away
until the merged model returns). The staleness ``s`` is not reset at a
transfer: the transferred gradients are still missing from the last global
model the worker holds.
"""
from ..errors import ConfigError
from .worker import Action

DEFAULT_STALENESS = 16
"""The paper's τ (§4: "we set the maximal staleness parameter to the value of 16")."""


class NoDelayPolicy:
    """Algorithm 1's worker state (threads 1 and 2) over plain counters.

    Starts as line 3 does: ``s = tau``, so the worker waits for the initial
    global model; the executor announces it with ``arrived(-1)``.

    Args:
        staleness: τ, the maximal staleness (a positive integer).
        first_round: the first transfer round it takes part in (> 0: a worker started again
            after a death, ``mxhet-launch --elastic --max-restarts``, from the round the State Server names).

    Raises:
        ConfigError: for a staleness that is not a positive integer, or a negative first round.
    """

    def __init__(self, staleness=DEFAULT_STALENESS, first_round=0):
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 1:
            raise ConfigError("staleness (tau) must be a positive integer, got %r" % (staleness,))
        if isinstance(first_round, bool) or not isinstance(first_round, int) or first_round < 0:
            raise ConfigError("first_round must be an integer >= 0, got %r" % (first_round,))
        self.tau = staleness
        self.i = 0               # gradients computed so far
        self.i_init = 0          # i at the last transfer
        self.s = staleness       # gradients missing from the last global model received (line 3: tau)
        self.round = first_round  # the next transfer round
        self.received = None     # the round of the last global model received (-1: the initial one)
        self.notified = False    # the master knows that round `round` has a gradient
        self.request = None      # (round, stop) of a transfer asked for and not yet done
        self.in_flight = None    # round transferred whose merged model has not arrived yet
        self.stopping = False    # the last transfer was the job's last round
        self.max_s = 0           # the largest staleness seen after a step
        self.blocks = 0          # times a step ended with the worker blocked

    @property
    def pending(self):
        """Gradients in ``w.x``: computed since the last transfer."""
        return self.i - self.i_init

    @property
    def blocked(self):
        """True when the next gradient must wait for a new global model (line 5)."""
        return self.s >= self.tau

    def completed(self):
        """A gradient was computed and applied to ``x`` (lines 13-17).

        Returns:
            :attr:`Action.QUERY` when the master must now hear that round
            :attr:`round` has work (the first gradient since the last
            transfer), else :attr:`Action.CONTINUE`.

        Raises:
            ConfigError: a step taken while blocked (the executor broke line 5).
        """
        if self.blocked:
            raise ConfigError("a gradient was computed at staleness %d = tau: the worker must wait for "
                              "the global model" % self.s)
        self.i += 1
        self.s += 1
        self.max_s = max(self.max_s, self.s)
        if self.blocked:
            self.blocks += 1
        if self.notified:
            return Action.CONTINUE
        self.notified = True
        return Action.QUERY

    def requested(self, round_, stop=False):
        """The master asks for the transfer of ``round_`` (``stop``: the job's last).

        Raises:
            ConfigError: for a round the worker did not announce.
        """
        if round_ != self.round or not self.notified or self.request is not None:
            raise ConfigError("transfer of round %d requested; the worker announced round %d%s"
                              % (round_, self.round, "" if self.notified else " (not yet)"))
        self.request = (round_, bool(stop))

    @property
    def transfer_due(self):
        """True while a requested transfer waits to be carried out."""
        return self.request is not None

    def transferred(self):
        """``w.x`` was handed over and ``x_init = x`` (lines 22-23).

        Returns:
            ``(round, gradients, stop)`` of the transfer.

        Raises:
            ConfigError: when no transfer was requested, or the previous
                transfer's model has not arrived (transfers are in FIFO order).
        """
        if self.request is None:
            raise ConfigError("no transfer was requested")
        if self.in_flight is not None:
            raise ConfigError("round %d handed over before round %d's global model arrived"
                              % (self.request[0], self.in_flight))
        round_, stop = self.request
        done = (round_, self.pending, stop)
        self.request = None
        self.i_init = self.i
        self.in_flight = round_
        self.round = round_ + 1
        self.notified = False
        self.stopping = stop
        return done

    def arrived(self, round_):
        """The global model merged in round ``round_`` arrived (-1: the initial model).

        The executor sets ``x_init`` to it and ``x = x_init + w.x``; here
        ``s = i - i_init`` (line 11).

        Raises:
            ConfigError: for a model of a round not in flight.
        """
        expected = -1 if self.received is None and self.in_flight is None else self.in_flight
        if round_ != expected:
            raise ConfigError("global model of round %d arrived; expected round %s" % (round_, expected))
        self.received = round_
        self.in_flight = None
        self.s = self.pending

    @property
    def done(self):
        """True once the last round's model arrived: the worker stops."""
        return self.stopping and self.in_flight is None
