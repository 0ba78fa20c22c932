"""G-CADA's decisions on the State Server, as pure code (no I/O, no clock).

The G-CADA paper (grouping-based CADA), Algorithm 1: M workers in G groups of
M/G; every member of a group holds the same data shard. At iteration k the
parameter server selects group g when

* its age of information τ_g ≥ D, or
* the lazy condition (eq. 9) is violated:
  ``L_g² · ‖θ^k − θ^{k−τ_g}‖² > c · Σ_{d=1..D} ‖θ^{k+1−d} − θ^{k−d}‖²``

L_g is the smoothness constant of group g's loss. Where it is unknown it is
folded into c (L_g = 1, the default); for a quadratic loss the workers compute
it exactly from their shard (:func:`mxhet.losses.shard_smoothness`) and send it
with ``GroupBegin``. Every member
of a selected group downloads θ^k and computes a gradient; only the first to
finish uploads it (:meth:`GroupRule.claim`), the others drop their work. Once
every selected group has uploaded, the servers apply the AMSGrad step over the
fresh and the stale group gradients and report the squared norms the next
selection needs (:meth:`GroupRule.stepped`). AoI: τ_g = 1 when selected, +1
otherwise; every τ_g starts at D, so every group is selected at k = 0. With
D = 1 every group is selected every iteration.

CADA is the same rule with groups of one; distributed Adam/AMSGrad is CADA
with D = 1.

Counts (eqs. 5-6): per iteration the downloads |M_D^k| (members told they
are selected, each pulls θ^k and computes one mini-batch gradient) and the
uploads |M_U^k| (one per selected group); communication C = Σ(|M_D| + |M_U|),
computation P = Σ|M_D| · μ (μ samples per mini-batch).
"""
import collections
import dataclasses

from ..policy.specs import DEFAULT_MAX_DELAY
from ..errors import ProtocolError
from . import wire as w


