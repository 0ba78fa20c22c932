"""ESync's State Server rule (Algorithm 2 of the paper) as pure code.

Every time is a float on the *State Server's* monotonic clock, passed in by the
caller; nothing here reads a clock, so the rule behaves the same in unit tests,
in a simulator and behind ZeroMQ.

Record of device r: (rank, local iterations k, capability c, last finish time
t_e, ready, round). The slowest device is the one with the largest c. A device
that has not reported a capability yet counts as slowest: Algorithm 1 measures c
with a test batch before the first query, so until then the others cannot know
how long to wait for it.

What t_e + c predicts. The State Server sees a device's iteration end only when
its message arrives, one-way latency d later; its next query arrives d after
its next iteration ends, so d cancels and the prediction is of that arrival.
The capability is compute + round trip (§4.2, so a device on a slow link counts
as slow): the time from one query's arrival to the next for a device that waits
for each answer before its next iteration, as Algorithm 1's blocking query
does. A device that starts its next iteration at once -- after RESET, which
workers send without waiting (protocol v2), or after a query with delayed ACKs
-- is a round trip ahead of that, so it reports the round trip it does not wait
in ``since_finish``; the caller sets t_e = receipt - since_finish, and t_e + c
is again the arrival of its next query. (Without it, the slowest device's
RESET-based prediction was one round trip late, and with blocking queries fast
devices started iterations that the slowest then waited for.)

QUERY-STATE(r, k, c, t_e) at time ``now`` answers

* NOT-READY when k == 0, or the slowest device has not finished the pull of the
  previous round yet (its round is behind the querying device's);
* READY when the querying device is the slowest, or the slowest is already
  ready, or ``rest_time(r) + epsilon > rest_time(slowest)`` with ``rest_time =
  c - (now - t_e)``: the querying device's next query would arrive later than
  ε before the slowest's, so it could not finish another iteration before the
  slowest one is ready. With a blocking query t_e is ``now`` (less the moments
  between the iteration's end and the query's send) and the left side is
  Algorithm 2's ``c + epsilon``;
* NOT-READY otherwise.

RESET(r, t, t_e) records that device r pulled the global model of round t and
starts a new round with k = 0; t_e is the RESET's receipt less the round trip
the device does not wait.

Cost: a decision is O(log N) amortized in the number of devices N. The slowest
device is kept in a :class:`SlowestIndex` (a heap with lazy invalidation)
instead of being searched for; :func:`find_slowest` remains the definition
(and the reference the unit tests compare the index against).
"""
import dataclasses
import heapq
import math

from ..errors import ProtocolError
from . import wire as w

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
    last_finish: float = 0.0      # t_e, State Server clock, seconds: its next query is expected at t_e + c
    ready: bool = False
    round: int = 0


def _slowness(rec):
    return (rec.capability, -rec.rank)


def find_slowest(records):
    """The record with the largest capability; ties go to the lowest rank (O(N))."""
    return max(records, key=_slowness)


class LazyHeap:
    """Items with changing keys, the one with the smallest ``(key, item)`` first.

    A binary heap with lazy invalidation: :meth:`set` pushes a new entry and
    leaves the item's old one behind; stale entries are dropped when they
    surface at the top. When stale entries outnumber live ones the heap is
    rebuilt, so memory stays O(N) and :meth:`set`, :meth:`discard` and
    :meth:`peek` cost O(log N) amortized. Keys of one heap must be mutually
    comparable, items too (ties between keys go to the smaller item).
    """

    def __init__(self, items=()):
        self._key = dict(items)  # item -> key
        self._heap = []
        self._rebuild()

    def __len__(self):
        return len(self._key)

    def __contains__(self, item):
        return item in self._key

    def _rebuild(self):
        self._heap = [(key, item) for item, key in self._key.items()]
        heapq.heapify(self._heap)

    def set(self, item, key):
        """Add ``item`` with ``key``, or change its key."""
        keys = self._key
        if keys.get(item, _MISSING) == key:
            return
        keys[item] = key
        heap = self._heap
        _heappush(heap, (key, item))
        if len(heap) > 2 * len(keys) + 16:
            self._rebuild()

    def discard(self, item):
        """Remove ``item`` if present."""
        if self._key.pop(item, _MISSING) is not _MISSING and len(self._heap) > 2 * len(self._key) + 16:
            self._rebuild()

    def peek(self):
        """``(key, item)`` of the smallest, or None when empty."""
        heap, keys = self._heap, self._key
        while heap:
            top = heap[0]
            if keys.get(top[1], _MISSING) == top[0]:
                return top
            _heappop(heap)
        return None

    def pop(self):
        """Remove and return ``(key, item)`` of the smallest, or None when empty."""
        top = self.peek()
        if top is not None:
            heapq.heappop(self._heap)
            del self._key[top[1]]
        return top


