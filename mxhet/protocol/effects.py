"""The effects a worker program yields, and what each one returns.

Plain frozen records: the program says *what* it needs, an interpreter
(cluster or simulator) says *how*. Each docstring says what both
interpreters do with it and what the program receives back.
"""
import dataclasses
import enum


class _JobOver:
    """The type of :data:`JOB_OVER` (one instance, compared with ``is``)."""

    def __repr__(self):
        return "JOB_OVER"


JOB_OVER = _JobOver()
"""What an :class:`Exchange` or :class:`AggregateDeltas` of a round the State Server names returns
when that round comes after the job's agreed stop (a worker that rejoined while the others' last
round was open, :mod:`mxhet.control.membership`): nothing was pushed, the program stops."""


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

    Returns: the workers' ballots combined (> 0: someone wants to stop); :data:`JOB_OVER` in a
    round whose members the State Server names, when it comes after the job's agreed stop.
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


# -- nodelay and Partial Reduce (the State Server asked or told, a model moved in the background,
# -- a rendezvous slot) ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ListeningCompute(Compute):
    """One local iteration during which the State Server's answers are
    listened for (nodelay's thread 2, which does not wait for thread 1).

    Cluster: as :class:`Compute`; answers that arrive during the emulated
    slowdown end the wait early. Simulator: the iteration's virtual time,
    cut short by an answer's arrival.

    Returns: None once the iteration is done (its local step applied), else
    the :class:`TransferAsked` answers that arrived meanwhile (a tuple): the
    iteration is not done, the same worker's next :class:`ListeningCompute`
    goes on with it (nothing of it was applied yet).
    """


@dataclasses.dataclass(frozen=True)
class TransferAsked:
    """An event: the State Server asks for the transfer of round ``round``
    (``stop``: the job's last), the answer to a :class:`Notify`."""
    round: int
    stop: bool


@dataclasses.dataclass(frozen=True)
class ModelArrived:
    """An event: the model merged in round ``round`` has arrived (a :class:`Handover`'s pull)."""
    round: int


@dataclasses.dataclass(frozen=True)
class Notify:
    """nodelay: tell the State Server that this worker holds ``pending``
    gradients for transfer round ``round`` (``want_stop``: make it the job's
    last), without waiting; the answer comes later as a :class:`TransferAsked`.

    Cluster: :meth:`mxhet.control.client.StateClient.send`. Simulator: the
    request over the device's link to the same service, answered when its
    rule releases it.

    Returns: None.
    """
    round: int
    pending: int
    want_stop: bool


@dataclasses.dataclass(frozen=True)
class Merged:
    """nodelay: tell the State Server that round ``round``'s merged model
    arrived, without waiting (its answer carries nothing).

    Returns: None.
    """
    round: int


@dataclasses.dataclass(frozen=True)
class Handover:
    """nodelay's transfer (Algorithm 1, lines 22-23): ``w.x = x - x_init`` is
    handed to the background push and pull of round ``round`` (``dist_sync``,
    every worker's ``w.x`` averaged into the model on the servers) and
    ``x_init = x``. A non-finite ``w.x`` goes through the job's NaN policy
    (``stop``: the run fails; ``skip``: zeros are pushed and the local work
    since the last transfer is dropped, ``x = x_init``), in both interpreters.

    Cluster: the data-plane thread (``Courier``). Simulator: a SimPy process
    over the link model.

    Returns: None. The merged model later arrives as a :class:`ModelArrived`.
    """
    round: int


@dataclasses.dataclass(frozen=True)
class Poll:
    """nodelay, between two iterations: the events that have arrived
    (:class:`ModelArrived` first, in round order, then :class:`TransferAsked`);
    with ``block``, wait until there is at least one (time counted as waiting).

    Returns: a tuple of events.
    """
    block: bool


@dataclasses.dataclass(frozen=True)
class TakeIn:
    """nodelay (Algorithm 1, lines 8-11): ``x_init = PS.x`` and ``x = x_init +
    w.x``, with the model merged in round ``round`` that has arrived.

    Returns: None.
    """
    round: int


@dataclasses.dataclass(frozen=True)
class JoinReduce:
    """Partial Reduce: the controller's settings (every worker sends the
    same), a blocking request to the State Server (``ReduceJoin``).

    Returns: None.
    """
    group_size: int
    dynamic: bool
    alpha: float
    avoid_frozen: bool
    window: int


@dataclasses.dataclass(frozen=True)
class Ready:
    """Partial Reduce: READY at iteration number ``k`` (``want_stop``: this
    worker wants the job to stop); waits until the controller put the worker
    in a group of P, or answers stop (time counted as querying).

    Returns: a :class:`Grouped`.
    """
    k: int
    want_stop: bool


@dataclasses.dataclass(frozen=True)
class Grouped:
    """The answer to a :class:`Ready`: group ``group`` through rendezvous slot
    ``slot``, this member's weight β, the iteration number to go on with
    (``k``), the zero pushes this member adds to a group smaller than P
    (``fill``, after departures); or ``stop``."""
    stop: bool
    group: int = -1
    slot: int = -1
    weight: float = 0.0
    k: int = 0
    fill: int = 0


