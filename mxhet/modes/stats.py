"""The counters one worker keeps while it trains (``summary.json``'s worker
records; docs/metrics.md).

Time accounting, in seconds:

* ``compute_s``: from the end of the previous step to the end of this step's
  local work -- data loading, forward, backward, local update, and the
  emulated slowdown sleep (or the padding to ``f x T`` under a base iteration
  time, ``MXHET_BASE_ITER_S``). This is the device "computing".
* ``wait_s``: time inside ``step()`` spent communicating or waiting for other
  workers (pushes, pulls, State Server requests).

:class:`mxhet.modes.timing.StepTimer` keeps the two apart.
"""
import dataclasses


@dataclasses.dataclass
class WorkerStats:
    """Counters of one worker; every time in seconds, every size in bytes."""
    rank: int = 0
    slot: int = 0
    context: str = "cpu"
    slowdown: float = 1.0
    rounds: int = 0
    rejoined_at_round: object = None   # int when started again after a death / left and came back: its first round
    local_iters: list = dataclasses.field(default_factory=list)
    iterations: int = 0
    samples: int = 0
    compute_s: float = 0.0
    wait_s: float = 0.0
    query_s: float = 0.0       # part of wait_s spent in State Server requests
    sync_s: float = 0.0        # part of wait_s spent in pushes and pulls
    bytes_pushed: int = 0
    bytes_pulled: int = 0
    state_queries: int = 0
    state_replies: int = 0
    skipped_pushes: int = 0    # pushes replaced by zeros because of NaN/Inf (on_nonfinite=skip)
    aborted: int = 0           # local iterations abandoned on a delayed READY (ESync §4.2)
    # ESync: the test batch's time (Algorithm 1 line 3), in compute_s but not an
    # iteration: its gradient is dropped and its samples are not counted
    test_batch_s: float = 0.0
    downloads: int = 0         # G-CADA: models pulled to compute a gradient on (eq. 5's |M_D|)
    uploads: int = 0           # G-CADA: gradients uploaded as a group's first finisher (eq. 5's |M_U|)
    waited_iterations: int = 0  # local iterations after which the worker waited for a State Server reply
    late_replies: int = 0      # State Server replies for an earlier round, ignored
    overruns: int = 0          # iterations slower than f x T under MXHET_BASE_ITER_S (contention)
    rtt_s: float = 0.0         # smoothed round-trip time of State Server queries
    # ESync: the longest and shortest time one iteration spent on its State
    # Server query (sending it and, with blocking ACKs, waiting for the answer)
    query_wait_max_s: float = 0.0
    query_wait_min_s: float = None
    max_queries_in_flight: int = 0  # ESync: most queries unanswered at once (1 = every answer was waited for)
    # the job's final global model, pulled by every worker after the last step
    # (see SyncMode.finish): equal digests mean every worker ends with the same model
    final_model_sha256: str = ""
    final_model_keys: int = 0
    # per round (ESync): blocked time (State Server waits + push/pull), queries
    # sent, replies received, aborted iterations, the rank the State Server
    # took for the slowest device, and when the round ended
    round_blocked_s: list = dataclasses.field(default_factory=list)
    round_queries: list = dataclasses.field(default_factory=list)
    round_replies: list = dataclasses.field(default_factory=list)
    round_aborted: list = dataclasses.field(default_factory=list)
    round_slowest: list = dataclasses.field(default_factory=list)
    round_end_s: list = dataclasses.field(default_factory=list)  # seconds since training started
    # ESync: when each round's push/pull began, was issued and finished (seconds since training
    # started); with start_clock_s (the clock at that start: time.monotonic, one clock for every
    # process of a machine) the rounds of all workers line up, so the wait for the last push shows
    round_exchange_start_s: list = dataclasses.field(default_factory=list)
    round_exchange_issued_s: list = dataclasses.field(default_factory=list)
    round_exchange_end_s: list = dataclasses.field(default_factory=list)
    start_clock_s: float = 0.0
    deadline_pushes: object = None   # ESync --round-deadline on the cluster: [round, share] of every delta pushed
    late_memory: object = None   # ESync --late-memory on the cluster: {"pushes": its memory pushes, "pulls": keeper's}


    def as_dict(self):
        out = dataclasses.asdict(self)
        total = self.compute_s + self.wait_s
        out["compute_ratio"] = self.compute_s / total if total > 0 else None
        if self.deadline_pushes is None:   # only where a deadline ran: the other modes' records are unchanged
            del out["deadline_pushes"]
        if self.late_memory is None:
            del out["late_memory"]
        return out