_MISSING = object()
_heappush, _heappop = heapq.heappush, heapq.heappop


class SlowestIndex(LazyHeap):
    """The slowest of a changing set of ranks, ordered as :func:`find_slowest`
    orders them (largest capability, ties to the lowest rank), in O(log N)."""

    def __init__(self, items=()):
        super().__init__((rank, -float(capability)) for rank, capability in items)

    def set(self, rank, capability):
        """Add ``rank`` or change its capability (seconds per iteration)."""
        super().set(rank, -capability)

    def top(self):
        """The slowest rank, or None when empty."""
        top = self.peek()
        return None if top is None else top[1]


def rest_time(record, now):
    """Seconds from ``now`` until the query that ends ``record``'s current
    iteration is expected at the State Server (t_e + c - now)."""
    return record.capability - (now - record.last_finish)


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

    The slowest device is tracked in indexes that :meth:`query` keeps up to
    date: change a record's capability only through :meth:`query`.

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
        self._slowest = SlowestIndex((r, math.inf) for r in ranks)  # over every record
        self._slowest_present = SlowestIndex()                      # over the ranks marked present

    def set_present(self, rank, present):
        """Mark ``rank`` present or absent for ``query(..., present_only=True)``.

        Raises:
            KeyError: for a rank that is not part of the job.
        """
        record = self.record(rank)
        if present:
            self._slowest_present.set(rank, record.capability)
        else:
            self._slowest_present.discard(rank)

    def is_present(self, rank):
        """True for a rank marked present (:meth:`set_present`): registered and still training."""
        return rank in self._slowest_present

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

    def query(self, rank, local_iters, capability, last_finish, now, among=None, present_only=False,
              min_iters=None):
        """QUERY-STATE: True for READY, False for NOT-READY.

        Args:
            rank: the querying device.
            local_iters: k, local iterations done in the current round.
            capability: c, the device's latest seconds per local iteration.
            last_finish: t_e (server clock): when its last iteration finished,
                less the round trip it does not wait before its next one
                (see the module's docstring); its next query is expected
                at t_e + c.
            now: the current server clock.
            among: the ranks to consider when looking for the slowest device
                (default: all). A State Server that was restarted passes the
                ranks that registered with it: the others may be blocked in
                an aggregation that waits for the querying device. Costs
                O(len(among)).
            present_only: consider only the ranks marked with
                :meth:`set_present` (and the querying one): the same as
                ``among`` = those ranks, in O(log N).
            min_iters: ESync's ``--round-length``: a function of a capability
                giving the fewest local iterations a device of it does in a
                round (:func:`mxhet.policy.deadline.min_local_iters`). A device
                below its count is NOT-READY and its record not marked ready,
                and the slowest device is expected READY only after its own
                count: ``rest_time`` counts its iterations still to do, not one.
                None (the default): 1 for every device, Algorithm 2 as in the
                paper.

        Raises:
            KeyError: for an unknown rank.
            ValueError: for a bad k or c, or both ``among`` and ``present_only``.
        """
        if local_iters < 0:
            raise ValueError("local_iters must be >= 0, got %r" % (local_iters,))
        if not (math.isfinite(capability) and capability >= 0):
            raise ValueError("capability must be a finite number of seconds >= 0, got %r" % (capability,))
        if among is not None and present_only:
            raise ValueError("pass either among or present_only, not both")
        records = self.records
        current = records.get(rank)
        if current is None:
            current = self.record(rank)   # raises KeyError naming the rank
        current.local_iters = local_iters
        current.capability = capability = float(capability)
        current.last_finish = float(last_finish)
        # LazyHeap.set with the key SlowestIndex.set stores (one call less per index)
        LazyHeap.set(self._slowest, rank, -capability)
        present = self._slowest_present
        if rank in present:
            LazyHeap.set(present, rank, -capability)
        if among is not None:
            slowest = find_slowest([records[k] for k in among if k in records] + [current])
        elif present_only:
            top = present.peek()
            if top is None:
                slowest = current
            else:   # max(records[top], current, key=_slowness): the first of equals
                other = records[top[1]]
                slowest = other if (other.capability, -other.rank) >= (capability, -rank) else current
        else:
            slowest = records[self._slowest.peek()[1]]
        if local_iters == 0 or slowest.round < current.round:
            return False
        slowest_left = 1   # the slowest's iterations until its READY, the last reported one's end on
        if min_iters is not None:
            if local_iters < min_iters(capability):
                return False   # not marked ready: the others take the slowest's ready for the round's end
            if slowest.round == current.round:
                slowest_left = max(1, min_iters(slowest.capability) - slowest.local_iters)
        # rest_time(current) + ε > rest_time(slowest), inline (the hot path)
        if (current is slowest or slowest.ready
                or capability - (now - current.last_finish) + self.epsilon
                > slowest_left * slowest.capability - (now - slowest.last_finish)):
            current.ready = True
            return True
        return False

    def reset(self, rank, round_, finish_time):
        """RESET-STATE-SERVER: ``rank`` pulled the model of round ``round_``;
        ``finish_time`` is its new t_e (server clock): the RESET's receipt less
        the round trip the device does not wait before its first iteration."""
        current = self.record(rank)
        if round_ < current.round:
            raise ValueError("rank %d reset to round %d after round %d" % (rank, round_, current.round))
        current.round = int(round_)
        current.ready = False
        current.local_iters = 0
        current.last_finish = float(finish_time)

    def slowest_rank(self):
        """The slowest device over every record (O(log N) amortized)."""
        return self._slowest.top()

    def slowest_present_rank(self):
        """The slowest device among the ranks marked present (:meth:`set_present`), or
        None when none is: the one ``query(..., present_only=True)`` decides against."""
        return self._slowest_present.top()


