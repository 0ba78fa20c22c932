"""Who takes part in each synchronous round: a pure rule (no sockets, no clock).

The synchronous modes that run on it (``localsgd``, and the others as they
move over) aggregate on ``dist_async`` servers, where a push is applied on
arrival and a pull is answered at once, instead of ``dist_sync``, which waits
for a fixed number of pushes per key and so blocks for ever once one worker is
gone. The count moves here: the State Server names each round's members, and
the workers scale their contributions by the member count it names.

A round ``r`` has two rendezvous:

* **enter** (:meth:`RoundRendezvous.enter`): a training worker arrives with
  its stop ballot; the entry closes once every worker still training has
  entered ``r``. Those that entered are the round's *members*; each is told
  their number ``m`` and how many of them want to stop.
* **done** (:meth:`RoundRendezvous.done`): a member's push is applied on the
  servers; the members are released once every member is done or gone, so a
  pull then sees every push of the round. The answer says whether the round
  is *complete* (every member pushed) -- a member that died in between may
  have pushed part of its contribution or none.

A worker leaves the rounds in two ways:

* :meth:`RoundRendezvous.finish`: it stopped training (the job agreed to
  stop, or its script left the training loop). It waits until nobody trains
  any more, then takes the final model: every worker ends with the same one,
  including one that left early.
* :meth:`RoundRendezvous.depart`: it is gone (goodbye, or found dead). The
  rounds it was expected in go on without it. A death that leaves fewer than
  ``min_workers`` still training fails every waiting worker with
  :class:`TooFewWorkers` instead of letting the job go on (or hang).

A worker that left comes back with :meth:`RoundRendezvous.join` (a restarted
process, ``mxhet-launch --max-restarts``; the simulator's ``SLOT:join@T``): it
takes part from the *next round boundary* -- the first round no worker has
entered yet -- so a round already under way never waits for it, and a round
it belongs to waits for it as for any member. It takes the global model before
its first round (the delta it pushes is against that model).

No round after the job's agreed stop is ever held: an entry of a later round (a worker
that rejoined while the last round was still open) is answered at once with an
``over`` :class:`Entered` -- it takes part in nothing more, pushes nothing, and takes
the final model at the finish barrier like a worker that left its loop; the record
counts it ``late``, as a worker back after the job's end (:meth:`RoundRendezvous.late`).

Each method returns *releases*: ``(rank, token, answer)`` for waiting
requests now answered, where ``token`` is what the caller passed with the
request (the State Server's sequence number) and ``answer`` a
:class:`Entered`, :class:`Done`, :class:`Finished` or :class:`TooFewWorkers`.
"""
import dataclasses

from . import wire as w

ELASTIC_MODES = ("localsgd", "esync", "sync", "nodelay")
"""The modes whose rounds the State Server names (a worker may leave or die and
the others go on): ``mxhet-launch --elastic`` and the simulator's ``--events``
accept these (``sync`` through its elastic executor, :class:`mxhet.modes.gradient.ElasticSync`;
``nodelay``'s transfer rule counts each round's pushes itself, :mod:`.nodelay`)."""
CLUSTER_ELASTIC_MODES = ELASTIC_MODES + ("async", "preduce", "gcada", "cada")
"""``mxhet-launch --elastic`` accepts these: the round modes, ``async``, which has no round to
release -- nobody waits for another's push -- and whose end (the final barrier before the last pull)
runs on this rendezvous' finish instead of PS-LITE's barrier, which counts the dead, and ``preduce``,
whose controller releases a dead worker's group (:mod:`mxhet.control.preduce`) and whose end runs on
this finish too, and ``gcada``/``cada``, whose coordinator hands a dead claimant's upload, or a dead
trigger's step, to a live worker (:meth:`mxhet.control.gcada.GroupCoordinator.depart`); their end too."""
RESTART_MODES = ELASTIC_MODES + ("async", "preduce", "gcada", "cada")
"""``mxhet-launch --max-restarts`` accepts these: a restarted worker rejoins at a round boundary
(nodelay: the next transfer round its master requests), or (``async``, which has no rounds) pulls the
current global model and trains on from its first push after that pull, or
(``preduce``) is grouped again from its first READY, starting from the latest complete group's model, or
(``gcada``, ``cada``) is taken back into its group from the iteration after its first request
(:meth:`mxhet.control.gcada.GroupCoordinator.rejoin`)."""


