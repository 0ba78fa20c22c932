"""Control-plane messages: small, versioned JSON records, validated on receipt.

Never pickle on the wire. Every request carries the protocol version ``v``, a
``type``, the sender's ``rank`` and a per-sender sequence number ``seq``; the
reply echoes ``seq``. Durations are sent instead of instants, so the workers'
clocks never enter a decision: the State Server converts ``since_finish`` into
its own clock at receipt.

The codec is orjson (a compiled JSON library): it parses a request about five
times and writes a reply about ten times faster than the standard library's
json, which made up a fifth of the State Server's time per query. It is also
stricter on receipt: only UTF-8, no NaN/Infinity literals, integers within 64
bits. orjson would write a non-finite float as null, so :func:`encode`
refuses those itself.
"""
import dataclasses
import math

import orjson

from ..errors import ProtocolError

VERSION = 3
"""Written in every message. v2: workers send RESET without waiting for its
answer, and the answer to a query carries ``stop`` once the job decided to
stop after the previous round; a v1 worker (which waits for RESET's answer)
is still served. v3: RESET carries ``since_finish`` (the round trip the worker
does not wait before its next iteration); a v1 or v2 RESET, without it, is
read with 0, its old meaning."""
SUPPORTED_VERSIONS = frozenset((1, 2, 3))
MAX_MESSAGE_BYTES = 16 * 1024
"""Cap enforced on the socket (ZMQ_MAXMSGSIZE) and again when decoding."""


def _check_int(name, value, minimum=0):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ProtocolError("field %r must be an integer >= %d, got %r" % (name, minimum, value))


MAX_COUNTS = 8
"""Numbers a count vector (:class:`RoundEnter`) may carry at most."""


def _check_counts(message):
    """Check ``message.counts`` and make it a tuple (JSON decodes a list), so a decoded message equals the sent one."""
    value = message.counts
    if (not isinstance(value, (list, tuple)) or len(value) > MAX_COUNTS
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value)):
        raise ProtocolError("field 'counts' must be a list of at most %d finite numbers" % MAX_COUNTS)
    object.__setattr__(message, "counts", tuple(value))


def _check_seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ProtocolError("field %r must be a finite number of seconds >= 0, got %r" % (name, value))


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise ProtocolError("field %r must be true or false, got %r" % (name, value))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """Fields of every request: the sender's rank, the incarnation of its
    process (a random number drawn at start, so a restarted worker is told
    apart from a replay) and a per-incarnation sequence number."""
    TYPE = ""
    rank: int
    seq: int
    incarnation: int = 0

    def validate(self):
        _check_int("rank", self.rank)
        _check_int("seq", self.seq)
        _check_int("incarnation", self.incarnation)
        if self.incarnation >= 2 ** 53:
            raise ProtocolError("field 'incarnation' must be below 2**53")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Register(Request):
    """A worker joins: its PS-LITE rank, the launcher's slot, and the signature
    of its model (a digest of the parameters' shapes and dtypes; "" = unchecked)."""
    TYPE = "register"
    slot: int
    signature: str = ""
    round: int = 0   # > 0 when a worker registers again with a restarted State Server

    def validate(self):
        super().validate()
        _check_int("slot", self.slot)
        _check_int("round", self.round)
        if not isinstance(self.signature, str) or len(self.signature) > 128:
            raise ProtocolError("field 'signature' must be a string of at most 128 characters")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Query(Request):
    """QUERY-STATE(r, k, c, t_e); the State Server sets t_e = receipt -
    ``since_finish``: the seconds since the iteration ended, plus the part of
    the round trip the worker does not wait for the answer before its next
    iteration (all of it with delayed ACKs; see :mod:`mxhet.control.state_rule`)."""
    TYPE = "query"
    round: int
    k: int
    c: float
    since_finish: float

    def validate(self):
        super().validate()
        _check_int("round", self.round)
        _check_int("k", self.k)
        _check_seconds("c", self.c)
        _check_seconds("since_finish", self.since_finish)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reset(Request):
    """RESET-STATE-SERVER(r, t): the worker pulled the model of round ``round``.

    ``want_stop`` asks to end training; the State Server turns the wishes of all
    workers into one decision per round, so every worker stops after the same
    round (a worker that stops alone would hang the others' next push).
    ``since_finish`` is the round trip the worker does not wait for the answer
    (it starts its first iteration at once): t_e = receipt - ``since_finish``,
    as for :class:`Query` (v3; 0 when a v1 or v2 worker leaves it out).
    """
    TYPE = "reset"
    round: int
    want_stop: bool
    since_finish: float = 0.0

    def validate(self):
        super().validate()
        _check_int("round", self.round, minimum=1)
        _check_bool("want_stop", self.want_stop)
        _check_seconds("since_finish", self.since_finish)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Clock(Request):
    """SSP: the worker finished ``clock`` iterations and asks to start the next.

    The State Server answers when the worker is at most ``staleness``
    iterations ahead of the slowest worker still in the job.
    """
    TYPE = "clock"
    clock: int

    def validate(self):
        super().validate()
        _check_int("clock", self.clock)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Commit(Request):
    """ADSP: the worker has made ``commits`` commits; ``loss`` is its recent
    training loss (-1 when it has none yet), ``commit_cost`` the seconds one
    commit takes it. The answer carries its commit target."""
    TYPE = "commit"
    commits: int
    loss: float
    commit_cost: float

    def validate(self):
        super().validate()
        _check_int("commits", self.commits)
        if isinstance(self.loss, bool) or not isinstance(self.loss, (int, float)) or not math.isfinite(self.loss):
            raise ProtocolError("field 'loss' must be a finite number, got %r" % (self.loss,))
        _check_seconds("commit_cost", self.commit_cost)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdspRecord(Request):
    """ADSP: rank 0 asks for the record of the commit-rate search (for its run's
    summary) after the last commit. The record is a JSON text, sent in pages:
    the answer's ``payload`` holds its characters from ``start`` on (at most
    :data:`RECORD_PAGE`) and ``k`` the text's whole length; the text is fixed
    when a page with ``start`` 0 is asked for."""
    TYPE = "adsp_record"
    start: int = 0

    def validate(self):
        super().validate()
        _check_int("start", self.start)


