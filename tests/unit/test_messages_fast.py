"""The State Server's hot-path shortcuts give exactly what the general code gives.

A request class's ``fast_valid`` checks the most frequent requests inline: whenever it
accepts fields, the class's ``validate()`` must accept them too, and for the
fields real workers send it must accept (or the shortcut is never taken).
``messages.query_reply`` must build the same QueryReply, encoded to the same bytes.
"""
import itertools
import math
import random

import pytest

from mxhet.control import messages as m
from mxhet.control import wire
from mxhet.errors import ProtocolError

CANDIDATES = [0, 1, 7, -1, 2 ** 53 - 1, 2 ** 53, 10 ** 400, 0.0, 0.05, 1.5, -0.0, -0.5, -1.0, math.inf, math.nan,
              True, False, None, "1", [1], {"a": 1}]


def _valid(cls, fields):
    message = object.__new__(cls)
    message.__dict__.update(fields)
    try:
        message.validate()
    except (ProtocolError, OverflowError):   # OverflowError: math.isfinite of a huge int
        return False
    return True


FAST = sorted((cls for cls in m.REQUEST_TYPES.values() if cls.fast_valid is not None), key=lambda c: c.TYPE)


def test_the_query_has_the_fast_check():
    assert m.Query in FAST


@pytest.mark.parametrize("cls", FAST)
def test_the_fast_check_accepts_only_what_validate_accepts(cls):
    fast = cls.fast_valid
    names = sorted(wire.fields_of(cls))
    base = {"rank": 3, "seq": 9, "incarnation": 123456789, "round": 2, "k": 4, "c": 0.05, "since_finish": 0.001,
            "loss": m.NO_LOSS}
    assert fast(base) and _valid(cls, base)
    rng = random.Random(0)
    accepted = 0
    for _ in range(20000):
        # each field a candidate or, half the time, a valid request's (eight fields all drawn from the
        # candidates are seldom all valid: the accepted side would hardly be tried)
        fields = {name: rng.choice(CANDIDATES) if rng.random() < 0.5 else base[name] for name in names}
        if fast(fields):
            accepted += 1
            assert _valid(cls, fields), fields
    # one field at a time off a valid request: each single bad value is caught by one of the two
    for name, value in itertools.product(names, CANDIDATES):
        fields = dict(base, **{name: value})
        if fast(fields):
            assert _valid(cls, fields), fields
    assert accepted > 0


def test_decode_takes_the_fast_path_for_what_workers_send_and_refuses_the_rest():
    query = m.Query(rank=2, seq=5, round=1, k=3, c=0.031, since_finish=0.0004, incarnation=2 ** 40)
    assert m.Query.fast_valid(m.decode(m.encode(query)).__dict__)
    assert m.decode(m.encode(query)) == query
    # an int capability is valid but leaves the fast path: validate() decides
    assert m.decode(m.encode(m.Query(rank=2, seq=5, round=1, k=3, c=1, since_finish=0.0))).c == 1
    for bad in ('"k":-1', '"c":-0.5', '"since_finish":true', '"rank":1.0', '"incarnation":9007199254740992'):
        name = bad.split(":")[0]
        body = m.encode(query).decode()
        start = body.index(name)
        end = body.index(",", start) if body.find(",", start) > 0 else body.index("}", start)
        with pytest.raises(ProtocolError):
            m.decode((body[:start] + bad + body[end:]).encode())


@pytest.mark.parametrize("ready,round_,slowest", [(True, 0, 0), (False, 7, -1), (True, 123, 9999)])
def test_query_reply_is_the_reply_the_dataclass_builds(ready, round_, slowest):
    fast = m.query_reply(41, ready, round_, slowest)
    slow = m.QueryReply(seq=41, ready=ready, round=round_, slowest=slowest)
    assert fast == slow and hash(fast) == hash(slow)
    assert m.encode(fast) == m.encode(slow)
    with pytest.raises(AttributeError):
        fast.seq = 1   # still frozen