RESTARTED = "restarted"
"""The record's cause of a join: a worker's process started again (or, in the simulator, a device back)."""
LEFT_ITS_LOOP = "left its loop"
"""The record's cause for a worker that stopped training before the job agreed to stop."""


@dataclasses.dataclass(frozen=True)
class Entered:
    """The round's entry closed: ``members`` (their number) take part; ``ballots``:
    how many of them want to stop after this round (> 0: the job stops after it);
    ``counts``: the element-wise sum of the count vectors the members entered with
    (ESync's delta weighting, :mod:`mxhet.policy.aggregation`; () when none sent one)."""
    round: int
    members: int
    ballots: int
    counts: tuple = ()
    over: bool = False
    """The round comes after the job's agreed stop: the rank takes part in nothing more."""


@dataclasses.dataclass(frozen=True)
class Done:
    """Every member of ``round`` is done or gone; ``complete``: every member pushed."""
    round: int
    complete: bool


@dataclasses.dataclass(frozen=True)
class Finished:
    """Nobody trains any more: the global model is final. ``chief``: the lowest rank still in
    the job when this finish barrier closed (:func:`summary_rank`), which does the chief's
    end-of-job duties -- rank 0 unless it left or died."""
    chief: int = 0


def summary_rank(ranks, gone):
    """The rank that writes the job's summary: the lowest of ``ranks`` not ``gone`` (rank 0, PS-LITE's
    chief, while it lives; after its death the lowest survivor); None when every rank is gone."""
    live = sorted(set(ranks) - set(gone))
    return live[0] if live else None


@dataclasses.dataclass(frozen=True)
class TooFewWorkers:
    """The job fell below its minimum of live workers; ``message`` says how."""
    message: str


def _sum_counts(counts, members):
    """The element-wise sum of the members' count vectors (in rank order: the same floats on
    every engine); () when none sent one.

    Raises:
        ValueError: when the members' vectors differ in length.
    """
    vectors = [counts[r] for r in sorted(members) if r in counts]
    if not vectors:
        return ()
    if len({len(v) for v in vectors}) != 1:
        raise ValueError("the members of a round entered with count vectors of different lengths")
    return tuple(sum(column) for column in zip(*vectors))