RECORD_PAGE = 6000
"""Characters of a record per answer: escaped into JSON (at most two bytes a character: the record is ASCII
JSON) the answer stays below :data:`MAX_MESSAGE_BYTES`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Notify(Request):
    """nodelay: the worker holds ``pending`` (>= 1) gradients for transfer round
    ``round`` (Algorithm 1, line 16). The answer, deferred until the master's
    rule requests the transfer, has ``ready`` true and ``stop`` true when it is
    the job's last round; ``want_stop`` asks for that."""
    TYPE = "notify"
    round: int
    pending: int
    want_stop: bool

    def validate(self):
        super().validate()
        _check_int("round", self.round)
        _check_int("pending", self.pending, minimum=1)
        _check_bool("want_stop", self.want_stop)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Merged(Request):
    """nodelay: the worker received the global model merged in round ``round``."""
    TYPE = "merged"
    round: int

    def validate(self):
        super().validate()
        _check_int("round", self.round)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Heartbeat(Request):
    """The worker's process is alive (sent by its I/O thread; no reply)."""
    TYPE = "heartbeat"

    def validate(self):
        super().validate()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReduceJoin(Request):
    """Partial Reduce: the worker's settings of the controller (every worker sends
    the same; the first creates the controller): group size P, dynamic weights
    with EMA factor ``alpha``, the group filter and its window T (0: default)."""
    TYPE = "reduce_join"
    group_size: int
    dynamic: bool
    alpha: float
    avoid_frozen: bool
    window: int

    def validate(self):
        super().validate()
        _check_int("group_size", self.group_size, minimum=2)
        _check_bool("dynamic", self.dynamic)
        _check_bool("avoid_frozen", self.avoid_frozen)
        _check_int("window", self.window)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 <= self.alpha < 1:
            raise ProtocolError("field 'alpha' must be a number in [0, 1), got %r" % (self.alpha,))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReduceReady(Request):
    """Partial Reduce: READY after a local step at iteration number ``k``. The
    answer waits until the worker is in a group (or carries ``stop``)."""
    TYPE = "reduce_ready"
    k: int
    want_stop: bool

    def validate(self):
        super().validate()
        _check_int("k", self.k)
        _check_bool("want_stop", self.want_stop)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReducePushed(Request):
    """Partial Reduce: the worker's weighted model is in group ``group``'s slot.
    The answer waits until every member's is (then the slot holds the sum)."""
    TYPE = "reduce_pushed"
    group: int

    def validate(self):
        super().validate()
        _check_int("group", self.group)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bye(Request):
    """The worker leaves the job (answered with ``ready`` in G-CADA when the
    sender's group has no member left)."""
    TYPE = "bye"

    def validate(self):
        super().validate()


