"""ESync's State Server rule (Algorithm 2 of the paper) as pure code.

Every time is a float on the *State Server's* monotonic clock, passed in by the
caller; nothing here reads a clock, so the rule behaves the same in unit tests,
in a simulator and behind ZeroMQ.

Record of device r: (rank, local iterations k, capability c, last finish time
t_e, ready, round). The slowest device is the one with the largest c. A device
that has not reported a capability yet counts as slowest: Algorithm 1 measures c
with a test batch before the first query, so until then the others cannot know
how long to wait for it.

QUERY-STATE(r, k, c, t_e) at time ``now`` answers

* NOT-READY when k == 0, or the slowest device has not finished the pull of the
  previous round yet (its round is behind the querying device's);
* READY when the querying device is the slowest, or the slowest is already
  ready, or ``c + epsilon > rest_time`` with ``rest_time = c_slowest - (now -
  t_e_slowest)``: the querying device could not finish another iteration before
  the slowest one is ready;
* NOT-READY otherwise.

RESET(r, t, t_e) records that device r pulled the global model of round t at
time t_e and starts a new round with k = 0.
"""
import dataclasses
import math

DEFAULT_EPSILON = 0.01
"""Algorithm 2's boundary constant ε, in seconds (see :class:`StateTable`).

Measured with ``mxhet-bench epsilon`` (3 workers, slowdown 1,1,10, small CNN,
2 cores; fast devices at about 23 ms per iteration, the slowest at about
0.35 s), two runs of each value: ε = 0, 0.01, 0.05, 0.2 s gave fast-device
compute ratios 0.76/0.72, 0.72/0.69, 0.63/0.67, 0.35/0.36. A larger ε idles
the fast devices up to ε per round; at ε = 0 they may start iterations they
cannot finish before the slowest is ready, holding up the round (one run had
11% fewer rounds, the other none: within noise). 10 ms, under half a fast
iteration, keeps most of the compute without betting on the estimate being
exact. The original ESync code used 0.5 s for 3.5 s iterations.
"""


@dataclasses.dataclass
class DeviceRecord:
    """State Server's record of one device (one worker)."""
    rank: int
    local_iters: int = 0
    capability: float = math.inf  # seconds per local iteration; inf = not reported yet
    last_finish: float = 0.0      # State Server clock, seconds
    ready: bool = False
    round: int = 0


def find_slowest(records):
    """The record with the largest capability; ties go to the lowest rank."""
    return max(records, key=lambda rec: (rec.capability, -rec.rank))


def rest_time(slowest, now):
    """Seconds until the slowest device is expected to finish its iteration."""
    return slowest.capability - (now - slowest.last_finish)


class StateTable:
    """Algorithm 2 over the records of all devices.

    Args:
        ranks: the ranks of all devices in the job.
        epsilon: ε of Algorithm 2 in seconds (> 0): how much earlier than the
            slowest device's expected finish a device may stop iterating. It
            absorbs the error of that estimate (jitter of iteration times, the
            query's own latency); too small and a fast device starts one more
            iteration that makes the round wait for it, too large and it idles
            up to ε. The default (10 ms) was chosen from measurements, see
            :data:`DEFAULT_EPSILON`.
        now: the clock reading at creation (State Server clock, seconds).

    Raises:
        ValueError: for an empty or duplicated rank list or a bad epsilon.
    """

    def __init__(self, ranks, epsilon=DEFAULT_EPSILON, now=0.0):
        ranks = list(ranks)
        if not ranks:
            raise ValueError("a State Server needs at least one device")
        if len(set(ranks)) != len(ranks):
            raise ValueError("duplicate ranks in %r" % (ranks,))
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError("epsilon must be a finite number of seconds >= 0, got %r" % (epsilon,))
        self.epsilon = float(epsilon)
        self.records = {r: DeviceRecord(rank=r, last_finish=now) for r in ranks}

    def record(self, rank):
        """The record of ``rank``.

        Raises:
            KeyError: for a rank that is not part of the job.
        """
        try:
            return self.records[rank]
        except KeyError:
            raise KeyError("rank %r is not part of this job (ranks %s)"
                           % (rank, sorted(self.records))) from None

    def query(self, rank, local_iters, capability, last_finish, now, among=None):
        """QUERY-STATE: True for READY, False for NOT-READY.

        Args:
            rank: the querying device.
            local_iters: k, local iterations done in the current round.
            capability: c, the device's latest seconds per local iteration.
            last_finish: t_e, when its last iteration finished (server clock).
            now: the current server clock.
            among: the ranks to consider when looking for the slowest device
                (default: all). A State Server that was restarted passes the
                ranks that registered with it: the others may be blocked in
                an aggregation that waits for the querying device.
        """
        if local_iters < 0:
            raise ValueError("local_iters must be >= 0, got %r" % (local_iters,))
        if not (math.isfinite(capability) and capability >= 0):
            raise ValueError("capability must be a finite number of seconds >= 0, got %r" % (capability,))
        current = self.record(rank)
        current.local_iters = local_iters
        current.capability = float(capability)
        current.last_finish = float(last_finish)
        candidates = [r for k, r in self.records.items() if among is None or k in among or k == rank]
        slowest = find_slowest(candidates)
        if local_iters == 0 or slowest.round < current.round:
            return False
        if (current is slowest or slowest.ready
                or current.capability + self.epsilon > rest_time(slowest, now)):
            current.ready = True
            return True
        return False

    def reset(self, rank, round_, finish_time):
        """RESET-STATE-SERVER: ``rank`` pulled the model of round ``round_``."""
        current = self.record(rank)
        if round_ < current.round:
            raise ValueError("rank %d reset to round %d after round %d" % (rank, round_, current.round))
        current.round = int(round_)
        current.ready = False
        current.local_iters = 0
        current.last_finish = float(finish_time)

    def slowest_rank(self):
        return find_slowest(self.records.values()).rank