class RoundRendezvous:
    """The members of every round, for ranks ``ranks``.

    Args:
        ranks: the job's worker ranks.
        min_workers: fewest workers still training that a death may leave
            (>= 1); fewer fail the job.

    Raises:
        ValueError: for no ranks or a bad ``min_workers``.
    """

    def __init__(self, ranks, min_workers=1):
        ranks = set(ranks)
        if not ranks:
            raise ValueError("a rendezvous needs at least one rank")
        if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 1:
            raise ValueError("min_workers must be an integer >= 1, got %r" % (min_workers,))
        self.min_workers = min_workers
        self.ranks = frozenset(ranks)
        self.training = set(ranks)   # ranks still in their training loop
        self.finishing = {}          # rank -> (token, k) of its k-th finish request, not yet answered
        self.finish_calls = {}       # rank -> finish requests it sent
        self.gone = set()            # ranks that said goodbye or died
        self.entries = {}            # round -> {rank: (token, ballot)} while the entry is open
        self.members = {}            # round -> frozenset of members (entry closed)
        self.done_ranks = {}         # round -> {rank: token} while the round's pushes are not all in
        self.failed = None           # the TooFewWorkers answer, once the job fell below its minimum
        self.departures = []         # (rank, cause, round being entered) per departure, for the record
        self.entry_counts = {}       # round -> {rank: count vector} while the entry is open
        self.joined_from = {}        # rank -> first round it takes part in after a rejoin
        self.joins = []              # (rank, cause, first round) per rejoin, for the record
        self._latest = -1            # the highest round any worker entered (or a restart found)
        self.stop_round = None       # the round after which the job agreed to stop (a ballot), once known
        self.stop_elsewhere = False  # a caller said the job agreed to stop outside the rounds (ESync's RESET)
        self.events = []             # leave / join records with the caller's time (stats()["events"])
        self.named = {}              # round -> the ranks its entry waits for, where a rule named them (name())
        self.closed = {}             # round -> complete, for the rounds whose every member is done or gone
        self.waiting = {}            # round -> {rank: token}: non-members waiting for the round's pushes (wait())

    # -- requests ---------------------------------------------------------------
    def name(self, round_, ranks):
        """Round ``round_``'s entry waits for exactly ``ranks`` (those still training), not for every
        rank that trains: ESync's ``--round-deadline`` names each round's members -- the devices on
        time and the late ones whose delta enters it (:class:`mxhet.policy.deadline.RoundBook`).
        Naming a round again with the same ranks does nothing.

        Raises:
            ValueError: for a rank not in the job, a round whose entry has closed, or a round
                named before with other ranks.
        """
        ranks = frozenset(ranks)
        if not ranks <= self.ranks:
            raise ValueError("round %d is named ranks %s, not all of the job's" % (round_, sorted(ranks)))
        if round_ in self.named:
            if self.named[round_] != ranks:
                raise ValueError("round %d was named ranks %s, now %s"
                                 % (round_, sorted(self.named[round_]), sorted(ranks)))
            return
        if round_ in self.members:
            raise ValueError("round %d is named after its entry closed" % round_)
        self.named[round_] = ranks

    def enter(self, rank, round_, token, ballot=False, counts=(), now=None, stopping=False):
        """``rank`` enters round ``round_`` (its stop ``ballot``, its ``counts``: a
        vector of numbers the members' :class:`Entered` answer sums); returns the releases.
        An entry of a round after the job's agreed stop (a ballot here, or ``stopping``: as in
        :meth:`finish`) is answered at once with an ``over`` :class:`Entered` (recorded late, at
        ``now``, the caller's clock in seconds).

        Raises:
            ValueError: the rank does not train, or entered this round already.
        """
        if self.failed is not None:
            return [(rank, token, self.failed)]
        if rank not in self.training:
            raise ValueError("rank %d enters round %d but no longer trains" % (rank, round_))
        if round_ in self.members:
            raise ValueError("rank %d enters round %d, whose entry has closed" % (rank, round_))
        if round_ < self.joined_from.get(rank, 0):
            raise ValueError("rank %d rejoined from round %d, it cannot enter round %d"
                             % (rank, self.joined_from[rank], round_))
        self._note_stop(stopping)
        if rank in self.entries.get(round_, ()):
            raise ValueError("rank %d entered round %d twice" % (rank, round_))
        if self._after_stop(round_):
            return self._refuse(rank, round_, token, now)
        self._latest = max(self._latest, round_)
        entry = self.entries.setdefault(round_, {})
        entry[rank] = (token, bool(ballot))
        if counts:
            self.entry_counts.setdefault(round_, {})[rank] = tuple(float(c) for c in counts)
        return self._close_entries(now)

    def done(self, rank, round_, token):
        """``rank``'s push of round ``round_`` is applied; returns the releases.

        Raises:
            ValueError: the rank is not a member of that round.
        """
        if self.failed is not None:
            return [(rank, token, self.failed)]
        if not self.members and not self.entries and rank in self.training:
            # A State Server restarted mid-round never saw the round's entry: every worker
            # still training entered it (none enters the next before this one closes).
            self.members[round_] = frozenset(self.training)
            self._latest = max(self._latest, round_)
        if rank not in self.members.get(round_, ()):
            raise ValueError("rank %d is not a member of round %d" % (rank, round_))
        self.done_ranks.setdefault(round_, {})[rank] = token
        return self._close_rounds()

    def wait(self, rank, round_, token):
        """``rank`` (a member or not) waits until every push of round ``round_`` is applied: ESync's
        ``--late-memory`` keeper pulls a late device's memory only once the round that device's delta
        entered is over, since the device pushes its memory before it says done there
        (:meth:`mxhet.modes.esync.ESync._add_memories`). Answered with :class:`Done` once every
        member is done or gone; at once for a round that is over, and for one this rendezvous never
        saw close (a State Server restarted since: the round is from before). Returns the releases."""
        if self.failed is not None:
            return [(rank, token, self.failed)]
        if round_ in self.closed or round_ not in self.members:
            return [(rank, token, Done(round_, complete=self.closed.get(round_, True)))]
        self.waiting.setdefault(round_, {})[rank] = token
        return self._close_rounds()

    def finish(self, rank, token, now=None, stopping=False):
        """``rank`` stopped training; it is answered once nobody trains. Returns the releases.

        A k-th finish is a barrier: answered once every rank still in the job
        has sent k (the end of the job's bookkeeping, after the final model).
        A rank that stops training before the job agreed to stop (a ballot here, or
        ``stopping``: the caller knows of a stop agreed elsewhere, ESync's RESET) left
        its loop (recorded at ``now``, the caller's clock in seconds).
        """
        if self.failed is not None:
            return [(rank, token, self.failed)]
        if rank in self.gone:
            raise ValueError("rank %d finishes after it left" % rank)
        self._note_stop(stopping)
        if rank in self.training and self._before_stop(stopping):
            self._record("leave", rank, LEFT_ITS_LOOP, self._next_round(rank), now)
        self.training.discard(rank)
        k = self.finish_calls.get(rank, 0) + 1
        self.finish_calls[rank] = k
        self.finishing[rank] = (token, k)
        return self._close_entries(now) + self._close_rounds() + self._close_job()

    def depart(self, rank, cause="bye", now=None, stopping=False):
        """``rank`` is gone (``cause``: "bye", "died", ...); returns the releases.

        The record (at ``now``, the caller's clock in seconds) lists a rank that still trained: a
        death, or a goodbye before the job agreed to stop (``stopping``: as in :meth:`finish`), which
        is a rank that left its loop (a goodbye after the stop is the job's end).
        """
        if rank in self.gone:
            return []
        self._note_stop(stopping)
        was_training = rank in self.training
        if was_training and cause != "bye":
            self._record("leave", rank, cause, self._next_round(rank), now)
        elif was_training and self._before_stop(stopping):
            self._record("leave", rank, LEFT_ITS_LOOP, self._next_round(rank), now)
        self.gone.add(rank)
        self.training.discard(rank)
        self.finishing.pop(rank, None)
        for entry in self.entries.values():
            entry.pop(rank, None)
        for counts in self.entry_counts.values():
            counts.pop(rank, None)
        open_rounds = sorted(self.entries)
        self.departures.append((rank, cause, open_rounds[0] if open_rounds else None))
        # in async (no rounds) every worker ends on its own: a death found after the others finished their
        # training (the heartbeat watch is seconds late) still left the job below its minimum for the end
        # of it, so the ranks still in the job count there
        left = len(self.training) if self.training or self._held_rounds() else len(self.ranks - self.gone)
        if (was_training and cause != "bye" and (self.training or not self._held_rounds())
                and left < self.min_workers and self.failed is None):
            return self._fail("worker rank %d %s; %d worker(s) still train, fewer than the job's minimum of %d"
                              % (rank, cause, left, self.min_workers))
        return self._close_entries(now) + self._close_rounds() + self._close_job()

    def join(self, rank, cause="restarted", not_before=0, now=None):
        """``rank``, gone, comes back (``cause`` for the record); returns the first round it
        takes part in: the round after the highest any worker has entered, so no round
        under way waits for it, and never before ``not_before`` (the round its own
        record is at: a rank is never sent back to a round it has passed). In a job that has
        held no round (``async``) the record's join names none.

        Raises:
            ValueError: the rank is not one of the job's, or it never left.
        """
        if rank not in self.ranks:
            raise ValueError("rank %d is not one of the job's ranks" % rank)
        if rank not in self.gone:
            raise ValueError("rank %d rejoins but never left" % rank)
        first = max(self._latest + 1, not_before)
        held = self._held_rounds() or first > 0
        self.gone.discard(rank)
        self.training.add(rank)
        self.finishing.pop(rank, None)
        # Its finish requests start anew; the job's k-th finish barrier is not held back by it
        # for the finishes it missed while it was gone.
        self.finish_calls[rank] = min(self.finish_calls.get(r, 0) for r in self.ranks - self.gone)
        self.joined_from[rank] = first
        self.joins.append((rank, cause, first))
        self._record("join", rank, cause, first if held else None, now)   # no round yet (async): none named
        return first

    def over(self, stopping=False):
        """True once a rank coming back has no round left to take part in: nobody trains any
        more, or the job agreed to stop (a ballot here, or ``stopping``: as in :meth:`finish`)."""
        return not self.training or self.stop_round is not None or self.stop_elsewhere or stopping

    def late(self, rank, cause=RESTARTED, now=None):
        """``rank``, gone, came back after the job's end (:meth:`over`): it stays gone; the record
        says it arrived too late."""
        if rank not in self.gone:
            raise ValueError("rank %d comes back but never left" % rank)
        self._record("late", rank, cause, None, now)

    def stopped_before_its_rounds(self, rank, now=None):
        """``rank`` is told the job agreed to stop (ESync's query answer) before it took part in any
        round since it rejoined: it trains no more and the record counts it late, as a refused entry
        (:meth:`enter`). Returns the releases; [] for any other rank (its stop is the job's)."""
        first = self.joined_from.get(rank)
        if first is None or rank not in self.training:
            return []
        if any(rank in members for r, members in self.members.items() if r >= first):
            return []
        self.training.discard(rank)
        causes = [cause for r, cause, _ in self.joins if r == rank]
        self._record("late", rank, causes[-1] if causes else RESTARTED, None, now)
        return self._close_entries(now) + self._close_rounds() + self._close_job()

    def _before_stop(self, stopping):
        """No stop agreed yet, in a job with rounds (with none -- async -- every worker ends on its own)."""
        return self.stop_round is None and not stopping and not self.stop_elsewhere and self._latest >= 0

    def _note_stop(self, stopping):
        """Keep a stop agreed outside the rounds (``stopping``): once agreed it holds for every later call."""
        if stopping:
            self.stop_elsewhere = True

    def _after_stop(self, round_):
        """True for a round no worker may hold: one after the round whose ballot stopped the job, or
        any round still to close once the job agreed to stop elsewhere (ESync's RESET comes after its
        last round's entry closed, so every entry still open is for a later round)."""
        return self.stop_elsewhere or (self.stop_round is not None and round_ > self.stop_round)

    def _refuse(self, rank, round_, token, now):
        """Answer ``rank``'s entry of ``round_`` (after the stop) with ``over``: it trains no more, the
        record counts it late (the cause of its join: it came back while the last round was open)."""
        self.training.discard(rank)
        causes = [cause for r, cause, _ in self.joins if r == rank]
        self._record("late", rank, causes[-1] if causes else RESTARTED, None, now)
        return [(rank, token, Entered(round_, 0, 0, over=True))]

    def note_left_loop(self, rank, now=None):
        """``rank`` left its loop in a job without rounds (``async``), where its goodbye cannot be told from
        its end (every worker ends on its own): the caller, who knows (the simulator's ``--events``),
        records the leave, at ``now``. Nothing else changes: the goodbye that follows removes it."""
        if rank in self.training and not self._held_rounds():
            self._record("leave", rank, LEFT_ITS_LOOP, None, now)

    def note_round(self, round_):
        """A job whose rounds another rule counts (nodelay's transfers) started round ``round_``: a rank
        that stops before the job's stop then left its loop (the record), as in a job of rounds here."""
        self._latest = max(self._latest, round_)

    def _next_round(self, rank):
        """The first round ``rank`` no longer takes part in: the one after the last it was a member of."""
        taken = [r for r, members in self.members.items() if rank in members]
        if not taken and not self._held_rounds() and self.joined_from.get(rank, 0) == 0:
            return None   # a job without rounds (async), a rank started again there included
        return max(taken) + 1 if taken else self.joined_from.get(rank, 0)

    def _held_rounds(self):
        """False while no worker has entered a round: in ``async`` (no rounds), for ever; a leave's or
        join's round is then named None."""
        return self._latest >= 0 or bool(self.members)

    def _record(self, event, rank, cause, round_, now):
        self.events.append({"event": event, "rank": rank, "cause": cause, "round": round_,
                            "t": None if now is None else round(float(now), 3)})

    def _required(self, round_):
        """The workers round ``round_``'s entry waits for: those training, less the rejoined
        ones whose first round comes later; of a round :meth:`name` named, only those named."""
        named = self.named.get(round_)
        return {r for r in self.training if self.joined_from.get(r, 0) <= round_
                and (named is None or r in named)}

    # -- closing -------------------------------------------------------------------
    def _close_entries(self, now=None):
        out = []
        for round_ in sorted(self.entries):
            entry = self.entries[round_]
            if self._after_stop(round_):
                # entered before the stop was agreed (a rank that rejoined while the last round was open)
                del self.entries[round_]
                self.entry_counts.pop(round_, None)
                for rank, (token, _) in sorted(entry.items()):
                    out.extend(self._refuse(rank, round_, token, now))
                continue
            if not entry or not self._required(round_) <= set(entry):
                continue
            del self.entries[round_]
            self.named.pop(round_, None)
            self.members[round_] = frozenset(entry)
            answer = Entered(round_, len(entry), sum(ballot for _, ballot in entry.values()),
                             _sum_counts(self.entry_counts.pop(round_, {}), entry))
            if answer.ballots and self.stop_round is None:
                self.stop_round = round_
            out.extend((rank, token, answer) for rank, (token, _) in sorted(entry.items()))
        return out

    def _close_rounds(self):
        out = []
        for round_ in sorted(set(self.done_ranks) | set(self.waiting)):
            members = self.members[round_]
            done = self.done_ranks.get(round_, {})
            if not members - set(done) <= self.gone:
                continue
            self.done_ranks.pop(round_, None)
            answer = Done(round_, complete=members <= set(done))
            self.closed[round_] = answer.complete
            out.extend((rank, token, answer) for rank, token in sorted(done.items()))
            out.extend((rank, token, answer) for rank, token in sorted(self.waiting.pop(round_, {}).items()))
        return out

    def _close_job(self):
        live = self.ranks - self.gone
        chief = summary_rank(self.ranks, self.gone)
        out = []
        for rank, (token, k) in sorted(self.finishing.items()):
            if all(self.finish_calls.get(r, 0) >= k for r in live):
                out.append((rank, token, Finished(chief)))
        for rank, _, _ in out:
            del self.finishing[rank]
        return out

    def _fail(self, message):
        self.failed = TooFewWorkers(message)
        out = [(rank, token, self.failed) for entry in self.entries.values() for rank, (token, _) in entry.items()]
        out += [(rank, token, self.failed) for done in self.done_ranks.values() for rank, token in done.items()]
        out += [(rank, token, self.failed) for waits in self.waiting.values() for rank, token in waits.items()]
        out += [(rank, token, self.failed) for rank, (token, _) in self.finishing.items()]
        self.entries.clear()
        self.done_ranks.clear()
        self.waiting.clear()
        self.finishing.clear()
        return sorted(out, key=lambda r: r[0])

    def stats(self):
        """The record: each round's members, the rounds each rank took part in, each departure
        (rank, cause, round being entered), each rejoin (rank, cause, first round it takes part in)
        and ``events``: each leave of a rank that trained and each join, in order (``event``, ``rank``,
        ``cause``, ``round``: the first round it no longer / again takes part in, ``t``: the
        caller's clock in seconds, None when it gave none)."""
        taken = {}
        for round_, members in sorted(self.members.items()):
            for rank in members:
                taken.setdefault(rank, []).append(round_)
        return {"members": {str(r): sorted(ms) for r, ms in sorted(self.members.items())},
                "rounds_by_rank": {str(r): rounds for r, rounds in sorted(taken.items())},
                "departures": [{"rank": rank, "cause": cause, "round": round_}
                               for rank, cause, round_ in self.departures],
                "joins": [{"rank": rank, "cause": cause, "round": round_}
                          for rank, cause, round_ in self.joins],
                "events": [dict(e) for e in self.events],
                "min_workers": self.min_workers}


