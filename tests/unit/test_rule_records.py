"""Each State Server rule owns its request and reply records (mxhet.control.rules,
mxhet.control.wire): round trip, validation (a wrong version, an unknown field,
another rule's reply record), and every answer is the record its request names."""
import itertools

import orjson
import pytest

from mxhet.control import messages as m
from mxhet.control import wire
from mxhet.control.client import StateClient
from mxhet.control.rules import PLUGINS
from mxhet.control.server import StateService
from mxhet.errors import ProtocolError

# one record per reply type, each field away from its default where it has one
REPLY_SAMPLES = {
    "esync": [m.QueryReply(seq=3, ready=True, round=2, slowest=1, stop=False, target=3, weight=0.25),
              m.ResetReply(seq=4, round=2, stop=True)],
    "ssp": [],
    "adsp": [m.CommitReply(seq=5, target=12, period_left=1.5)],
    "nodelay": [m.TransferReply(seq=6, ready=True, round=4, stop=True, members=3),
                m.TransferPushedReply(seq=7, round=4, complete=False)],
    "preduce": [m.GroupedReply(seq=7, stop=False, round=3, group_slot=1, weight=0.5, k=9, target=1),
                m.JoinedReply(seq=7, model_slot=2, k=9), m.PushedReply(seq=7, released=True),
                m.LeftReply(seq=7, finals=3)],
    "gcada": [m.GroupSelection(seq=8, iteration=5, download=True),
              m.WatchReply(seq=9, iteration=5, keep=True),
              m.ClaimReply(seq=10, iteration=5, upload=True),
              m.UploadedReply(seq=11, iteration=5, step_servers=True),
              m.SteppedReply(seq=12, iteration=5)],
    "membership": [m.EnteredReply(seq=13, round=2, target=3, ballots=1, stop=True, counts=(1.0, 2.5)),
                   m.DoneReply(seq=14, round=2, ready=True), m.FinishedReply(seq=15, chief=1),
                   # a round after the job's agreed stop (a worker started again while the last was open)
                   m.EnteredReply(seq=16, round=3, over=True)],
}


def _allowed(classes):
    return {cls.TYPE: cls for cls in classes}


def test_every_plugin_declares_its_records_and_every_request_names_its_answer():
    assert set(REPLY_SAMPLES) == set(PLUGINS)
    generic = set(wire.SERVICE_REPLIES)
    for name, plugin in PLUGINS.items():
        assert plugin.KINDS == tuple(req.TYPE for req in plugin.REQUESTS)
        assert {type(r) for r in REPLY_SAMPLES[name]} == set(plugin.REPLIES)
        for req in plugin.REQUESTS:
            assert req.REPLY in plugin.REPLIES or req.REPLY in generic, (name, req)
            assert m.REQUEST_TYPES[req.TYPE] is req
        for rep in plugin.REPLIES:
            assert issubclass(rep, m.Reply) and m.REPLY_TYPES[rep.TYPE] is rep
            # only what every reply has, plus the rule's own fields
            assert {"seq", "ok", "error", "code"} < wire.fields_of(rep)


@pytest.mark.parametrize("reply", [r for rs in REPLY_SAMPLES.values() for r in rs], ids=lambda r: r.TYPE)
def test_a_rules_reply_record_round_trips_and_is_validated(reply):
    rule = next(name for name, rs in REPLY_SAMPLES.items() if reply in rs)
    own = _allowed(PLUGINS[rule].REPLIES)
    data = m.encode(reply)
    assert m.decode(data, own) == reply and m.decode(data) == reply
    body = orjson.loads(data)
    assert body["v"] == wire.VERSION and body["type"] == reply.TYPE
    with pytest.raises(ProtocolError, match="version"):
        m.decode(orjson.dumps(dict(body, v=99)), own)
    with pytest.raises(ProtocolError, match="unknown fields"):
        m.decode(orjson.dumps(dict(body, extra=1)), own)
    # a field of the one Reply every mode once shared that this rule does not answer is unknown
    foreign = next(f for f in ("payload", "period_left", "group_slot", "slowest") if f not in body)
    with pytest.raises(ProtocolError, match="unknown fields"):
        m.decode(orjson.dumps(dict(body, **{foreign: 0})), own)
    with pytest.raises(ProtocolError, match="missing fields"):
        m.decode(orjson.dumps({k: v for k, v in body.items() if k != "seq"}), own)
    # every other rule refuses it
    for other, plugin in PLUGINS.items():
        if other != rule:
            with pytest.raises(ProtocolError, match="unknown or unexpected message type"):
                m.decode(data, _allowed(plugin.REPLIES))


