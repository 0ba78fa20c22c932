"""The State Server's wire format: small, versioned JSON records, validated on receipt.

Never pickle on the wire. Every request carries the protocol version ``v``, a
``type``, the sender's ``rank`` and a per-sender sequence number ``seq``; the
reply echoes ``seq``. Durations are sent instead of instants, so the workers'
clocks never enter a decision: the State Server converts ``since_finish`` into
its own clock at receipt.

This module holds what every record shares: the codec, the bases
:class:`Request` and :class:`Reply` (the generic answer: ``seq``, ``ok``,
``error``, ``code``; a refused request of any kind gets one), the paged
records (:class:`RecordRequest`, :class:`RecordPage`), the field checks a
record declares in its ``CHECKS`` (:func:`check_fields`) and the State Server's
own requests (register, heartbeat, goodbye). Each rule's requests and reply
records live in the rule's module and are listed by its plugin
(:mod:`mxhet.control.rules`); :mod:`mxhet.control.messages` gathers them all.

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

VERSION = 5
"""Written in every message. v2: workers send RESET without waiting for its
answer, and the answer to a query carries ``stop`` once the job decided to
stop after the previous round; a v1 worker (which waits for RESET's answer)
is still served. v3: RESET carries ``since_finish`` (the round trip the worker
does not wait before its next iteration); a v1 or v2 RESET, without it, is
read with 0, its old meaning. v4: each rule answers with its own reply record
(only the fields it answers); the requests are v3's. v5: QUERY carries
``loss`` (ESync's ``--wait-needed``); an older QUERY, without it, is read
with none."""
SUPPORTED_VERSIONS = frozenset((1, 2, 3, 4, 5))
MAX_MESSAGE_BYTES = 16 * 1024
"""Cap enforced on the socket (ZMQ_MAXMSGSIZE) and again when decoding."""


# -- field checks: each record names its fields' checks once, in its class's CHECKS (check_fields) ----
# A check is ``check(name, value)``: it raises ProtocolError naming the field, or returns None (or, for
# check_counts, the value to keep).

def check_int(name, value, minimum=0):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ProtocolError("field %r must be an integer >= %d, got %r" % (name, minimum, value))


MAX_COUNTS = 8
"""Numbers a count vector (a round rendezvous' ``counts``) may carry at most."""


def check_counts(name, value):
    """A count vector: returns it as a tuple (JSON decodes a list), so a decoded message equals the sent one."""
    if (not isinstance(value, (list, tuple)) or len(value) > MAX_COUNTS
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value)):
        raise ProtocolError("field 'counts' must be a list of at most %d finite numbers" % MAX_COUNTS)
    return tuple(value)


MAX_PAIRS = 512
"""Integer pairs a pair list (the late memory's ranks and versions) may carry at most."""


def check_pairs(name, value):
    """A flat list of integer pairs (``a0, b0, a1, b1, ...``, each >= 0): returns it as a tuple
    (JSON decodes a list), so a decoded message equals the sent one."""
    if (not isinstance(value, (list, tuple)) or len(value) % 2 or len(value) > 2 * MAX_PAIRS
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)):
        raise ProtocolError("field %r must be a flat list of at most %d pairs of integers >= 0" % (name, MAX_PAIRS))
    return tuple(value)


def check_seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ProtocolError("field %r must be a finite number of seconds >= 0, got %r" % (name, value))


def check_bool(name, value):
    if not isinstance(value, bool):
        raise ProtocolError("field %r must be true or false, got %r" % (name, value))


def check_fraction(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ProtocolError("field %r must be a number in [0, 1], got %r" % (name, value))


def check_below_one(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ProtocolError("field %r must be a number in [0, 1), got %r" % (name, value))


def check_finite(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError("field %r must be a finite number, got %r" % (name, value))


def check_positive(name, value):
    """A finite number > 0 (checked as :func:`check_seconds` first, so a negative one reads as such)."""
    check_seconds(name, value)
    if not value > 0:
        raise ProtocolError("field %r must be > 0, got %r" % (name, value))


def integer(minimum=0):
    """The check of an integer field >= ``minimum`` (a bool is no integer)."""
    return lambda name, value: check_int(name, value, minimum)


def text(maximum=None, says=None):
    """The check of a string field of at most ``maximum`` characters (None: any length);
    ``says`` what the error calls it (default: "a string of at most N characters")."""
    if says is None:
        says = "a string" if maximum is None else "a string of at most %d characters" % maximum

    def check(name, value):
        if not isinstance(value, str) or (maximum is not None and len(value) > maximum):
            raise ProtocolError("field %r must be %s" % (name, says))
    return check


def numbers(check, maximum):
    """The check of a list field of at most ``maximum`` values, each passing ``check``."""
    def check_list(name, value):
        if not isinstance(value, list) or len(value) > maximum:
            raise ProtocolError("field %r must be a list of at most %d numbers" % (name, maximum))
        for item in value:
            check(name, item)
    return check_list


def _check_incarnation(name, value):
    check_int(name, value)
    if value >= 2 ** 53:
        raise ProtocolError("field %r must be below 2**53" % name)


_CHECKS = {}   # record class -> ((field name, check), ...) of the class and its bases


def checks_of(cls):
    """The field checks of record class ``cls`` (cached): every ``CHECKS`` in its
    bases and itself, merged base first, so a base's fields are checked first."""
    checks = _CHECKS.get(cls)
    if checks is None:
        merged = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("CHECKS", {}))
        checks = _CHECKS[cls] = tuple(merged.items())
    return checks


def check_fields(message):
    """Run ``message``'s field checks (:func:`checks_of`). A check raises ProtocolError
    naming the bad field, or returns None, or the value to keep instead (a list made a tuple).

    Raises:
        ProtocolError: for the first field that fails its check.
    """
    fields = message.__dict__
    for name, check in _CHECKS.get(type(message)) or checks_of(type(message)):
        value = check(name, fields[name])
        if value is not None:
            object.__setattr__(message, name, value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """Fields of every request: the sender's rank, the incarnation of its
    process (a random number drawn at start, so a restarted worker is told
    apart from a replay) and a per-incarnation sequence number.

    Class attributes: ``TYPE`` (the wire name), ``REPLY`` (the record of a
    successful answer; a refusal is a generic :class:`Reply`), ``REPLAYABLE``
    (a repeat with the same incarnation and sequence number gets the first
    answer again), ``BEFORE_V3`` (fields a v1 or v2 sender leaves out, with
    the value that keeps its meaning), ``BEFORE_V5`` (the same for a v4 or
    older sender), ``CHECKS`` (field name -> check, for
    the fields the class adds: :func:`check_fields`) and ``fast_valid`` (an
    inline check of the decoded fields for the hottest requests, see :func:`decode`)."""
    TYPE = ""
    REPLY = None          # set below to Reply, the answer that says only ok
    REPLAYABLE = True
    BEFORE_V3 = {}
    BEFORE_V5 = {}
    CHECKS = {"rank": integer(), "seq": integer(), "incarnation": _check_incarnation}
    fast_valid = None
    rank: int
    seq: int
    incarnation: int = 0

    def validate(self):
        """Check every field (the ``CHECKS`` of the class and its bases).

        Raises:
            ProtocolError: naming the first bad field.
        """
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class Reply:
    """The State Server's generic answer: what every reply has.

    ``ok`` is False for a refused request (of any kind), with ``error`` saying
    why; ``code`` is ``not_registered`` when the State Server does not know the
    sender (``too_few_workers`` when a round rendezvous fell below its minimum).
    An accepted request whose answer says nothing more (SSP's CLOCK, say) gets
    one with ``ok`` True; a rule whose answer carries more has a record of its
    own, a subclass with only the fields that rule answers (and their ``CHECKS``,
    as a :class:`Request`'s)."""
    TYPE = "reply"
    # Not a field: a record whose rule decides the job's stop has ``stop`` of its own; any other answer,
    # a refusal included, reads as no stop (the simulator's RESET handler reads ``stop`` off a refused,
    # stale RESET: mxhet/sim/program.py's _send_reset).
    stop = False
    seq: int
    ok: bool = True
    error: str = ""
    code: str = ""    # machine-readable kind of error: "not_registered", "too_few_workers", or ""
    CHECKS = {"seq": integer(), "ok": check_bool, "code": text(32, "a short string"), "error": text()}

    def validate(self):
        """Check every field, as :meth:`Request.validate`."""
        check_fields(self)


Request.REPLY = Reply


def reply_record(cls):
    """Declare a rule's reply record: a frozen, keyword-only :class:`Reply` subclass
    whose own fields all have defaults (a decoded record equals the sent one)."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


# -- the State Server's own requests ----------------------------------------------------------

@reply_record
class Registered(Reply):
    """The answer to :class:`Register`: the round the worker takes part from
    (> the one it sent for a worker the job takes back after it left or died);
    ``over``: a worker that left comes back after the job's end (nobody trains
    any more, or the job agreed to stop): no round is left for it; ``rejoined``: the
    job takes back a rank that left or died (a restarted process), which ``async``,
    having no round to name, cannot tell from ``round``."""
    TYPE = "registered"
    round: int = 0
    over: bool = False
    rejoined: bool = False
    CHECKS = {"round": integer(), "over": check_bool, "rejoined": check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Register(Request):
    """A worker joins: its PS-LITE rank, the launcher's slot, and the signature
    of its model (a digest of the parameters' shapes and dtypes; "" = unchecked)."""
    TYPE = "register"
    REPLY = Registered
    slot: int
    signature: str = ""
    round: int = 0   # > 0 when a worker registers again with a restarted State Server
    CHECKS = {"slot": integer(), "round": integer(), "signature": text(128)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Heartbeat(Request):
    """The worker's process is alive (sent by its I/O thread; no reply)."""
    TYPE = "heartbeat"
    REPLAYABLE = False


@reply_record
class ByeReply(Reply):
    """The answer to :class:`Bye`: ``retired`` is true when a rule retired the
    sender's group with it (G-CADA: the group has no member left, its last
    gradient is to be zeroed)."""
    TYPE = "bye_reply"
    retired: bool = False
    CHECKS = {"retired": check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bye(Request):
    """The worker leaves the job."""
    TYPE = "bye"
    REPLY = ByeReply


# -- paged records (a rule's record for the chief's run summary) -------------------------------

RECORD_PAGE = 6000
"""Characters of a record per answer: escaped into JSON (at most two bytes a character: the record is ASCII
JSON) the answer stays below :data:`MAX_MESSAGE_BYTES`."""


@reply_record
class RecordPage(Reply):
    """A page of a rule's record: ``payload`` holds the JSON text's characters
    from the request's ``start`` on (at most :data:`RECORD_PAGE`), ``total`` the
    whole text's length."""
    TYPE = "record_page"
    payload: str = ""
    total: int = 0
    CHECKS = {"total": integer(), "payload": text(RECORD_PAGE)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordRequest(Request):
    """The base of a request for a page of a rule's record (as JSON text): the
    answer is a :class:`RecordPage` from ``start`` on; the text is fixed when a
    page with ``start`` 0 is asked for. Read-only: no replay needed."""
    REPLY = RecordPage
    REPLAYABLE = False
    start: int = 0
    CHECKS = {"start": integer()}


def record_page(seq, text, start):
    """The :class:`RecordPage` of ``text`` from character ``start`` on."""
    return RecordPage(seq=seq, payload=text[start:start + RECORD_PAGE], total=len(text))


SERVICE_REQUESTS = (Register, Heartbeat, Bye)
"""The requests :class:`~mxhet.control.server.StateService` answers itself."""
SERVICE_REPLIES = (Reply, Registered, ByeReply, RecordPage)


# -- the codec ------------------------------------------------------------------------------

_FIELDS = {}         # record class -> frozenset of its field names
_FLOAT_FIELDS = {}   # record class -> names of its float fields


def fields_of(cls):
    """The names of ``cls``'s fields (cached)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def _float_fields(cls):
    names = _FLOAT_FIELDS.get(cls)
    if names is None:
        names = _FLOAT_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.type in (float, "float"))
    return names


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
    for name in _float_fields(type(message)):
        if not math.isfinite(body[name]):
            raise ValueError("field %r of a %s message is %r: not valid JSON" % (name, message.TYPE, body[name]))
    body["v"] = VERSION
    body["type"] = message.TYPE
    return orjson.dumps(body, default=_plain)


def decode(data, allowed):
    """Parse and validate bytes into a message record.

    Args:
        data: the raw frame.
        allowed: mapping of accepted type names to classes.

    Raises:
        ProtocolError: for anything that is not a valid message of an allowed
            type: too large, not UTF-8 JSON, wrong version, unknown type,
            missing or unknown fields, wrong field types or ranges.
    """
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
    names = _FIELDS.get(cls) or fields_of(cls)
    if version < 3 and cls.__dict__.get("BEFORE_V3"):
        for name, value in cls.BEFORE_V3.items():
            body.setdefault(name, value)
    if version < 5 and cls.__dict__.get("BEFORE_V5"):
        for name, value in cls.BEFORE_V5.items():
            body.setdefault(name, value)
    if body.keys() != names:
        missing, unknown = sorted(names - set(body)), sorted(set(body) - names)
        raise ProtocolError("%s message: missing fields %s, unknown fields %s" % (cls.TYPE, missing, unknown))
    # The keys are exactly the fields: set them at once instead of one
    # object.__setattr__ each in the frozen dataclass's __init__ (a third of decoding).
    message = object.__new__(cls)
    message.__dict__.update(body)
    fast = getattr(cls, "fast_valid", None)
    if fast is None or not fast(body):
        message.validate()
    return message