@dataclasses.dataclass(frozen=True)
class Reduce:
    """Partial Reduce's reduce through a rendezvous slot: push β·x to slot
    ``slot``'s keys, wait at the State Server until every member of group
    ``group`` has pushed (``ReducePushed``), pull the slot's Σ β_j·x_j into
    the replica. ``fill`` more pushes of zeros make a group smaller than P
    (after departures) count as the P pushes the slot's updater expects.

    Cluster: ``dist_async`` push/pull of the slot keys and the State Server's
    barrier. Simulator: the same updater on the simulated slot keys, over the
    link model and the same service.

    Returns: None.
    """
    group: int
    slot: int
    weight: float
    fill: int = 0


# -- ESync: the State Server queried with blocking or delayed ACKs (§4.2) ----------------------------

@dataclasses.dataclass(frozen=True)
class Listen:
    """Where the State Server's answers go that the program does not wait for
    (delayed ACKs' answers, RESET's): ``answers`` has ``answer(reply)`` (an
    answer to a QUERY-STATE), ``stop()`` (the job stops after the round last
    aggregated), and the properties ``abort`` (abandon the iteration in
    progress), ``wake`` (abort, or stop) and ``stop_decided``. Interpreters
    hand it every such answer as it arrives (simulator) or is read (cluster).

    Returns: None.
    """
    answers: object = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True)
class Iterate(Compute):
    """A :class:`Compute` that reports its time and may be abandoned. ``test``:
    Algorithm 1's test batch (line 3): timed as an iteration, its gradient
    dropped and its batch consumed, not counted as an iteration.
    ``abortable``: a ``wake`` of the :class:`Listen`-ed answers meanwhile
    ends it (simulator: at once; cluster: during the emulated slowdown, else
    after forward and backward, before the update), nothing of it applied.
    ``warmup`` (with ``test``): a warm-up before the test batch, neither
    reported nor timed by the profile: on the cluster MXNet's first iteration
    (lazy initialisation, memory allocation; no emulated slowdown added), in
    the simulator, whose iteration times have no warm-up, nothing (no virtual
    time, no batch). ``read_loss``: report the batch's training loss, taken
    before the iteration's own step (simulator: computed; cluster: what the
    training loop gave ``Trainer.observe_loss`` before ``step``).

    Returns: :class:`Iterated`.
    """
    test: bool = False
    abortable: bool = False
    warmup: bool = False
    read_loss: bool = False


@dataclasses.dataclass(frozen=True)
class Iterated:
    """What an :class:`Iterate` came to: its compute time (seconds), whether it was abandoned,
    and (``read_loss``) the batch's training loss, else None."""
    duration: float
    aborted: bool = False
    loss: object = None


@dataclasses.dataclass(frozen=True)
class RoundTrip:
    """The interpreter's State Server round trip, seconds (cluster: smoothed
    over the answered requests; simulator: the last one).

    Returns: float.
    """


@dataclasses.dataclass(frozen=True)
class StateQuery:
    """ESync's QUERY-STATE for ``round`` after ``k`` local iterations, with
    capability ``c`` seconds. ``since_finish`` sent is ``ahead`` (the part of
    the round trip the worker does not wait before its next iteration) plus
    the time since the iteration ended (0 in the simulator, where nothing
    runs in between). ``blocking``: wait for the answer (Algorithm 1); else
    it comes later to the :class:`Listen`-ed answers. ``loss``: the training
    loss on the global model last pulled (``--wait-needed``), or None.

    Returns: the answer (a :class:`mxhet.control.state_rule.QueryReply`) if blocking, else None.
    """
    round: int
    k: int
    c: float
    ahead: float
    blocking: bool
    loss: object = None


@dataclasses.dataclass(frozen=True)
class AwaitAnswer:
    """Wait up to ``timeout`` seconds for an answer to the last (non-blocking)
    :class:`StateQuery`, unless it is already in; it goes to the
    :class:`Listen`-ed answers. Counted as query time.

    Returns: None.
    """
    timeout: float


@dataclasses.dataclass(frozen=True)
class AggregateDeltas:
    """ESync's aggregation of ``round``: with ``aggregation`` other than
    ``mean`` the workers first exchange their counts (``steps`` local
    iterations) and each scales its delta
    (:class:`mxhet.dataplane.weighting.DeltaWeighting`); then Δ of every key
    is pushed, the servers apply ESync's updater once all are in
    (``dist_sync``), and the replica becomes the new global model.

    Under ``--round-deadline`` (``members`` > 0) the round is of the
    ``members`` devices the State Server named, and this device's delta
    enters with its share ``weight`` of the combination
    (:mod:`mxhet.policy.deadline`); 0: a round of every device, as in the paper.
    Under ``--late-memory``, ``remember``: this (late) device's delta is also
    stored as its memory; ``memory`` (rank, version, rank, ... : the keeper's
    READY only): the absent devices' remembered deltas this device adds to its
    push, each at ``memory_share`` of the round's update.

    Returns: None; :data:`JOB_OVER` when the round (its members named by the State
    Server) comes after the job's agreed stop: nothing was pushed.
    """
    round: int
    steps: int
    aggregation: str = "mean"
    members: int = 0
    weight: float = 0.0
    remember: bool = False
    memory: tuple = ()
    memory_share: float = 0.0