@pytest.mark.parametrize("reply,bad", [
    (m.QueryReply(seq=1), {"slowest": -2}),
    (m.QueryReply(seq=1), {"weight": 1.5}),
    (m.ResetReply(seq=1), {"stop": 1}),
    (m.CommitReply(seq=1), {"period_left": -1.0}),
    (m.TransferReply(seq=1), {"round": "2"}),
    (m.GroupedReply(seq=1), {"group_slot": -2}),
    (m.GroupSelection(seq=1), {"step_servers": None}),
    (m.WatchReply(seq=1), {"keep": 0}),
    (m.EnteredReply(seq=1), {"counts": [1.0] * (wire.MAX_COUNTS + 1)}),
    (m.EnteredReply(seq=1), {"over": 1}),
    (m.FinishedReply(seq=1), {"chief": -2}),
    (m.RecordPage(seq=1), {"payload": "x" * (wire.RECORD_PAGE + 1)}),
    (m.Registered(seq=1), {"round": -1}),
    (m.ByeReply(seq=1), {"retired": "yes"}),
])
def test_a_bad_field_value_is_refused(reply, bad):
    body = dict(orjson.loads(m.encode(reply)), **bad)
    with pytest.raises(ProtocolError, match=next(iter(bad))):
        m.decode(orjson.dumps(body))


def test_a_rules_request_is_not_a_reply_and_the_requests_are_versioned_as_before():
    for plugin in PLUGINS.values():
        for req in plugin.REQUESTS:
            assert req.TYPE not in m.REPLY_TYPES
    raw = orjson.dumps({"v": 3, "type": "commit", "rank": 0, "seq": 1, "incarnation": 0, "commits": 2,
                        "loss": 0.5, "commit_cost": 0.0})
    assert m.decode(raw, m.REQUEST_TYPES) == m.Commit(rank=0, seq=1, commits=2, loss=0.5, commit_cost=0.0)
    with pytest.raises(ProtocolError):
        m.decode(raw, m.REPLY_TYPES)


def _job():
    """Every rule loaded, two workers registered; ``send`` answers at server clock 1 s."""
    svc = StateService(2, now=0.0)
    seqs = itertools.count(1)

    def send(rank, cls, **fields):
        return svc.handle(cls(rank=rank, seq=next(seqs), **fields), 1.0, sender=rank)

    for rank in (0, 1):
        assert type(send(rank, m.Register, slot=rank)) is m.Registered
    return svc, send


REQUESTS = [
    (m.Query, dict(round=0, k=1, c=0.1, since_finish=0.0)),
    (m.Reset, dict(round=1, want_stop=False)),
    (m.Clock, dict(clock=0)),
    (m.Commit, dict(commits=0, loss=1.0, commit_cost=0.0)),
    (m.AdspRecord, dict(start=0)),
    (m.Notify, dict(round=0, pending=1, want_stop=False)),   # deferred: rank 1 has not announced round 0
    (m.ReduceJoin, dict(group_size=2, dynamic=False, alpha=0.0, avoid_frozen=False, window=0)),
    (m.ReduceReady, dict(k=1, want_stop=False)),             # deferred: no partner yet
    (m.ReduceLeave, dict(final=True)),
    (m.GroupBegin, dict(iteration=0, group=0, groups=1, max_delay=1, c=0.3, want_stop=False)),
    (m.GroupDone, dict(iteration=0, group=0)),
    (m.GroupUploaded, dict(iteration=0, group=0)),
    (m.MembershipRecord, dict(start=0)),
    (m.Bye, {}),
]


