"""The orjson codec writes what the original json codec wrote (the same JSON
object, keys in the same order) and stays at least as strict."""
import dataclasses
import json
import random

import pytest

from mxhet.control import messages as m
from mxhet.errors import ProtocolError


def reference_encode(message):
    """The original encoder: dataclasses.asdict, then json.dumps."""
    body = dataclasses.asdict(message)
    body["v"] = m.VERSION
    body["type"] = message.TYPE
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _random_message(rng):
    common = dict(rank=rng.randrange(10 ** 4), seq=rng.randrange(10 ** 9), incarnation=rng.randrange(2 ** 52))
    seconds = lambda: rng.choice([0.0, 1e-9, rng.random(), 1e6 * rng.random()])  # noqa: E731
    return rng.choice([
        lambda: m.Register(slot=rng.randrange(64), signature=rng.choice(["", "abc", "é\"\\"]),
                           round=rng.randrange(9), **common),
        lambda: m.Query(round=rng.randrange(9), k=rng.randrange(99), c=seconds(), since_finish=seconds(), **common),
        lambda: m.Reset(round=rng.randrange(1, 9), want_stop=rng.random() < 0.5, **common),
        lambda: m.Clock(clock=rng.randrange(999), **common),
        lambda: m.Commit(commits=rng.randrange(99), loss=rng.choice([-1.0, rng.random()]), commit_cost=seconds(),
                         **common),
        lambda: m.Heartbeat(**common),
        lambda: m.Bye(**common),
        lambda: m.Reply(seq=common["seq"], ok=rng.random() < 0.5,
                        error=rng.choice(["", "rank 3 has not registered", "ü"]), code=rng.choice(["", "x"])),
        lambda: m.QueryReply(seq=common["seq"], ready=rng.random() < 0.5, round=rng.randrange(9),
                             slowest=rng.randrange(-1, 9), stop=rng.random() < 0.5),
        lambda: m.CommitReply(seq=common["seq"], target=rng.randrange(99), period_left=seconds()),
        lambda: m.GroupSelection(seq=common["seq"], iteration=rng.randrange(99), download=rng.random() < 0.5),
        lambda: m.RecordPage(seq=common["seq"], payload=rng.choice(["", "{\"a\":1}"]), total=rng.randrange(99)),
    ])()


@pytest.mark.parametrize("seed", range(5))
def test_same_json_as_the_original_encoder_and_round_trip(seed):
    rng = random.Random(seed)
    for _ in range(200):
        message = _random_message(rng)
        data = m.encode(message)
        ours, reference = json.loads(data), json.loads(reference_encode(message))
        assert ours == reference and list(ours) == list(reference)
        assert m.decode(reference_encode(message)) == message     # what an older peer sends
        assert m.decode(data) == message
        assert m.decode(memoryview(data)) == message


@pytest.mark.parametrize("raw", [
    '{"v":1,"type":"bye","rank":0,"seq":1,"incarnation":0}'.encode("utf-16"),          # not UTF-8
    b'{"v":1,"type":"query","rank":0,"seq":1,"incarnation":0,"round":0,"k":1,"c":NaN,"since_finish":0}',
    b'{"v":1,"type":"query","rank":0,"seq":1,"incarnation":0,"round":0,"k":1,"c":Infinity,"since_finish":0}',
    b'{"v":1,"type":"query","rank":0,"seq":1,"incarnation":0,"round":0,"k":true,"c":0.1,"since_finish":0}',
    b'{"v":1,"type":"query","rank":0,"seq":1.0,"incarnation":0,"round":0,"k":1,"c":0.1,"since_finish":0}',
    b'{"v":1,"type":"clock","rank":0,"seq":1,"incarnation":0,"clock":-2}',
    b'{"v":1,"type":"bye","rank":0,"seq":1,"incarnation":9007199254740992}',
    b'{"v":1,"type":"bye","rank":0,"seq":1,"incarnation":0} trailing',
    b'{"v":1,"type":"bye","rank":18446744073709551616,"seq":1,"incarnation":0}',            # beyond 64 bits
    b'{"v":1,"type":"bye","rank":0,"seq":1,"incarnation":0,"incarnation":1}'[:-1] + b'\xff}',  # not UTF-8
])
def test_strict_decoding(raw):
    with pytest.raises(ProtocolError):
        m.decode(raw, m.REQUEST_TYPES)


@pytest.mark.parametrize("message", [m.CommitReply(seq=1, period_left=float("inf")),
                                     m.Query(rank=0, seq=1, round=0, k=1, c=float("nan"), since_finish=0.0),
                                     m.Commit(rank=0, seq=1, commits=0, loss=float("-inf"), commit_cost=0.0)])
def test_non_finite_values_are_not_encoded(message):
    with pytest.raises(ValueError):
        m.encode(message)