# -- ESync's wire records (the plugin: mxhet.control.rules.ESyncRule) -------------------------


@w.reply_record
class QueryReply(w.Reply):
    """The answer to :class:`Query`: ``ready`` (aggregate now), the ``round``
    asked about (under ``--round-deadline``, a late device's round its delta
    enters), ``slowest`` the rank the State Server took for the slowest device
    (-1 when it does not apply), ``stop`` once the job decided to stop after the
    previous round (v2); under ``--round-deadline``, READY also carries the
    round's members (``target``) and this device's share (``weight``); under
    ``--late-memory`` whether this device's delta is to be remembered
    (``remember``: it is late) and, for the round's keeper, the absent devices'
    memories it adds (``memory``: rank, the round the remembered delta entered,
    rank, ... by rank) at ``memory_share`` each (:mod:`mxhet.policy.deadline`)."""
    TYPE = "query_reply"
    ready: bool = False
    round: int = 0
    slowest: int = -1
    stop: bool = False
    target: int = 0
    weight: float = 0.0
    remember: bool = False
    memory: tuple = ()
    memory_share: float = 0.0
    CHECKS = {"ready": w.check_bool, "round": w.integer(), "slowest": w.integer(-1), "stop": w.check_bool,
              "target": w.integer(), "weight": w.check_fraction, "remember": w.check_bool,
              "memory": w.check_pairs, "memory_share": w.check_fraction}


_QUERY_REPLY_FIELDS = {f.name: (0 if f.name == "seq" else f.default) for f in dataclasses.fields(QueryReply)}