def test_every_answer_is_its_requests_record_and_a_refusal_is_the_generic_reply():
    svc, send = _job()
    answered = set()
    for cls, fields in REQUESTS:
        reply = send(0, cls, **fields)
        if reply is None:
            continue
        assert reply.ok, (cls.TYPE, reply.error)
        assert type(reply) is cls.REPLY, cls.TYPE
        assert m.decode(m.encode(reply), m.REPLY_TYPES) == reply
        answered.add(cls.TYPE)
    assert len(answered) == len(REQUESTS) - 2
    # a refused request of any rule's kind: the generic reply, nothing of the rule's record
    for cls, fields in REQUESTS:
        refused = svc.handle(cls(rank=5, seq=1, **fields), 2.0, sender=5)   # not registered (and out of range)
        assert type(refused) is m.Reply and not refused.ok and refused.error and not refused.stop
        assert set(orjson.loads(m.encode(refused))) == {"seq", "ok", "error", "code", "v", "type"}


def test_gcada_answers_with_named_fields():
    svc, send = _job()
    rule = dict(groups=2, max_delay=1, c=0.3, want_stop=False)
    selection = send(0, m.GroupBegin, iteration=0, group=0, **rule)
    assert selection == m.GroupSelection(seq=selection.seq, iteration=0, download=True)
    assert send(1, m.GroupBegin, iteration=0, group=1, **rule).download
    claim = send(0, m.GroupDone, iteration=0, group=0)
    assert type(claim) is m.ClaimReply and claim.upload and claim.iteration == 0
    assert not send(0, m.GroupUploaded, iteration=0, group=0).step_servers    # group 1's upload is missing
    # no generic names: every G-CADA answer is read by its own fields, on both engines
    assert not any(hasattr(record, name) for record in (selection, claim) for name in ("round", "ready", "target"))


class _Transport:
    """Answers every request at once with ``answer(request)``."""

    def __init__(self, answer):
        self.answer, self.replies = answer, []

    def send(self, data):
        self.replies.append((0.0, m.encode(self.answer(m.decode(data)))))

    def recv(self, timeout):
        return self.replies.pop(0) if self.replies else None

    def close(self):
        pass


def test_the_client_refuses_another_rules_reply_record():
    def answer(request):
        if isinstance(request, m.Commit):   # answered with ESync's record instead of ADSP's
            return m.QueryReply(seq=request.seq, ready=True)
        return request.REPLY(seq=request.seq)

    client = StateClient("fake", rank=0, slot=0, clock=lambda: 0.0, transport=_Transport(answer))
    client.register(heartbeat=0)
    with pytest.raises(ProtocolError, match="'query_reply' record, expected 'commit_reply'"):
        client.commit_report(1, 0.5, 0.0)


def test_one_paged_record_helper_serves_both_records(monkeypatch):
    monkeypatch.setattr(wire, "RECORD_PAGE", 7)
    svc, _ = _job()
    seqs = itertools.count(100)
    client = StateClient("fake", rank=0, slot=0, clock=lambda: 0.0,
                         transport=_Transport(lambda req: svc.handle(req, 1.0, sender=0)))
    client._seq = 100
    assert client.adsp_record() is None                      # "null" in one page
    record = client.membership_record()
    assert record["slots"] == {"0": 0, "1": 1} and len(orjson.dumps(record)) > 3 * 7
    pages = [svc.handle(m.MembershipRecord(rank=0, seq=next(seqs), start=s), 1.0, sender=0) for s in (0, 7)]
    assert [type(p) for p in pages] == [m.RecordPage] * 2 and pages[0].total == pages[1].total
    # pages that do not add up: the helper says whose record it was
    monkeypatch.setattr(client, "request", lambda message: m.RecordPage(seq=message.seq, payload="", total=5))
    with pytest.raises(ProtocolError, match="membership record pages do not add up"):
        client.membership_record()
