"""Partial Reduce's controller (the P-Reduce paper, Algorithm 2 and §4): a pure rule.

Workers send READY (with their iteration number k) after every local step;
the controller keeps them in a FIFO and, as soon as P are queued, pops them as
a group. Several groups may be reducing at once. For each group it picks

* a *slot*: a set of keys on the parameter servers that the group uses as its
  rendezvous buffer (the members push their weighted models there and pull the
  sum). A slot is reused only after every member of its previous group pulled,
  which a member says with its next READY (or by leaving);
* the members' weights β_j (:func:`constant_weights` or :func:`dynamic_weights`);
* the iteration number every member continues with: max k_j.

Group-frozen avoidance (§4): the sync-graph joins the members of each of the
last T groups. Before adopting the FIFO group the filter checks that the
window ending with it (the last T-1 groups plus this one) connects every live
worker; if not, it builds the group across the components of the last T-1
groups' graph: the queue head, then the earliest queued worker of each other
component, then FIFO. When every queued worker is in the head's component the
head is held until a worker of another component is queued. Every group that
differs from the FIFO group counts as an intervention. The head is always
taken, so a queued worker waits for at most as many groups as are ahead of it.

Departures (a worker's goodbye, :meth:`PartialReduceController.leave`):
the departed rank is never grouped again. Once fewer than P workers are live,
the groups are of all the workers left (one alone reduces with itself, so
the program and the slot accounting stay those of every group). A slot's
updater still counts P pushes a round, so a group of m < P members gets
P - m *filler* pushes of zeros, made by its first member (:attr:`Group.fill`).

Deaths (``mxhet-launch --elastic``, :meth:`PartialReduceController.depart`:
the State Server's heartbeat watch found the rank silent). The dead rank
leaves like one that said goodbye, and its group, if its pushes are not all
in, is settled at once:

* the dead member said its push was in (``push_done``, sent after the servers
  applied it): the group goes on; once the others' pushes are in, every
  survivor pulls Σ β_j·x_j, the dead member's share included, once;
* it had not: the group is *released* (:attr:`PartialReduceController.released`).
  Its slot may hold any part of the dead member's push -- the servers'
  :class:`kvstore_ext.updaters.PartialReduceSum` overwrites a slot key on a
  round's first push and adds the next P-1, per key, so after a partial push
  the key's count is unknown -- and is *retired*: never given to a group
  again. The survivors are told (their ``push_done`` answers ``released``),
  pull nothing and keep their own models and iteration numbers (what they
  pushed sits in the retired slot, read by nobody): nothing is applied twice
  and no one pulled a partial sum. Their next READY queues them again.

A job that may lose workers reserves ``spare_slots`` more slots, one per
death it may see, so retired slots never leave a group waiting. A rank that
died may come back (:meth:`PartialReduceController.join`, a restarted
process): it is live again, and takes the model of the latest group whose
pushes were all in from that group's slot, which is held for it (no group
reuses it) until its first READY.

The sync-graph is kept incrementally (:class:`~mxhet.control.window_graph.WindowGraph`):
adding a group costs O(P log N) amortized and a worker's component is a lookup, instead of a
rebuild over the window for every group.

No model data passes through here; times, sockets and MXNet stay outside. The
State Server (:mod:`mxhet.control.server`) and the simulator call the same
object.
"""
import collections
import dataclasses
import heapq
import itertools
import math

from mxhet.control import wire as w
from mxhet.control.window_graph import WindowGraph
from mxhet.errors import ConfigError
from mxhet.policy.specs import PREDUCE

DEFAULT_ALPHA = 0.5
"""α of the EMA weights (eq. 9); the paper gives none. At 0.5 a model one
iteration behind the newest gets half the newest position's weight, and the
stalest member of a pair never gets more than about α in all."""


def min_window(num_workers, group_size):
    """⌈(N−1)/(P−1)⌉: the fewest groups whose sync-graph can connect N workers."""
    return max(1, math.ceil((num_workers - 1) / (group_size - 1)))