def query_reply(seq, ready, round_, slowest):
    """``QueryReply(seq=seq, ready=ready, round=round_, slowest=slowest)``, made without the frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field: a fifth of a query's handling)."""
    reply = object.__new__(QueryReply)
    fields = reply.__dict__
    fields.update(_QUERY_REPLY_FIELDS)
    fields["seq"] = seq
    fields["ready"] = ready
    fields["round"] = round_
    fields["slowest"] = slowest
    return reply


_INCARNATION_LIMIT = 2 ** 53


def _fast_query(d):
    """True when a decoded Query's fields pass :meth:`Query.validate` (checked inline, for the hot
    path); False when they may not, and validate() then decides and says why. Exact types only:
    the values come from the JSON parser (an int ``c``, say, takes the slow path)."""
    rank, seq, incarnation, round_, k, c, since, loss = (d["rank"], d["seq"], d["incarnation"], d["round"],
                                                         d["k"], d["c"], d["since_finish"], d["loss"])
    return (type(rank) is int and rank >= 0 and type(seq) is int and seq >= 0 and type(incarnation) is int
            and 0 <= incarnation < _INCARNATION_LIMIT and type(round_) is int and round_ >= 0
            and type(k) is int and k >= 0 and type(c) is float and 0.0 <= c < math.inf
            and type(since) is float and 0.0 <= since < math.inf
            and type(loss) is float and (loss == NO_LOSS or 0.0 <= loss < math.inf))


NO_LOSS = -1.0
"""A :class:`Query`'s ``loss`` when it carries none."""


def check_query_loss(name, value):
    """A query's loss: a finite number >= 0, or :data:`NO_LOSS`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            value == NO_LOSS or 0 <= value < math.inf):
        raise ProtocolError("field %r must be a finite number >= 0 or %r (none), got %r" % (name, NO_LOSS, value))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Query(w.Request):
    """QUERY-STATE(r, k, c, t_e); the State Server sets t_e = receipt -
    ``since_finish``: the seconds since the iteration ended, plus the part of
    the round trip the worker does not wait for the answer before its next
    iteration (all of it with delayed ACKs; see the module's docstring).
    ``loss`` (v5): under ``--wait-needed``, the device's training loss on the
    global model it last pulled, measured on its first batch from it (its
    first query after the pull carries it; :data:`NO_LOSS` otherwise, and
    from a v4 or older worker; :mod:`mxhet.policy.needed`)."""
    TYPE = "query"
    REPLY = QueryReply
    BEFORE_V5 = {"loss": NO_LOSS}
    fast_valid = staticmethod(_fast_query)
    round: int
    k: int
    c: float
    since_finish: float
    loss: float = NO_LOSS
    CHECKS = {"round": w.integer(), "k": w.integer(), "c": w.check_seconds, "since_finish": w.check_seconds,
              "loss": check_query_loss}


@w.reply_record
class ResetReply(w.Reply):
    """The answer to :class:`Reset`: its ``round`` and the job's decision to ``stop`` after it."""
    TYPE = "reset_reply"
    round: int = 0
    stop: bool = False
    CHECKS = {"round": w.integer(), "stop": w.check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reset(w.Request):
    """RESET-STATE-SERVER(r, t): the worker pulled the model of round ``round``.

    ``want_stop`` asks to end training; the State Server turns the wishes of all
    workers into one decision per round, so every worker stops after the same
    round (a worker that stops alone would hang the others' next push).
    ``since_finish`` is the round trip the worker does not wait for the answer
    (it starts its first iteration at once): t_e = receipt - ``since_finish``,
    as for :class:`Query` (v3; 0 when a v1 or v2 worker leaves it out).
    """
    TYPE = "reset"
    REPLY = ResetReply
    BEFORE_V3 = {"since_finish": 0.0}
    round: int
    want_stop: bool
    since_finish: float = 0.0
    CHECKS = {"round": w.integer(1), "want_stop": w.check_bool, "since_finish": w.check_seconds}