@dataclasses.dataclass(frozen=True, kw_only=True)
class _GroupRequest(Request):
    """G-CADA (:mod:`mxhet.control.gcada`): a request about ``iteration`` from a member of ``group``."""
    iteration: int
    group: int

    def validate(self):
        super().validate()
        _check_int("iteration", self.iteration)
        _check_int("group", self.group)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupBegin(_GroupRequest):
    """G-CADA: the worker is ready for iteration ``iteration`` or a later one.
    The answer (deferred until that iteration's groups are selected) names the
    iteration in ``round``; ``ready``: download θ and compute; ``target`` 1: no
    group is selected, this worker triggers the servers' step; ``stop``: the
    job ends. ``groups``, ``max_delay`` and ``c`` are the job's rule (the same
    from every worker); ``smoothness`` is L_g of the worker's group in eq. (9)
    (1: folded into c; the same from every member); ``want_stop`` asks to end
    training."""
    TYPE = "group_begin"
    groups: int
    max_delay: int
    c: float
    want_stop: bool
    smoothness: float = 1.0

    def validate(self):
        super().validate()
        _check_int("groups", self.groups, minimum=1)
        _check_int("max_delay", self.max_delay, minimum=1)
        _check_seconds("c", self.c)  # a finite number >= 0
        _check_bool("want_stop", self.want_stop)
        _check_seconds("smoothness", self.smoothness)
        if not self.smoothness > 0:
            raise ProtocolError("field 'smoothness' must be > 0, got %r" % (self.smoothness,))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupWatch(_GroupRequest):
    """G-CADA: answered when a member of the group claims its upload of
    ``iteration``: ``ready`` false tells the others to drop their work at once."""
    TYPE = "group_watch"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupDone(_GroupRequest):
    """G-CADA: the worker computed its gradient; ``ready`` true: it is the
    group's first finisher and uploads, false: drop it."""
    TYPE = "group_done"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupUploaded(_GroupRequest):
    """G-CADA: the first finisher's gradient is on the servers; ``ready`` true:
    it was the iteration's last upload and this worker triggers the step."""
    TYPE = "group_uploaded"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupStepped(_GroupRequest):
    """G-CADA: the servers applied the step of ``iteration`` and computed
    ``delta_sq`` = ‖θ^{k+1} − θ^k‖² and, per group, ``group_sq`` =
    ‖θ^{k+1} − θ^{(g)}‖² (θ^{(g)}: the model of the group's latest upload)."""
    TYPE = "group_stepped"
    delta_sq: float
    group_sq: list

    def validate(self):
        super().validate()
        _check_seconds("delta_sq", self.delta_sq)  # a finite number >= 0
        if not isinstance(self.group_sq, list) or len(self.group_sq) > 1024:
            raise ProtocolError("field 'group_sq' must be a list of at most 1024 numbers")
        for value in self.group_sq:
            _check_seconds("group_sq", value)


@dataclasses.dataclass(frozen=True)
class Reply:
    """The State Server's answer to any request.

    ``ok`` is False for a refused request, with ``error`` saying why. ``ready``
    answers a query, with ``slowest`` the rank the State Server took for the
    slowest device (-1 when it does not apply); ``stop`` answers a reset, and
    a query of a round after which the job decided to stop (v2);
    ``target`` (total commits due by the next checkpoint) and ``period_left``
    (seconds until it) answer an ADSP commit report; ``payload`` and ``k``
    answer an ADSP record request (:class:`AdspRecord`). The G-CADA requests
    (``Group*``) say in their docstrings what ``ready``, ``round`` and
    ``target`` mean for them. ``code`` is
    ``not_registered`` when the State Server does not know the sender.
    """
    TYPE = "reply"
    seq: int
    ok: bool = True
    ready: bool = False
    stop: bool = False
    round: int = 0
    slowest: int = -1
    target: int = 0
    period_left: float = 0.0
    error: str = ""
    code: str = ""    # machine-readable kind of error: "not_registered", or "" 
    # Partial Reduce's answer to READY: round = the group's id, its slot of keys
    # on the servers, this member's weight and the iteration number to go on with
    # (and target = the zero pushes it adds to a group smaller than P)
    group_slot: int = -1
    weight: float = 0.0
    k: int = 0
    payload: str = ""   # a page of an ADSP search record (AdspRecord)
    counts: tuple = ()  # the round rendezvous' summed count vectors (RoundEnter)

    def validate(self):
        _check_int("seq", self.seq)
        _check_bool("ok", self.ok)
        _check_bool("ready", self.ready)
        _check_bool("stop", self.stop)
        _check_int("round", self.round)
        _check_int("slowest", self.slowest, minimum=-1)
        _check_int("target", self.target)
        _check_seconds("period_left", self.period_left)
        _check_int("group_slot", self.group_slot, minimum=-1)
        _check_int("k", self.k)
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0 <= self.weight <= 1:
            raise ProtocolError("field 'weight' must be a number in [0, 1], got %r" % (self.weight,))
        if not isinstance(self.code, str) or len(self.code) > 32:
            raise ProtocolError("field 'code' must be a short string")
        if not isinstance(self.error, str):
            raise ProtocolError("field 'error' must be a string")
        if not isinstance(self.payload, str) or len(self.payload) > RECORD_PAGE:
            raise ProtocolError("field 'payload' must be a string of at most %d characters" % RECORD_PAGE)
        _check_counts(self)