def check_groups(num_workers, groups):
    """Validate a worker/group layout.

    Raises:
        ValueError: naming a bad ``groups`` (a positive divisor of ``num_workers``).
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError("num_workers must be a positive integer, got %r" % (num_workers,))
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or num_workers % groups:
        raise ValueError("groups must be a positive divisor of the %d workers, got %r" % (num_workers, groups))
    return groups


def group_of(slot, num_workers, groups):
    """The group of worker ``slot``: contiguous slots, M/G per group
    (slots 0..M/G−1 form group 0, as in the paper's Fig. 1).

    Raises:
        ValueError: for a bad layout or slot.
    """
    check_groups(num_workers, groups)
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < num_workers:
        raise ValueError("slot must be in 0..%d, got %r" % (num_workers - 1, slot))
    return slot // (num_workers // groups)


def lazy_selection(aoi, lhs, history, c, max_delay, smoothness=None):
    """The groups selected at one iteration (Algorithm 1, lines 2-3).

    Args:
        aoi: τ_g per group.
        lhs: ‖θ^k − θ^{k−τ_g}‖² per group.
        history: ‖θ^{k+1−d} − θ^{k−d}‖² for d = 1, 2, ... (newest first; terms
            before θ^0 are absent and count 0).
        c: the constant of eq. (9), > 0.
        max_delay: D >= 1.
        smoothness: L_g per group (None: all 1, folded into c).

    Returns:
        the sorted list of selected group indices.
    """
    rhs = c * sum(list(history)[:max_delay])
    if smoothness is None:
        smoothness = [1.0] * len(aoi)
    return [g for g, (tau, left, lg) in enumerate(zip(aoi, lhs, smoothness))
            if tau >= max_delay or lg * lg * left > rhs]


def check_smoothness_value(value):
    """Raises ValueError unless ``value`` is a finite number > 0 (an L_g)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError("the smoothness constant L_g must be a finite number > 0, got %r" % (value,))
    return float(value)


class GroupRule:
    """Selection, age of information and first-finisher arbitration.

    Iterations advance one at a time: :attr:`iteration` is the one in
    progress, :attr:`selected` its groups. The servers' step for it is
    reported with :meth:`stepped`, which selects the groups of the next one.

    Args:
        groups: G >= 1.
        max_delay: D >= 1.
        c: eq. (9)'s constant, > 0.
        group_size: workers per group (M/G), for the nominal counts.
        smoothness: L_g per group (default all 1: folded into c); see
            :meth:`set_smoothness`.

    Raises:
        ValueError: naming a bad argument.
    """

    def __init__(self, groups, max_delay=DEFAULT_MAX_DELAY, c=0.3, group_size=1, smoothness=None):
        for name, value in (("groups", groups), ("max_delay", max_delay), ("group_size", group_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError("%s must be a positive integer, got %r" % (name, value))
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0 or c != c or c == float("inf"):
            raise ValueError("c must be a finite number > 0, got %r" % (c,))
        self.groups, self.max_delay, self.c, self.group_size = groups, max_delay, float(c), group_size
        if smoothness is None:
            smoothness = [1.0] * groups
        if not isinstance(smoothness, (list, tuple)) or len(smoothness) != groups:
            raise ValueError("smoothness must hold one L_g per group (%d), got %r" % (groups, smoothness))
        self.smoothness = [check_smoothness_value(v) for v in smoothness]   # L_g
        self.aoi = [max_delay] * groups          # τ_g^k: every group is selected at k = 0
        self.lhs = [0.0] * groups                # ‖θ^k − θ^{k−τ_g}‖²
        self.history = collections.deque(maxlen=max_delay)  # ‖θ^{k+1−d} − θ^{k−d}‖², newest first
        self.iteration = 0
        self.selected = lazy_selection(self.aoi, self.lhs, self.history, self.c, self.max_delay)
        self.retired = set()   # groups whose every member left the job: not selected while retired
        self.back = set()      # retired groups a member came back to: selected at the next iteration
        self.claims = {}       # group -> rank that uploads its gradient this iteration
        self.uploaded = set()  # groups whose upload reached the servers this iteration
        self.downloads = 0     # members told "selected" this iteration
        self.log = []          # one record per finished iteration

    def set_smoothness(self, group, value):
        """Set L_g of ``group`` (before the selection it first matters for:
        every group is selected at k = 0 by its AoI, so any value that arrives
        before the first step is in time).

        Raises:
            ValueError: for a bad group or value.
        """
        self._check_group(group)
        self.smoothness[group] = check_smoothness_value(value)

    def retire(self, group):
        """Every member of ``group`` left the job: it is never selected again,
        and it leaves the current iteration's selection unless its upload is in
        (the step may then be due at once: :attr:`step_due`).

        Raises:
            ValueError: for a bad group.
        """
        self._check_group(group)
        self.retired.add(group)
        if group in self.selected and group not in self.uploaded:
            self.selected = [g for g in self.selected if g != group]
            self.claims.pop(group, None)

    def unretire(self, group):
        """A member of retired ``group`` is back (a worker started again): the group is
        selected again from the next iteration on, and at that one whatever its age of
        information (the servers hold a zero for its last gradient: its retirement's zeroing,
        :attr:`GroupCoordinator.to_zero`, is kept); the iteration in progress is left as it is.
        Returns True if the group was retired.

        Raises:
            ValueError: for a bad group.
        """
        self._check_group(group)
        if group not in self.retired:
            return False
        self.retired.discard(group)
        self.back.add(group)
        return True

    def reopen(self, group):
        """The rank that claimed ``group``'s upload died before its upload was
        in: the claim is open again (a teammate's gradient of θ^k replaces
        whatever part of the dead one's push reached the group's keys: a
        group key holds the last push, never a sum). Returns True if a claim
        was reopened."""
        self._check_group(group)
        if group in self.uploaded or self.claims.pop(group, None) is None:
            return False
        return True

    def is_selected(self, group):
        return group in self.selected

    def open_for(self, group):
        """True if ``group`` is selected in the current iteration and nobody claimed its upload yet."""
        return group in self.selected and group not in self.claims

    def download(self, group):
        """A member of ``group`` asks for work in the current iteration.

        Returns:
            True if it should download θ^k and compute (its group is selected
            and not yet claimed), else False.
        """
        self._check_group(group)
        if not self.open_for(group):
            return False
        self.downloads += 1
        return True

    def claim(self, group, rank, iteration):
        """A member of ``group`` finished its gradient of ``iteration``.

        Returns:
            True if it is the first finisher (it uploads); False: drop the work.
        """
        self._check_group(group)
        if iteration != self.iteration or not self.open_for(group):
            return False
        self.claims[group] = rank
        return True

    def claimant(self, group):
        """The rank uploading ``group``'s gradient this iteration, or None."""
        return self.claims.get(group)

    def upload_done(self, group, rank, iteration):
        """The claimant's gradient reached the servers.

        Returns:
            True once every selected group's upload is in: the servers' step
            for this iteration is due (the caller triggers it).

        Raises:
            ValueError: if ``rank`` did not claim ``group`` in ``iteration``.
        """
        if iteration != self.iteration or self.claims.get(group) != rank:
            raise ValueError("rank %d did not claim group %d's upload in iteration %d (claims %s, iteration %d)"
                             % (rank, group, iteration, self.claims, self.iteration))
        self.uploaded.add(group)
        return self.step_due

    @property
    def step_due(self):
        """True when every selected group has uploaded (at once for an empty selection)."""
        return self.uploaded.issuperset(self.selected)

    def stepped(self, iteration, delta_sq, group_sq, now=0.0):
        """The servers applied the step of ``iteration``: θ^{k+1} exists.

        Args:
            delta_sq: ‖θ^{k+1} − θ^k‖².
            group_sq: per group, ‖θ^{k+1} − θ^{(g)}‖², θ^{(g)} the model its
                latest upload was computed on (θ^k for this iteration's
                selected groups).
            now: a clock reading for the log (seconds).

        Returns:
            the groups selected for iteration k+1.

        Raises:
            ValueError: for the wrong iteration, a step before every upload,
                or bad norms.
        """
        if iteration != self.iteration:
            raise ValueError("step for iteration %d, the current one is %d" % (iteration, self.iteration))
        if not self.step_due:
            raise ValueError("step for iteration %d before every selected group uploaded (%s of %s)"
                             % (iteration, sorted(self.uploaded), self.selected))
        norms = [delta_sq] + list(group_sq)
        if len(norms) != self.groups + 1 or not all(isinstance(x, (int, float)) and x >= 0 for x in norms):
            raise ValueError("expected ‖Δθ‖² and %d group norms, all >= 0, got %r" % (self.groups, norms))
        self.log.append({"k": iteration, "t": now, "selected": list(self.selected), "downloads": self.downloads,
                         "uploads": len(self.uploaded)})
        for g in range(self.groups):
            self.aoi[g] = 1 if g in self.selected else self.aoi[g] + 1
        self.history.appendleft(float(delta_sq))
        self.lhs = [float(x) for x in group_sq]
        self.iteration += 1
        self.selected = lazy_selection(self.aoi, self.lhs, self.history, self.c, self.max_delay, self.smoothness)
        if self.back:
            self.selected = sorted(set(self.selected) | self.back)
            self.back = set()
        if self.retired:
            self.selected = [g for g in self.selected if g not in self.retired]
        self.claims, self.uploaded, self.downloads = {}, set(), 0
        return self.selected

    def totals(self, batch_size=1):
        """Counts of eqs. (5)-(6) over the finished iterations."""
        downloads = sum(r["downloads"] for r in self.log)
        uploads = sum(r["uploads"] for r in self.log)
        selected = sum(len(r["selected"]) for r in self.log)
        return {"iterations": len(self.log), "downloads": downloads, "uploads": uploads,
                "communication": downloads + uploads, "computation": downloads * batch_size,
                "group_selections": selected,
                "nominal_communication": selected * (self.group_size + 1),
                "nominal_computation": selected * self.group_size * batch_size}

    def _check_group(self, group):
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < self.groups:
            raise ValueError("group must be in 0..%d, got %r" % (self.groups - 1, group))


class GroupCoordinator:
    """G-CADA's side of the State Server: a :class:`GroupRule` plus the
    answers it defers (workers waiting for an iteration, watches waiting for a
    group's first finisher). Every method returns the reply to its request
    (None when deferred); answers that become due meanwhile are appended to
    :attr:`released` as ``(rank, Reply)``.

    Args:
        num_workers: M.
        groups, max_delay, c: the rule (see :class:`GroupRule`).

    Raises:
        ValueError: for a bad layout or rule.
    """

    def __init__(self, num_workers, groups, max_delay, c):
        check_groups(num_workers, groups)
        self.num_workers = num_workers
        self.rule = GroupRule(groups, max_delay, c, group_size=num_workers // groups)
        self.waiting = {}    # rank -> (seq, wanted iteration, group) of a deferred GroupBegin
        self.watches = {}    # group -> {rank: seq} of deferred GroupWatch requests
        self.triggers = {}   # iteration -> rank told to trigger the servers' step
        self.stop_at = None  # first iteration every worker is told to stop at
        self.released = []
        self.smoothness_from = {}   # group -> the first rank that sent its L_g
        self.group_of = {}   # rank -> its group, from its requests
        self.departed = {}   # group -> its ranks that left the job
        self.dead = set()    # ranks found dead and not back (mxhet-launch --elastic: the heartbeat watch)
        self.died = False    # a rank was found dead: a step a departure made due may wait for a trigger
        self.reopened = set()   # groups of this iteration whose dead claimant's claim is open again
        self.deaths = []     # the record: {"rank", "k", "group", "reopened", "retrigger"} per death
        # groups retired by a death or an --elastic finish: the next trigger zeroes their last gradient
        # (a leaver's goodbye zeroes its own group's)
        self.to_zero = set()
        self._zeroing = {}     # iteration -> the groups its trigger was told to zero
        self.returning = {}    # rank registered again after it died or left -> its group, until its first GroupBegin
        self.joined_from = {}  # rank taken back -> the first iteration it takes part in
        self.joins = []        # the record: {"rank", "k", "group", "reopened_group"} per rank taken back

    def smoothness(self, rank, group, value):
        """A member of ``group`` sends L_g (with every ``GroupBegin``): the first
        sets it, every later one must agree (members hold the same shard).

        Raises:
            ValueError: for a bad value or one that differs from the group's
                (relative tolerance 1e-6).
        """
        value = check_smoothness_value(value)
        rule = self.rule
        first = self.smoothness_from.get(group)
        if first is None:
            rule.set_smoothness(group, value)
            self.smoothness_from[group] = rank
        elif abs(value - rule.smoothness[group]) > 1e-6 * rule.smoothness[group]:
            raise ValueError("rank %d sends L_g = %r for group %d, rank %d sent %r: the members of a group must "
                             "hold the same shard and the same smoothness setting"
                             % (rank, value, group, first, rule.smoothness[group]))

    def check(self, groups, max_delay, c):
        """Raises ValueError if a worker names another rule than the job's."""
        rule = self.rule
        if (groups, max_delay, float(c)) != (rule.groups, rule.max_delay, rule.c):
            raise ValueError("G-CADA rule mismatch: this worker has groups=%d, D=%d, c=%g; the job has "
                             "groups=%d, D=%d, c=%g" % (groups, max_delay, c, rule.groups, rule.max_delay, rule.c))

    def begin(self, rank, seq, wanted, group, want_stop):
        self.group_of[rank] = group
        if rank in self.returning:
            self._take_back(rank, group)
        first = self.joined_from.get(rank, 0)
        joining = first > self.rule.iteration   # taken back during this iteration: it waits for the next
        wanted = max(wanted, first)
        if want_stop and self.stop_at is None:
            self.stop_at = self.rule.iteration + 1
        stopped = self.stop_at is not None and self.rule.iteration >= self.stop_at
        if (wanted > self.rule.iteration and not stopped and not self._untriggered()
                and (joining or not (group in self.reopened and self.rule.open_for(group)))):
            self.waiting[rank] = (seq, wanted, group)
            return None
        return self._assign(rank, seq, group)

    def rejoin(self, rank, group, in_place_of=None):
        """``rank``, which died or left, registered again as a member of ``group`` (a worker started
        again under ``mxhet-launch --max-restarts``; the simulator's device back). It is no longer
        counted gone; its group takes it back at its first :class:`GroupBegin` (:meth:`begin`), so a
        process still starting up holds no iteration: from then on it is selected with its group from
        the next iteration, and a retired group -- every member gone -- is selected again, at that
        iteration whatever its age of information (:meth:`GroupRule.unretire`). ``in_place_of``: the
        dead rank whose slot this process holds, when PS-LITE gave it another dead worker's id (two
        dead at once); the two ranks then swap groups in the count of who is gone.

        Raises:
            ValueError: for a bad group.
        """
        self.rule._check_group(group)
        old = self.group_of.get(rank)
        if old is not None and old != group and in_place_of in self.departed.get(group, ()):
            self.departed[group].discard(in_place_of)
            self.departed.setdefault(old, set()).add(in_place_of)
            self.group_of[in_place_of] = old
        if old is not None:
            self.departed.get(old, set()).discard(rank)
        self.dead.discard(rank)
        self.group_of[rank] = group
        self.returning[rank] = group

    def _take_back(self, rank, group):
        """``rank``'s first request after it registered again: it takes part from the next iteration."""
        del self.returning[rank]
        reopened = self.rule.unretire(group)
        first = self.joined_from[rank] = self.rule.iteration + 1
        self.joins.append({"rank": rank, "k": first, "group": group, "reopened_group": reopened})

    def _untriggered(self):
        """True when a departure made the current iteration's step due and nobody triggers it yet
        (without departures the last upload, or the first request of an empty iteration, triggers it)."""
        return (bool(self.rule.retired or self.died) and self.rule.step_due
                and self.rule.iteration not in self.triggers)

    def leave(self, rank, zero=False):
        """``rank`` left the job (its goodbye): its watch is forgotten; once every
        member of its group has left, the group is retired (:meth:`GroupRule.retire`)
        and, if that makes the current step due, a waiting worker is told to
        trigger it. Returns True if the group was retired now."""
        self.waiting.pop(rank, None)
        self.returning.pop(rank, None)
        group = self.group_of.get(rank)
        if group is None:
            return False
        self.watches.get(group, {}).pop(rank, None)
        gone = self.departed.setdefault(group, set())
        gone.add(rank)
        if len(gone) < self.rule.group_size or group in self.rule.retired:
            return False
        self.rule.retire(group)
        if zero:
            self.to_zero.add(group)
        if self._untriggered() and self.waiting:
            waiter = min(self.waiting, key=lambda r: self.waiting[r][0])
            wseq, _, wgroup = self.waiting.pop(waiter)
            self.released.append((waiter, self._assign(waiter, wseq, wgroup)))
        return True

    def depart(self, rank):
        """``rank`` died (no goodbye; the State Server's heartbeat watch under
        ``mxhet-launch --elastic``). As :meth:`leave`, and at once: if it had
        claimed its group's upload of the current iteration and the upload is
        not in, the claim is reopened and a teammate waiting for the next
        iteration is sent a download of this one (a teammate that asks later
        gets it then); if it was told to trigger the servers' step and the
        step is not reported, a waiting worker is told to trigger it again
        (the servers skip a parameter the dead trigger already stepped:
        :class:`kvstore_ext.gcada.GroupAMSGrad` takes the iteration with the
        trigger). Returns the death's record."""
        k = self.rule.iteration
        group = self.group_of.get(rank)
        claimed = group is not None and self.rule.claimant(group) == rank and group not in self.rule.uploaded
        self.dead.add(rank)
        self.died = True
        self.leave(rank, zero=True)
        event = {"rank": rank, "k": k, "group": group, "reopened": False, "retrigger": False}
        if claimed and group not in self.rule.retired and self.rule.reopen(group):
            event["reopened"] = True
            self.reopened.add(group)
            teammates = [r for r, (_, _, g) in self.waiting.items()
                         if g == group and self.joined_from.get(r, 0) <= k]   # (one taken back waits for k+1)
            if teammates:
                waiter = min(teammates, key=lambda r: self.waiting[r][0])
                wseq, _, wgroup = self.waiting.pop(waiter)
                self.released.append((waiter, self._assign(waiter, wseq, wgroup)))
        if self.triggers.get(k) == rank:
            del self.triggers[k]
            event["retrigger"] = True
            if self._untriggered() and self.waiting:
                waiter = min(self.waiting, key=lambda r: self.waiting[r][0])
                wseq, _, wgroup = self.waiting.pop(waiter)
                self.released.append((waiter, self._assign(waiter, wseq, wgroup)))
        self.deaths.append(event)
        return event

    def _assign(self, rank, seq, group):
        k = self.rule.iteration
        if self.stop_at is not None and k >= self.stop_at:
            return GroupSelection(seq=seq, iteration=k, stop=True)
        if self.rule.step_due and k not in self.triggers:  # nobody selected: this worker has the servers step
            self.triggers[k] = rank
            zero = self._zeroing[k] = tuple(sorted(self.to_zero))
            return GroupSelection(seq=seq, iteration=k, step_servers=True, zero_groups=zero)
        return GroupSelection(seq=seq, iteration=k, download=self.rule.download(group))

    def watch(self, rank, seq, iteration, group):
        claimant = self.rule.claimant(group)
        if iteration != self.rule.iteration or claimant is not None or not self.rule.is_selected(group):
            return WatchReply(seq=seq, iteration=iteration, keep=iteration == self.rule.iteration and claimant == rank)
        self.watches.setdefault(group, {})[rank] = seq
        return None

    def done(self, rank, seq, iteration, group):
        won = self.rule.claim(group, rank, iteration)
        if won:
            for other, other_seq in self.watches.pop(group, {}).items():
                self.released.append((other, WatchReply(seq=other_seq, iteration=iteration, keep=other == rank)))
        return ClaimReply(seq=seq, iteration=iteration, upload=won)

    def uploaded(self, rank, seq, iteration, group):
        due = self.rule.upload_done(group, rank, iteration)
        trigger = due and iteration not in self.triggers
        if trigger:
            self.triggers[iteration] = rank
        zero = ()
        if trigger:
            zero = self._zeroing[iteration] = tuple(sorted(self.to_zero))
        return UploadedReply(seq=seq, iteration=iteration, step_servers=trigger, zero_groups=zero)

    def stepped(self, rank, seq, iteration, delta_sq, group_sq, now):
        if self.triggers.get(iteration) != rank:
            raise ValueError("rank %d reports the step of iteration %d, which rank %s triggers"
                             % (rank, iteration, self.triggers.get(iteration)))
        self.rule.stepped(iteration, delta_sq, group_sq, now=now)
        for group, watchers in self.watches.items():
            self.released.extend((r, WatchReply(seq=s, iteration=iteration)) for r, s in watchers.items())
        self.watches = {}
        self.reopened = set()
        self.to_zero -= set(self._zeroing.pop(iteration, ()))   # zeroed by this step's trigger
        for waiter, (wseq, wanted, group) in list(self.waiting.items()):
            if wanted <= self.rule.iteration:
                del self.waiting[waiter]
                self.released.append((waiter, self._assign(waiter, wseq, group)))
        return SteppedReply(seq=seq, iteration=iteration)

    def stats(self, batch_size=1):
        rule = self.rule
        return {"groups": rule.groups, "max_delay": rule.max_delay, "c": rule.c, "group_size": rule.group_size,
                "smoothness": list(rule.smoothness),
                "iterations": rule.log, "totals": rule.totals(batch_size),
                **({"deaths": list(self.deaths)} if self.deaths else {}),
                **({"joins": list(self.joins)} if self.joins else {})}


def loads_of(workers, batch_size):
    """Eqs. (5)-(6) from the workers' counters (``downloads``, ``uploads``):
    communication C = Σ downloads + uploads, computation P = Σ downloads · μ
    (μ = ``batch_size`` samples); None when no worker downloaded (other modes)."""
    downloads = sum(int(w.get("downloads", 0)) for w in workers)
    uploads = sum(int(w.get("uploads", 0)) for w in workers)
    if not downloads:
        return None
    return {"downloads": downloads, "uploads": uploads, "communication": downloads + uploads,
            "computation": downloads * batch_size, "computation_unit": "samples"}


# -- G-CADA's wire records (the plugin: mxhet.control.rules.GCADARule) ------------------------

@w.reply_record
class _GroupAnswer(w.Reply):
    """What every G-CADA answer names: the ``iteration`` it is about."""
    iteration: int = 0
    CHECKS = {"iteration": w.integer()}


def _check_groups_list(name, value):
    """A list of group indices (at most 1024): kept as a tuple, so a decoded record equals the sent one."""
    if not isinstance(value, (list, tuple)) or len(value) > 1024:
        raise ProtocolError("field %r must be a list of at most 1024 group indices" % (name,))
    for item in value:
        w.check_int(name, item)
    return tuple(value)


@w.reply_record
class GroupSelection(_GroupAnswer):
    """The answer to :class:`GroupBegin` (deferred until ``iteration``'s groups
    are selected): ``download`` θ and compute (the worker's group is selected);
    ``step_servers``: no group is selected, this worker triggers the servers'
    step (first zeroing the last gradient of the groups in ``zero_groups``:
    retired under ``--elastic``, see :meth:`GroupCoordinator.depart`);
    ``stop``: the job ends."""
    TYPE = "group_selection"
    download: bool = False
    step_servers: bool = False
    stop: bool = False
    zero_groups: tuple = ()
    CHECKS = {"download": w.check_bool, "step_servers": w.check_bool, "stop": w.check_bool,
              "zero_groups": _check_groups_list}


@w.reply_record
class WatchReply(_GroupAnswer):
    """The answer to :class:`GroupWatch`, once a member of the group claimed its
    upload of ``iteration`` (or the servers stepped past it): ``keep`` true when
    the claim is this worker's own, false: drop the work at once."""
    TYPE = "group_watch_reply"
    keep: bool = False
    CHECKS = {"keep": w.check_bool}


@w.reply_record
class ClaimReply(_GroupAnswer):
    """The answer to :class:`GroupDone`: ``upload`` true when the worker is its
    group's first finisher (it uploads), false: drop the gradient."""
    TYPE = "group_claim"
    upload: bool = False
    CHECKS = {"upload": w.check_bool}


@w.reply_record
class UploadedReply(_GroupAnswer):
    """The answer to :class:`GroupUploaded`: ``step_servers`` true when it was the
    iteration's last upload and this worker triggers the servers' step (as
    :class:`GroupSelection`, with ``zero_groups``)."""
    TYPE = "group_uploaded_reply"
    step_servers: bool = False
    zero_groups: tuple = ()
    CHECKS = {"step_servers": w.check_bool, "zero_groups": _check_groups_list}


@w.reply_record
class SteppedReply(_GroupAnswer):
    """The answer to :class:`GroupStepped`: the step of ``iteration`` is recorded."""
    TYPE = "group_stepped_reply"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _GroupRequest(w.Request):
    """A request about ``iteration`` from a member of ``group``."""
    iteration: int
    group: int
    CHECKS = {"iteration": w.integer(), "group": w.integer()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupBegin(_GroupRequest):
    """The worker is ready for iteration ``iteration`` or a later one; answered
    with a :class:`GroupSelection`. ``groups``, ``max_delay`` and ``c`` are the
    job's rule (the same from every worker); ``smoothness`` is L_g of the
    worker's group in eq. (9) (1: folded into c; the same from every member);
    ``want_stop`` asks to end training."""
    TYPE = "group_begin"
    REPLY = GroupSelection
    groups: int
    max_delay: int
    c: float
    want_stop: bool
    smoothness: float = 1.0
    CHECKS = {"groups": w.integer(1), "max_delay": w.integer(1), "c": w.check_seconds,  # c: a finite number >= 0
              "want_stop": w.check_bool, "smoothness": w.check_positive}


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupWatch(_GroupRequest):
    """Answered (a :class:`WatchReply`) when a member of the group claims its upload of ``iteration``."""
    TYPE = "group_watch"
    REPLY = WatchReply


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupDone(_GroupRequest):
    """The worker computed its gradient; answered with a :class:`ClaimReply`."""
    TYPE = "group_done"
    REPLY = ClaimReply


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupUploaded(_GroupRequest):
    """The first finisher's gradient is on the servers; answered with an :class:`UploadedReply`."""
    TYPE = "group_uploaded"
    REPLY = UploadedReply


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupStepped(_GroupRequest):
    """The servers applied the step of ``iteration`` and computed ``delta_sq`` =
    ‖θ^{k+1} − θ^k‖² and, per group, ``group_sq`` = ‖θ^{k+1} − θ^{(g)}‖²
    (θ^{(g)}: the model of the group's latest upload)."""
    TYPE = "group_stepped"
    REPLY = SteppedReply
    delta_sq: float
    group_sq: list
    CHECKS = {"delta_sq": w.check_seconds, "group_sq": w.numbers(w.check_seconds, 1024)}   # finite numbers >= 0