@dataclasses.dataclass(frozen=True)
class ResetOptimizer:
    """Clear the local optimizer's state (momentum, moments) at a round boundary.

    Returns: None.
    """


@dataclasses.dataclass(frozen=True)
class SendReset:
    """RESET for ``round`` (the one just started) with the worker's stop
    wish, sent without waiting (protocol v2); the job's stop decision comes
    back to the :class:`Listen`-ed answers. ``since_finish``: seconds the
    State Server takes off its receipt for t_e.

    Returns: None.
    """
    round: int
    want_stop: bool
    since_finish: float


# -- ADSP (commit reports to the State Server's scheduler) ----------------------------------------

@dataclasses.dataclass(frozen=True)
class MeasuredCompute(Compute):
    """One local iteration whose duration and training loss the program reads
    (ADSP's commit timer and its scheduler's reward).

    Returns: a :class:`Measured`. The loss is the latest the worker knows:
    in the simulator this iteration's; on the cluster the last one the
    script passed to ``Trainer.observe_loss`` (``mxhet.train`` does so before
    ``step()``, so this iteration's); None before the first.
    """


@dataclasses.dataclass(frozen=True)
class Measured:
    """What a :class:`MeasuredCompute` returns: the iteration's ``seconds``
    (compute and emulated slowdown) and a training ``loss`` (batch mean, or None)."""
    seconds: float
    loss: object = None


@dataclasses.dataclass(frozen=True)
class ReportCommits:
    """ADSP: report ``commits`` made so far, the worker's training ``loss``
    (-1: none yet) and its measured seconds per commit ``commit_cost`` to the
    State Server's scheduler (:mod:`mxhet.control.adsp`) and wait for its
    answer (time counted as querying).

    Cluster: :meth:`mxhet.control.client.StateClient.commit_report`.
    Simulator: a blocking COMMIT request over the device's link to the same
    service.

    Returns: ``(target, left)``: the total commits due by the next checkpoint
    and the seconds left until it.
    """
    commits: int
    loss: float
    commit_cost: float


# -- G-CADA and CADA (the State Server selects groups; a member's work may be dropped) ------------

@dataclasses.dataclass(frozen=True)
class BeginIteration:
    """G-CADA: ask to take part in iteration ``iteration`` or a later one
    (``GroupBegin``, with this worker's group and the rule's settings, which
    the interpreter adds); waits until the State Server selected the groups
    of one (time counted as querying). ``want_stop``: this worker wants the
    job to stop.

    Returns: a :class:`Selection`.
    """
    iteration: int
    want_stop: bool


@dataclasses.dataclass(frozen=True)
class Selection:
    """The answer to a :class:`BeginIteration`: iteration ``round`` (also the
    iterations the job finished); ``stop``; ``target``: nobody is selected in
    it, this worker has the servers step; ``ready``: this worker's group is
    selected (else it asks for the next iteration)."""
    round: int
    stop: bool = False
    target: bool = False
    ready: bool = False


@dataclasses.dataclass(frozen=True)
class Download:
    """G-CADA: pull θ^k (``iteration``) into the replica (eq. 5, a download)
    and send a ``GroupWatch`` for it without waiting: its answer says
    whether a teammate claimed the group's upload first.

    Returns: None.
    """
    iteration: int


@dataclasses.dataclass(frozen=True)
class WatchedCompute(Compute):
    """G-CADA: one iteration (the gradient, no local step) that ends early,
    dropped, when the watch of the last :class:`Download` answers that a
    teammate claimed the upload (cluster: polled during the emulated
    slowdown and before the step is applied, the step is then aborted;
    simulator: the iteration's virtual time cut short).

    Returns: True once computed, False when dropped.
    """
    local_step: bool = False


@dataclasses.dataclass(frozen=True)
class ClaimUpload:
    """G-CADA: claim the group's upload of iteration ``iteration``
    (``GroupDone``, time counted as querying).

    Returns: True if this worker is the group's first finisher.
    """
    iteration: int


@dataclasses.dataclass(frozen=True)
class Upload:
    """G-CADA: push this iteration's gradient to the group's keys on the
    servers (kept as the group's last gradient) and report it
    (``GroupUploaded``).

    Returns: True when it was the iteration's last upload: this worker then
    has the servers step (:class:`StepServers`).
    """
    iteration: int


@dataclasses.dataclass(frozen=True)
class StepServers:
    """G-CADA: the servers' step of iteration ``iteration`` (a push to the
    parameter keys, whose value is not used, the pull of θ^{k+1}, a push and
    pull of the norm keys) and its norms to the State Server
    (``GroupStepped``), which selects the next iteration's groups.

    Returns: None.
    """
    iteration: int