def check_options(opts, num_workers=None):
    """Validate a ``preduce`` option dict: its spec's checks, and P and T
    against N when N is known.

    Raises:
        ConfigError: naming the bad option and value.
    """
    PREDUCE.check(opts)
    p, t = opts["group_size"], opts["frozen_window"]
    if num_workers is not None and p > num_workers:
        raise ConfigError("group_size (P) must be at most the number of workers %d, got %d" % (num_workers, p))
    if t and num_workers is not None and t < min_window(num_workers, p):
        raise ConfigError("frozen_window (T) must be >= ceil((N-1)/(P-1)) = %d, got %d"
                          % (min_window(num_workers, p), t))


def default_window(num_workers, group_size):
    """T used when none is given: twice the minimum, so that randomly formed groups
    usually pass the filter and it only acts on a real freeze."""
    return 2 * min_window(num_workers, group_size)


def default_slots(num_workers, group_size):
    """N − P + 1 slots: enough that a formed group never waits for one (each held
    slot has a member that has not sent READY since, and the new group's P
    members hold none)."""
    return num_workers - group_size + 1


def constant_weights(ks):
    """1/P for each of the P members (Algorithm 2, line 7)."""
    return [1.0 / len(ks)] * len(ks)


def dynamic_weights(ks, alpha=DEFAULT_ALPHA):
    """Staleness-aware weights (§3.3.3) for members at iteration numbers ``ks``.

    Relative staleness k̂_j = max k − k_j + 1 ∈ [1, K]; position h ∈ [1, K]
    has the EMA weight (1−α)·α^(h−1) / (1−α^K) (eq. 9 with k replaced by K,
    h = 1 the newest). Positions no member occupies go to the stalest model
    (the paper's approximation of the missing versions by the oldest one);
    members on the same position split it equally. The weights sum to 1; with
    all k equal they are 1/P.

    Raises:
        ValueError: for no members, a negative k or α outside [0, 1).
    """
    if not ks:
        raise ValueError("a group needs at least one member")
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in ks):
        raise ValueError("iteration numbers must be integers >= 0, got %r" % (ks,))
    if not 0.0 <= alpha < 1.0:
        raise ValueError("alpha must be in [0, 1), got %r" % (alpha,))
    newest = max(ks)
    rel = [newest - k + 1 for k in ks]
    depth = max(rel)
    norm = 1.0 - alpha ** depth
    position = [(1.0 - alpha) * alpha ** (h - 1) / norm for h in range(1, depth + 1)]
    occupied = collections.Counter(rel)
    for h in range(1, depth):
        if h not in occupied:
            position[depth - 1] += position[h - 1]
            position[h - 1] = 0.0
    return [position[h - 1] / occupied[h] for h in rel]


@dataclasses.dataclass(frozen=True)
class Group:
    """One partial reduce: ``members`` (ranks, in the order they were taken),
    their ``weights``, the ``slot`` of keys they meet in, and ``k``, the
    iteration number every member continues with. ``fill``: the zero pushes
    its first member adds so the slot counts P pushes (P minus the members,
    > 0 only once fewer than P workers are live)."""
    id: int
    slot: int
    members: tuple
    weights: tuple
    k: int
    intervened: bool = False
    fill: int = 0

    def fill_of(self, rank):
        """The filler pushes member ``rank`` makes."""
        return self.fill if rank == self.members[0] else 0


