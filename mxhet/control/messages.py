"""Every State Server message record, gathered in one namespace.

The wire format (the codec, the generic :class:`Reply`, the paged records and
the State Server's own requests) is :mod:`mxhet.control.wire`'s. Each rule
owns its request and reply records, declared in the rule's module
(:mod:`.state_rule` for ESync, :mod:`.adsp`, :mod:`.nodelay`, :mod:`.preduce`,
:mod:`.gcada`, :mod:`.membership`; SSP's in :mod:`.rules`) and listed by its
plugin (``RulePlugin.REQUESTS`` / ``REPLIES``); this module gathers them from
the plugins, so a new rule needs no line here:

* :data:`REQUEST_TYPES` -- what the State Server decodes;
* :data:`REPLY_TYPES` -- what a worker decodes (a request's own ``REPLY`` says
  which of them answers it; a refusal is always the generic :class:`Reply`);
* :data:`REPLAYABLE` -- the kinds whose repeat gets the first answer again.

The rules' records are also named here (``m.Query``, ``m.GroupBegin``, ...)
for the callers that build requests.
"""
from .wire import (MAX_COUNTS, MAX_MESSAGE_BYTES, SUPPORTED_VERSIONS, VERSION,
                   SERVICE_REPLIES, SERVICE_REQUESTS, Bye, ByeReply, Heartbeat, RecordPage, RecordRequest,
                   Register, Registered, Reply, Request, encode, record_page)
from . import wire as _wire
from .rules import PLUGINS, Clock
from .state_rule import NO_LOSS, Query, QueryReply, Reset, ResetReply, query_reply
from .adsp import AdspRecord, Commit, CommitReply
from .nodelay import Merged, Notify, TransferPushed, TransferPushedReply, TransferReply
from .preduce import GroupedReply, JoinedReply, LeftReply, PushedReply, ReduceJoin, ReduceLeave, ReducePushed, ReduceReady
from .gcada import (ClaimReply, GroupBegin, GroupDone, GroupSelection, GroupStepped,
                    GroupUploaded, GroupWatch, SteppedReply, UploadedReply, WatchReply)
from .membership import (DoneReply, EnteredReply, FinishedReply, MembershipRecord, RoundDone, RoundEnter, RoundFinish,
                         RoundWait)


def _by_type(classes, what):
    table = {}
    for cls in classes:
        if table.setdefault(cls.TYPE, cls) is not cls:
            raise ValueError("two %s records are called %r: %s and %s"
                             % (what, cls.TYPE, table[cls.TYPE].__qualname__, cls.__qualname__))
    return table


REQUEST_TYPES = _by_type(SERVICE_REQUESTS + tuple(req for p in PLUGINS.values() for req in p.REQUESTS), "request")
REPLY_TYPES = _by_type(SERVICE_REPLIES + tuple(rep for p in PLUGINS.values() for rep in p.REPLIES), "reply")
REPLAYABLE = frozenset(kind for kind, cls in REQUEST_TYPES.items() if cls.REPLAYABLE)
"""Requests whose repeat (same incarnation and sequence number) gets the first answer again."""
ALL_TYPES = _by_type(tuple(REQUEST_TYPES.values()) + tuple(REPLY_TYPES.values()), "message")


def decode(data, allowed=None):
    """:func:`mxhet.control.wire.decode` with every record type allowed by default."""
    return _wire.decode(data, ALL_TYPES if allowed is None else allowed)


__all__ = ["MAX_COUNTS", "MAX_MESSAGE_BYTES", "SUPPORTED_VERSIONS", "VERSION",
           "Request", "Reply", "Register", "Registered", "Heartbeat", "Bye", "ByeReply", "RecordRequest", "RecordPage",
           "encode", "decode", "record_page", "REQUEST_TYPES", "REPLY_TYPES", "REPLAYABLE", "ALL_TYPES",
           "Clock", "NO_LOSS", "Query", "QueryReply", "Reset", "ResetReply", "query_reply", "AdspRecord", "Commit",
           "CommitReply",
           "Merged", "Notify", "TransferPushed", "TransferPushedReply", "TransferReply", "GroupedReply", "ReduceJoin",
           "ReducePushed", "ReduceReady", "JoinedReply", "LeftReply", "PushedReply", "ReduceLeave",
           "ClaimReply", "GroupBegin", "GroupDone", "GroupSelection", "GroupStepped", "GroupUploaded", "GroupWatch",
           "SteppedReply", "UploadedReply", "WatchReply", "DoneReply", "EnteredReply", "FinishedReply",
           "MembershipRecord", "RoundDone", "RoundEnter", "RoundFinish", "RoundWait"]