HEARTBEAT_TIMEOUT = "heartbeat timeout"
"""The record's cause of a death only the State Server saw (silent for its heartbeat timeout)."""
SAID_GOODBYE = "said goodbye"
"""The record's cause of a worker that said goodbye while it still trained."""
MATCH_SLACK_S = 1.0
"""Seconds by which the launcher's sight of a death may follow the State Server's (both clocks are Unix time,
read on the launcher's host) and still be the same death."""


def rounds_as_ranges(rounds):
    """``[0, 1, 2, 5, 6]`` -> ``[[0, 2], [5, 6]]`` (inclusive ranges, in order)."""
    out = []
    for r in sorted(rounds):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return out


def job_events(record, exits=(), origin=0.0, takeovers=()):
    """The leaves and joins of a job for its summary, from the round rendezvous' record and the launcher's.

    Args:
        record: the State Server's membership record (:meth:`RoundRendezvous.stats` with ``slots``:
            rank -> slot; event times in Unix seconds).
        exits: the launcher's record of workers whose process ended while the job went on: dicts with
            ``slot``, ``cause`` ("killed by signal 9", "exit code 3") and ``unix`` (when it saw it).
        origin: the Unix time the summary's seconds count from (the run's start).
        takeovers: ``--max-restarts`` above 1, the launcher's record of the spares that took over a slot:
            dicts with ``slot``, ``spare`` and ``unix``; the slot's joins, in time order, get ``spare``.

    Returns:
        ``{"events": [...], "rounds_by_slot": {slot: [[first, last], ...]}}``; each event has ``t_s``
        (seconds since ``origin``), ``event`` ("leave" / "join" / "late": a restarted worker back after the
        job's end, which took part in nothing, or back while the last round was open, whose entry
        of the round after it was refused), ``slot``, ``rank``, ``round`` (the first
        round it no longer / again takes part in; None for a process end the State Server never counted)
        and ``cause``: "left its loop", "killed by signal N" / "exit code N" (the launcher saw the process
        end), "heartbeat timeout" (only the State Server's silence watch saw it), "said goodbye" or
        "restarted".
    """
    slots = {int(r): s for r, s in (record.get("slots") or {}).items()}
    unused = sorted((dict(e) for e in exits), key=lambda e: e["unix"])
    events = []
    for e in record.get("events", ()):
        slot = e.get("slot", slots.get(e["rank"]))
        t, cause = e["t"], e["cause"]
        if e["event"] == "leave" and cause not in (LEFT_ITS_LOOP, "bye"):
            seen = [x for x in unused if x["slot"] == slot and (t is None or x["unix"] <= t + MATCH_SLACK_S)]
            if seen:
                unused.remove(seen[0])
                t, cause = seen[0]["unix"], seen[0]["cause"]
            else:
                cause = HEARTBEAT_TIMEOUT
        elif cause == "bye":
            cause = SAID_GOODBYE
        events.append({"t_s": None if t is None else round(t - origin, 3), "event": e["event"], "slot": slot,
                       "rank": e["rank"], "round": e["round"], "cause": cause})
    ranks = {s: r for r, s in slots.items()}
    events += [{"t_s": round(x["unix"] - origin, 3), "event": "leave", "slot": x["slot"],
                "rank": ranks.get(x["slot"]), "round": None, "cause": x["cause"]} for x in unused]
    events.sort(key=lambda e: float("inf") if e["t_s"] is None else e["t_s"])
    for slot in {t["slot"] for t in takeovers}:
        joins = [e for e in events if e["slot"] == slot and e["event"] in ("join", "late")]
        for event, taken in zip(joins, sorted((t for t in takeovers if t["slot"] == slot),
                                              key=lambda t: t["unix"])):
            event["spare"] = taken["spare"]
    # A rank may come back for another slot (two workers restarted at once swap ranks): its rounds from
    # each join on belong to the slot that joined.
    by_slot = {}
    for r, taken in record.get("rounds_by_rank", {}).items():
        mine = [e for e in record.get("events", ()) if e["rank"] == int(r)]
        holders = [(-1, mine[0].get("slot", slots.get(int(r))) if mine else slots.get(int(r)))]
        # (a join that names no round came before any round was held: it holds them all)
        holders += [(-1 if e["round"] is None else e["round"], e.get("slot", slots.get(int(r))))
                    for e in mine if e["event"] == "join"]
        for round_ in taken:
            slot = [s for first, s in holders if first <= round_][-1]
            by_slot.setdefault(slot, []).append(round_)
    rounds = {str(s): rounds_as_ranges(rs) for s, rs in sorted(by_slot.items(), key=lambda kv: kv[0])}
    return {"events": events, "rounds_by_slot": rounds}