class PartialReduceController:
    """The signal queue, group filter, weight generator and slot table.

    Args:
        num_workers: N; ranks are 0..N-1.
        group_size: P, 2 <= P <= N.
        dynamic: staleness-aware weights (else 1/P).
        alpha: α of the dynamic weights, in [0, 1).
        avoid_frozen: run the group filter (§4).
        window: T, groups in the sync-graph (0: :func:`default_window`);
            at least :func:`min_window`.
        num_slots: rendezvous slots (0: :func:`default_slots`).

    Raises:
        ValueError: naming a bad argument.
    """

    def __init__(self, num_workers, group_size, dynamic=False, alpha=DEFAULT_ALPHA, avoid_frozen=True, window=0,
                 num_slots=0, spare_slots=0):
        for name, value in (("num_workers", num_workers), ("group_size", group_size), ("window", window),
                            ("num_slots", num_slots), ("spare_slots", spare_slots)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError("%s must be an integer >= 0, got %r" % (name, value))
        if not 2 <= group_size <= num_workers:
            raise ValueError("group_size P must be in [2, N=%d], got %r" % (num_workers, group_size))
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha < 1.0:
            raise ValueError("alpha must be in [0, 1), got %r" % (alpha,))
        least = min_window(num_workers, group_size)
        if window and window < least:
            raise ValueError("window T must be >= ceil((N-1)/(P-1)) = %d, got %d" % (least, window))
        self.num_workers, self.group_size = num_workers, group_size
        self.dynamic, self.alpha, self.avoid_frozen = bool(dynamic), float(alpha), bool(avoid_frozen)
        self.window = window or default_window(num_workers, group_size)
        self.num_slots = (num_slots or default_slots(num_workers, group_size)) + spare_slots
        self.spare_slots = spare_slots   # > 0 under --elastic
        self.live = set(range(num_workers))
        self.queue = {}              # ranks in READY order (a dict keeps insertion order)
        self.k = {}                  # rank -> iteration number it reported
        self.recent = collections.deque(maxlen=self.window - 1)  # (id, members) of the last T-1 groups
        self.graph = WindowGraph(self.live)  # their sync-graph (None: to be rebuilt)
        self._held_seen = 0          # queued ranks known to be in the held head's component
        self.free_slots = list(range(self.num_slots))  # a heap: the lowest free slot first
        self.slot_holders = {}       # slot -> members that have not pulled yet
        self.holding = {}            # rank -> slot it has not pulled from yet
        self.groups = {}             # id -> Group whose pushes are not all in
        self.pushing = {}            # rank -> id of its group whose pushes are not all in
        self.pushed = {}             # id -> ranks that pushed
        self.next_id = 0
        self.interventions = 0       # groups the filter formed differently from FIFO
        self.holds = 0               # times the filter held the queue head
        self._holding_head = None
        self.grouped = set()         # ranks that have been in a group
        self.never_grouped = set(self.live)  # live ranks that have not
        self.max_concurrent = 0      # most slots held at once (groups reducing or not yet fully pulled)
        self.stop_wanted = False
        self.stopping = False
        self.released = {}           # id -> Group released by a member's death before its push was in
        self.retired = set()         # slots of released groups: their keys' push counts are unknown
        self.complete = {}           # slot -> Group whose full sum it holds (not reused since)
        self.deaths = []             # (rank, id of the group it was in or None, released?) per death
        self.joins = []              # (rank, slot it took the model from or None) per return
        self.small_groups = []       # (id, members) of each group of fewer than P (fewer live workers)

    # -- events ------------------------------------------------------------------
    def ready(self, rank, k):
        """READY from ``rank`` at iteration ``k``; returns the groups formed now.

        Raises:
            ValueError: unknown or departed rank, a rank already queued, one
                whose group's pushes are not all in, or a bad ``k``.
        """
        self._check_rank(rank)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError("iteration number k must be an integer >= 0, got %r" % (k,))
        if rank in self.queue:
            raise ValueError("rank %d is already waiting for a group" % rank)
        if rank in self.pushing:
            raise ValueError("rank %d sent READY before its group's pushes were all in" % rank)
        self.pulled(rank)
        self.k[rank] = k
        self.queue[rank] = None
        return self._form()

    def pulled(self, rank):
        """``rank`` pulled its last group's result: its share of the slot is free."""
        slot = self.holding.pop(rank, None)
        if slot is None:
            return
        holders = self.slot_holders[slot]
        holders.discard(rank)
        if not holders:
            del self.slot_holders[slot]
            heapq.heappush(self.free_slots, slot)

    def push_done(self, rank, group_id):
        """``rank`` pushed its weighted model into group ``group_id``'s slot.

        Returns the members (all of them) once every push is in, else ``[]``.

        Raises:
            ValueError: for an unknown group or a rank not in it.
        """
        group = self.groups.get(group_id)
        if group is None or rank not in group.members:
            raise ValueError("rank %d is not in a group %r waiting for pushes" % (rank, group_id))
        done = self.pushed[group_id]
        done.add(rank)
        if len(done) < len(group.members):
            return []
        del self.groups[group_id], self.pushed[group_id]
        for r in group.members:
            self.pushing.pop(r, None)   # (a member that died after its push is no longer pushing)
        self.complete[group.slot] = group
        return list(group.members)

    def model_k(self, slot):
        """The iteration number of the group whose sum ``slot`` holds (0 if none)."""
        group = self.complete.get(slot)
        return group.k if group is not None else 0

    def was_released(self, group_id):
        """True if group ``group_id`` was released by a death (its members pull nothing)."""
        return group_id in self.released

    def leave(self, rank):
        """``rank`` left the job; returns the groups formed now (the filter may stop holding)."""
        self._check_rank(rank, live=False)
        self.pulled(rank)
        self.live.discard(rank)
        self.never_grouped.discard(rank)
        self.queue.pop(rank, None)
        # A departure is rare (or the end of the job): the sync-graph is
        # rebuilt over the live ranks when it is next needed.
        self.graph = None
        self._graph_changed()
        self._holding_head = None   # the head may have waited for the departed rank's component
        return self._form()

    def depart(self, rank):
        """``rank`` died (it said no goodbye): it leaves as in :meth:`leave`, and the group
        whose pushes are not all in is released unless the dead member's push was in
        (the module docstring). Returns ``(formed, released)``: the groups formed now and
        the group released (None if none).

        Raises:
            ValueError: for a rank that is not one of the job's.
        """
        self._check_rank(rank, live=False)
        released = None
        group_id = self.pushing.get(rank)
        if group_id is not None and rank not in self.pushed[group_id]:
            released = self._release(group_id)
        if rank in self.live:
            self.deaths.append((rank, group_id, released is not None))
        return self.leave(rank), released

    def _release(self, group_id):
        group = self.groups.pop(group_id)
        del self.pushed[group_id]
        self.released[group_id] = group
        for r in group.members:
            del self.pushing[r]
            if self.holding.get(r) == group.slot:
                del self.holding[r]
        self.slot_holders.pop(group.slot, None)
        self.retired.add(group.slot)
        return group

    def join(self, rank):
        """``rank``, which died, is back (a restarted process) and is grouped again from
        its first READY. Returns the slot holding the model of the latest group whose
        pushes were all in -- held for ``rank`` until that READY, so no group reuses it --
        or None when no group completed (or its slot was reused since): the rank then
        starts from the model it has. A rank that is live is left as it is (None).

        Raises:
            ValueError: for a rank that is not one of the job's.
        """
        self._check_rank(rank, live=False)
        if rank in self.live:
            return None
        self.live.add(rank)
        self.queue.pop(rank, None)
        self.graph = None       # rebuilt over the live ranks when next needed
        self._graph_changed()
        self._holding_head = None
        slot = self._newest_complete()
        if slot is not None:
            holders = self.slot_holders.setdefault(slot, set())
            if not holders:
                self.free_slots.remove(slot)   # a free slot: taken off the heap
                heapq.heapify(self.free_slots)
            holders.add(rank)
            self.holding[rank] = slot
        self.joins.append((rank, slot))
        return slot

    def _newest_complete(self):
        """The slot holding the newest complete group's sum, or None."""
        return max(self.complete, key=lambda s: self.complete[s].id) if self.complete else None

    def want_stop(self):
        """A worker wishes to end training. The job stops (:meth:`stop`) once
        every live worker has been in a group, so that none leaves without
        having contributed; until then groups form as usual. Returns
        :meth:`stop`'s ranks when it stops now, else ``[]``."""
        self.stop_wanted = True
        return self.check_stop()

    def check_stop(self):
        """Stop now if a stop is wanted and every live worker has been in a group;
        returns the ranks waiting in the queue then (else ``[]``)."""
        if self.stop_wanted and not self.stopping and not self.never_grouped:
            return self.stop()
        return []

    def stop(self):
        """No more groups: returns the ranks that were waiting in the queue."""
        self.stopping = True
        waiting, self.queue = list(self.queue), {}
        return waiting

    # -- the rule ----------------------------------------------------------------
    def _check_rank(self, rank, live=True):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.num_workers:
            raise ValueError("rank must be in [0, %d), got %r" % (self.num_workers, rank))
        if live and rank not in self.live:
            raise ValueError("rank %d has left the job" % rank)

    def _form(self):
        formed = []
        while not self.stopping and self.queue and len(self.queue) >= self._size() and self.free_slots:
            members, intervened = self._choose()
            if members is None:
                break
            for r in members:
                del self.queue[r]
            formed.append(self._make(members, intervened))
        return formed

    def _size(self):
        """Members of the next group: P, or every live worker once fewer are left."""
        return min(self.group_size, len(self.live))

    def _choose(self):
        """The next group (members, intervened), or (None, False) to hold the head."""
        size = self._size()
        fifo = list(itertools.islice(self.queue, size))
        if not self.avoid_frozen or len(self.recent) < self.window - 1:
            return fifo, False   # warm-up: fewer than T-1 groups formed
        queued = iter(self.queue)
        head = next(queued)
        if self._holding_head == head:
            # Held: only the ranks queued since the last look (all of them
            # after the graph changed) can release the head.
            fresh = itertools.islice(reversed(self.queue), len(self.queue) - self._held_seen)
            if all(self._label(r) == self._label(head) for r in fresh):
                self._held_seen = len(self.queue)
                return None, False
        graph = self._graph()    # the last T-1 groups
        if graph.components - (graph.joined_by(fifo) - 1) == 1:
            self._holding_head = None
            return fifo, False
        group, seen = [head], {self._label(head)}
        for r in queued:
            if len(group) == size:
                break
            label = self._label(r)
            if label not in seen:
                group.append(r)
                seen.add(label)
        if len(seen) == 1:
            # Every queued worker is in the head's component: hold the head
            # until a worker of another component is ready.
            if self._holding_head != head:
                self._holding_head = head
                self.holds += 1
            self._held_seen = len(self.queue)
            return None, False
        self._holding_head = None
        for r in itertools.islice(self.queue, 1, None):
            if len(group) == size:
                break
            if r not in group:
                group.append(r)
        intervened = set(group) != set(fifo)
        return group, intervened

    def _graph(self):
        if self.graph is None:
            self.graph = WindowGraph(self.live)
            for number, members in self.recent:
                self.graph.add(number, members)
        return self.graph

    def _label(self, rank):
        return self._graph().component(rank)

    def _graph_changed(self):
        self._held_seen = 0      # a held head is looked at again against the whole queue

    def _make(self, members, intervened):
        ks = [self.k[r] for r in members]
        weights = dynamic_weights(ks, self.alpha) if self.dynamic else constant_weights(ks)
        slot = heapq.heappop(self.free_slots)
        if self.spare_slots and self.free_slots and slot == self._newest_complete():
            # under --elastic keep the newest complete sum readable while another slot is free: a rank
            # started again takes its model from there (join), and reusing it left none to take
            slot, other = heapq.heappop(self.free_slots), slot
            heapq.heappush(self.free_slots, other)
        self.complete.pop(slot, None)   # its last group's sum is overwritten from now on
        group = Group(id=self.next_id, slot=slot, members=tuple(members), weights=tuple(weights), k=max(ks),
                      intervened=intervened, fill=self.group_size - len(members))
        self.next_id += 1
        if group.fill:
            self.small_groups.append((group.id, group.members))
        self.groups[group.id] = group
        self.pushed[group.id] = set()
        self.slot_holders[slot] = set(members)
        self.max_concurrent = max(self.max_concurrent, len(self.slot_holders))
        for r in members:
            self.holding[r] = slot
            self.pushing[r] = group.id
        self.recent.append((group.id, tuple(members)))
        if self.graph is not None:
            self.graph.add(group.id, members)
            self.graph.expire(self.recent[0][0] if self.recent else group.id + 1)
        self._graph_changed()
        self.grouped.update(members)
        self.never_grouped.difference_update(members)
        if intervened:
            self.interventions += 1
        return group

    def stats(self):
        """Plain data for the State Server's statistics."""
        return {"group_size": self.group_size, "dynamic": self.dynamic, "alpha": self.alpha,
                "avoid_frozen": self.avoid_frozen, "window": self.window, "slots": self.num_slots,
                "groups": self.next_id, "interventions": self.interventions, "holds": self.holds,
                "max_concurrent": self.max_concurrent,
                "released": sorted(self.released), "retired_slots": sorted(self.retired),
                "deaths": [{"rank": r, "group": g, "released": rel} for r, g, rel in self.deaths],
                "joins": [{"rank": r, "model_slot": s} for r, s in self.joins],
                "small_groups": [{"group": g, "ranks": sorted(members)} for g, members in self.small_groups]}


# -- Partial Reduce's wire records (the plugin: mxhet.control.rules.PartialReduceRule) --------

@w.reply_record
class JoinedReply(w.Reply):
    """The answer to :class:`ReduceJoin`: ``model_slot``, for a rank that died and is
    back, the slot holding the latest complete group's model (its starting model),
    and ``k``, that group's iteration number; -1 and 0 otherwise."""
    TYPE = "reduce_joined"
    model_slot: int = -1
    k: int = 0
    CHECKS = {"model_slot": w.integer(-1), "k": w.integer()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReduceJoin(w.Request):
    """Partial Reduce: the worker's settings of the controller (every worker sends
    the same; the first creates the controller): group size P, dynamic weights
    with EMA factor ``alpha``, the group filter and its window T (0: default),
    and ``spare_slots`` beyond N-P+1 (``--elastic``: one per death the job may see)."""
    TYPE = "reduce_join"
    REPLY = JoinedReply
    group_size: int
    dynamic: bool
    alpha: float
    avoid_frozen: bool
    window: int
    spare_slots: int = 0
    CHECKS = {"group_size": w.integer(2), "dynamic": w.check_bool, "avoid_frozen": w.check_bool,
              "window": w.integer(), "alpha": w.check_below_one, "spare_slots": w.integer()}


@w.reply_record
class GroupedReply(w.Reply):
    """The answer to :class:`ReduceReady`: the worker is in group ``round`` (its
    id), whose slot of keys on the servers is ``group_slot``, with this member's
    ``weight``, the iteration number ``k`` to go on with and ``target`` zero
    pushes it adds to a group smaller than P; or ``stop`` (the job ends)."""
    TYPE = "reduce_grouped"
    stop: bool = False
    round: int = 0
    group_slot: int = -1
    weight: float = 0.0
    k: int = 0
    target: int = 0
    CHECKS = {"stop": w.check_bool, "round": w.integer(), "group_slot": w.integer(-1), "weight": w.check_fraction,
              "k": w.integer(), "target": w.integer()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReduceReady(w.Request):
    """Partial Reduce: READY after a local step at iteration number ``k``. The
    answer waits until the worker is in a group (or carries ``stop``)."""
    TYPE = "reduce_ready"
    REPLY = GroupedReply
    k: int
    want_stop: bool
    CHECKS = {"k": w.integer(), "want_stop": w.check_bool}


@w.reply_record
class PushedReply(w.Reply):
    """The answer to :class:`ReducePushed`: every member's push is in (the slot
    holds the sum), or ``released``: a member died before its push was in, the
    group is void and the worker keeps its own model (pulls nothing)."""
    TYPE = "reduce_all_pushed"
    released: bool = False
    CHECKS = {"released": w.check_bool}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReducePushed(w.Request):
    """Partial Reduce: the worker's weighted model is in group ``group``'s slot.
    The answer (:class:`PushedReply`) waits until every member's is (then the
    slot holds the sum), or until the group is released."""
    TYPE = "reduce_pushed"
    REPLY = PushedReply
    group: int
    CHECKS = {"group": w.integer()}


@w.reply_record
class LeftReply(w.Reply):
    """The answer to :class:`ReduceLeave`: ``finals``, the ranks whose final model
    is on the parameter keys so far (after the finish barrier: all of them)."""
    TYPE = "reduce_left"
    finals: int = 0
    CHECKS = {"finals": w.integer()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReduceLeave(w.Request):
    """Partial Reduce under ``--elastic``: the worker trains no more (it is never
    grouped again; it still meets the others at the finish barrier); ``final``:
    its model x_i/N is on the parameter keys (counted in :class:`LeftReply`)."""
    TYPE = "reduce_leave"
    REPLY = LeftReply
    final: bool
    CHECKS = {"final": w.check_bool}
