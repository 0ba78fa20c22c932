"""The effects a worker program yields, and what each one returns.

Plain frozen records: the program says *what* it needs, an interpreter
(cluster or simulator) says *how*. Each docstring says what both
interpreters do with it and what the program receives back.
"""
import dataclasses
import enum


@dataclasses.dataclass(frozen=True)
class Compute:
    """One local iteration.

    Cluster: control returns to the user's script, whose next
    ``Trainer.step()`` is the iteration (forward, backward, the emulated
    slowdown). Simulator: virtual time advances by the device's iteration
    time and the real forward and backward pass runs. With ``local_step``
    the local optimizer then applies the gradient to the replica; without,
    the gradient is left for an :class:`Exchange` or a
    :class:`PushAsync` of ``GRADIENTS``.

    Returns: None.
    """
    local_step: bool = True


class Payload(enum.Enum):
    """What an :class:`Exchange` pushes, and what the worker does with what it pulls."""
    DELTAS = "deltas"        # Δ = replica − global model, every key; the replica becomes the new global model
    GRADIENTS = "gradients"  # this iteration's gradients (trainable keys); the weights pulled replace the replica's


@dataclasses.dataclass(frozen=True)
class Exchange:
    """A synchronous push and pull (``dist_sync``) of round ``round``: every
    worker pushes, the servers apply the mode's updater once all have, every
    worker pulls. ``vote`` (a :meth:`mxhet.policy.stop.StopRule.ballot`) rides
    on the same exchange as one more value.

    Cluster: :class:`mxhet.dataplane.KVChannel` push/pull (plus the stop-vote
    key). Simulator: the round's :class:`mxhet.sim.engine.SyncRound` over the
    link model.

    Returns: the workers' ballots combined (> 0: someone wants to stop).
    """
    payload: Payload
    round: int
    vote: float = 0.0


@dataclasses.dataclass(frozen=True)
class PushAsync:
    """An asynchronous push and pull (``dist_async``) of round ``round``: the
    servers apply this worker's push with the mode's updater on arrival and
    the worker pulls the model as it is then; nobody waits for the others, so
    the pulled model may already hold other workers' pushes and this push may
    have been computed on a stale one. ``GRADIENTS``, or ``DELTAS``
    (asynchronous local SGD: the replica then becomes the pulled model).

    Cluster: :class:`mxhet.dataplane.KVChannel` push/pull. Simulator:
    :meth:`mxhet.sim.engine.Simulation.push_async` over the link model.

    Returns: None.
    """
    payload: Payload
    round: int


@dataclasses.dataclass(frozen=True)
class Clock:
    """Stale synchronous parallel's gate: report this worker's clock
    (``iterations`` done) to the State Server and wait until it is no more
    than the job's staleness ahead of the slowest worker still training
    (:class:`mxhet.control.server.StateService`'s CLOCK).

    Cluster: :meth:`mxhet.control.client.StateClient.clock`. Simulator: a
    blocking request over the device's link to the same service.

    Returns: None.
    """
    iterations: int


@dataclasses.dataclass(frozen=True)
class WantsStop:
    """Whether this worker wants to stop now: asked to, or its stop condition
    holds (cluster: the script's :class:`~mxhet.policy.stop.StopRule`;
    simulator: the time budget, the round or compute cap, the target).

    Returns: bool.
    """


@dataclasses.dataclass(frozen=True)
class Now:
    """The interpreter's clock: seconds since training started (real or virtual).

    Returns: float.
    """


@dataclasses.dataclass(frozen=True)
class ShareSpeed:
    """Publish this worker's measured seconds per iteration (0: not measured
    yet) and read every worker's latest (asynchronous local SGD's DyLU,
    :mod:`mxhet.policy.dylu`). Nobody waits for the others: a worker that has
    not published yet reads as 0.

    Cluster: one control key per rank on the servers (``dist_async``: the
    last push is the value), a push of this worker's key and a pull of all.
    Simulator: the simulation's table, over the link model.

    Returns: tuple of seconds per iteration, one per worker (0: not known).
    """
    iteration_s: float