# -- the round rendezvous' wire records (the plugin: mxhet.control.rules.MembershipRule) --------

@w.reply_record
class EnteredReply(w.Reply):
    """The answer to :class:`RoundEnter` once every worker still training has
    entered: the ``round``, ``target`` its number of members, ``ballots`` how
    many of them want to stop after it (``stop``: any), ``counts`` the
    element-wise sum of the members' ``counts`` (() if none sent any);
    ``over``: the round comes after the job's agreed stop -- the worker takes
    part in nothing more (``target`` 0), takes the final model and ends."""
    TYPE = "round_entered"
    round: int = 0
    target: int = 0
    ballots: int = 0
    stop: bool = False
    counts: tuple = ()
    over: bool = False
    CHECKS = {"round": w.integer(), "target": w.integer(), "ballots": w.integer(), "stop": w.check_bool,
              "counts": w.check_counts, "over": w.check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundEnter(w.Request):
    """A synchronous round on ``dist_async``: the worker enters round ``round``
    with its stop ballot and, for ESync, its count vector (mxhet.policy.aggregation)."""
    TYPE = "round_enter"
    REPLY = EnteredReply
    round: int
    want_stop: bool
    counts: tuple = ()
    CHECKS = {"round": w.integer(), "want_stop": w.check_bool, "counts": w.check_counts}


@w.reply_record
class DoneReply(w.Reply):
    """The answer to :class:`RoundDone` once every member pushed or is gone:
    ``ready`` when every member pushed (the round is complete)."""
    TYPE = "round_done_reply"
    round: int = 0
    ready: bool = False
    CHECKS = {"round": w.integer(), "ready": w.check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundDone(w.Request):
    """The worker's push of round ``round`` is applied on the servers."""
    TYPE = "round_done"
    REPLY = DoneReply
    round: int
    CHECKS = {"round": w.integer()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundWait(w.Request):
    """The worker waits until every push of round ``round`` is applied (it need not be a member):
    answered with :class:`DoneReply` as the members are (:meth:`RoundRendezvous.wait`)."""
    TYPE = "round_wait"
    REPLY = DoneReply
    round: int
    CHECKS = {"round": w.integer()}


@w.reply_record
class FinishedReply(w.Reply):
    """The answer to :class:`RoundFinish` once no worker trains any more (the k-th: once every
    rank still in the job sent its k-th): ``chief``, the rank that does the chief's end-of-job
    duties (the lowest rank still in the job; -1: none)."""
    TYPE = "round_finished"
    chief: int = -1
    CHECKS = {"chief": w.integer(-1)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundFinish(w.Request):
    """The worker stopped training (the job's stop, or its script left the loop).
    The answer (:class:`FinishedReply`) waits until no worker trains any
    more: the global model is final."""
    TYPE = "round_finish"
    REPLY = FinishedReply


@dataclasses.dataclass(frozen=True, kw_only=True)
class MembershipRecord(w.RecordRequest):
    """Rank 0 asks for the round rendezvous' record (each leave and join, the rounds
    each rank took part in, the slots; for its run's summary), in pages."""
    TYPE = "membership_record"