_REPLY_FIELDS = {f.name: (0 if f.name == "seq" else f.default) for f in dataclasses.fields(Reply)}


def query_reply(seq, ready, round_, slowest):
    """``Reply(seq=seq, ready=ready, round=round_, slowest=slowest)``, made without the frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field: a fifth of a query's handling)."""
    reply = object.__new__(Reply)
    fields = reply.__dict__
    fields.update(_REPLY_FIELDS)
    fields["seq"] = seq
    fields["ready"] = ready
    fields["round"] = round_
    fields["slowest"] = slowest
    return reply


REQUEST_TYPES = {cls.TYPE: cls for cls in (Register, Query, Reset, Clock, Commit, Notify, Merged, Heartbeat, Bye,
                                            AdspRecord)}
REPLAYABLE = {Register.TYPE, Reset.TYPE, Clock.TYPE, Commit.TYPE, Bye.TYPE, Query.TYPE, Notify.TYPE, Merged.TYPE}
"""Requests whose repeat (same incarnation and sequence number) gets the first answer again."""
_REDUCE_TYPES = (ReduceJoin, ReduceReady, ReducePushed)   # Partial Reduce (mxhet.control.preduce)
REQUEST_TYPES.update({cls.TYPE: cls for cls in _REDUCE_TYPES})
REPLAYABLE.update(cls.TYPE for cls in _REDUCE_TYPES)
_GROUP_TYPES = (GroupBegin, GroupWatch, GroupDone, GroupUploaded, GroupStepped)
REQUEST_TYPES.update({cls.TYPE: cls for cls in _GROUP_TYPES})
REPLAYABLE.update(cls.TYPE for cls in _GROUP_TYPES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundEnter(Request):
    """A synchronous round on ``dist_async`` (:mod:`mxhet.control.membership`):
    the worker enters round ``round`` with its stop ballot. The answer waits
    until every worker still training has entered: ``target`` is the number of
    members, ``k`` how many of them want to stop after this round (``stop``: any),
    ``counts`` the element-wise sum of the members' ``counts`` (() if none sent any)."""
    TYPE = "round_enter"
    round: int
    want_stop: bool
    counts: tuple = ()   # ESync's count vector (mxhet.policy.aggregation); the answer's ``counts`` sums them

    def validate(self):
        super().validate()
        _check_int("round", self.round)
        _check_bool("want_stop", self.want_stop)
        _check_counts(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundDone(Request):
    """The worker's push of round ``round`` is applied on the servers. The answer
    waits until every member's is or the member is gone; ``ready``: every member
    pushed (the round is complete)."""
    TYPE = "round_done"
    round: int

    def validate(self):
        super().validate()
        _check_int("round", self.round)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundFinish(Request):
    """The worker stopped training (the job's stop, or its script left the loop).
    The answer waits until no worker trains any more: the global model is final."""
    TYPE = "round_finish"

    def validate(self):
        super().validate()


@dataclasses.dataclass(frozen=True, kw_only=True)
class MembershipRecord(Request):
    """Rank 0 asks for the round rendezvous' record (each leave and join, the rounds
    each rank took part in, the slots; for its run's summary), as JSON text in pages
    as :class:`AdspRecord`: ``payload`` holds the characters from ``start`` on, ``k``
    the whole length; the text is fixed when a page with ``start`` 0 is asked for."""
    TYPE = "membership_record"
    start: int = 0

    def validate(self):
        super().validate()
        _check_int("start", self.start)


_ROUND_TYPES = (RoundEnter, RoundDone, RoundFinish)   # the round rendezvous (mxhet.control.membership)
REQUEST_TYPES[MembershipRecord.TYPE] = MembershipRecord   # read-only: no replay needed
REQUEST_TYPES.update({cls.TYPE: cls for cls in _ROUND_TYPES})
REPLAYABLE.update(cls.TYPE for cls in _ROUND_TYPES)
ALL_TYPES = dict(REQUEST_TYPES, **{Reply.TYPE: Reply})
_FIELDS = {cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in ALL_TYPES.values()}
_FLOAT_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls) if f.type in (float, "float"))
                 for cls in ALL_TYPES.values()}


_INCARNATION_LIMIT = 2 ** 53
_ADDED_IN_V3 = {Reset: {"since_finish": 0.0}}
"""Fields a v1 or v2 sender leaves out, with the value that keeps its meaning."""


def _fast_query(d):
    """True when a decoded Query's fields pass :meth:`Query.validate` (checked inline, for the hot
    path); False when they may not, and validate() then decides and says why. Exact types only:
    the values come from the JSON parser (an int ``c``, say, takes the slow path)."""
    rank, seq, incarnation, round_, k, c, since = (d["rank"], d["seq"], d["incarnation"], d["round"], d["k"],
                                                   d["c"], d["since_finish"])
    return (type(rank) is int and rank >= 0 and type(seq) is int and seq >= 0 and type(incarnation) is int
            and 0 <= incarnation < _INCARNATION_LIMIT and type(round_) is int and round_ >= 0
            and type(k) is int and k >= 0 and type(c) is float and 0.0 <= c < math.inf
            and type(since) is float and 0.0 <= since < math.inf)


_FAST_VALID = {Query: _fast_query}
"""Inline checks of the most frequent requests; each implies its class's validate() passes
(tests/unit/test_messages_fast.py checks that on random fields)."""


def _plain(value):
    """orjson's hook for what it does not write itself: subclasses of float and int
    (numpy.float64, IntEnum), which the standard library's json wrote as numbers."""
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    raise TypeError("%s is not JSON serializable" % type(value).__name__)


def encode(message):
    """Serialize a message record to UTF-8 JSON bytes (fields in declaration order, then ``v`` and ``type``).

    Raises:
        ValueError: for a NaN or infinite float field (not valid JSON).
    """
    body = dict(message.__dict__)  # the fields (flat scalars), as dataclasses.asdict gives them, without its copies
    for name in _FLOAT_FIELDS[type(message)]:
        if not math.isfinite(body[name]):
            raise ValueError("field %r of a %s message is %r: not valid JSON" % (name, message.TYPE, body[name]))
    body["v"] = VERSION
    body["type"] = message.TYPE
    return orjson.dumps(body, default=_plain)


def decode(data, allowed=None):
    """Parse and validate bytes into a message record.

    Args:
        data: the raw frame.
        allowed: mapping of accepted type names to classes (default: all).

    Raises:
        ProtocolError: for anything that is not a valid message of an allowed
            type: too large, not UTF-8 JSON, wrong version, unknown type,
            missing or unknown fields, wrong field types or ranges.
    """
    allowed = ALL_TYPES if allowed is None else allowed
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError("message of %d bytes exceeds the %d-byte cap" % (len(data), MAX_MESSAGE_BYTES))
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:  # also for bytes that are not UTF-8
        raise ProtocolError("not a JSON message: %s" % exc) from None
    if not isinstance(body, dict):
        raise ProtocolError("a message must be a JSON object")
    version = body.pop("v", None)
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError("unsupported protocol version (expected one of %s)" % sorted(SUPPORTED_VERSIONS))
    kind = body.pop("type", None)
    cls = allowed.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError("unknown or unexpected message type; expected one of %s" % sorted(allowed))
    names = _FIELDS[cls]
    if version < 3 and cls in _ADDED_IN_V3:
        for name, value in _ADDED_IN_V3[cls].items():
            body.setdefault(name, value)
    if body.keys() != names:
        missing, unknown = sorted(names - set(body)), sorted(set(body) - names)
        raise ProtocolError("%s message: missing fields %s, unknown fields %s" % (cls.TYPE, missing, unknown))
    # The keys are exactly the fields: set them at once instead of one
    # object.__setattr__ each in the frozen dataclass's __init__ (a third of decoding).
    message = object.__new__(cls)
    message.__dict__.update(body)
    fast = _FAST_VALID.get(cls)
    if fast is None or not fast(body):
        message.validate()
    return message
