"""ESync's round deadline (``--round-deadline D``) as pure code.

Algorithm 2 makes every round as long as the slowest device's one iteration:
at 117x the fast devices aggregate once per 117 of their iterations. With a
deadline D, a round waits only for the devices whose capability c (seconds
per iteration, round trip included) is at most D times the fastest device's;
the others are *late*. A late device keeps iterating from the global model it
last pulled; when its iteration ends, its delta is folded into the first round
whose membership has not closed yet, with a staleness-aware weight.

Why a multiple of the fastest device's time rather than seconds: the same D
means the same thing for every model and machine (a round lasts at most about
D fast iterations), which is what one recommended configuration needs; a bound
in seconds would have to be re-chosen per model. D >= 1; with D at or above
the profile's slowdown nobody is late and the rounds are Algorithm 2's.

Rounds and staleness. A device in round b trains from the global model that
round b-1 produced. Its delta entering round t (applied to the model round t-1
produced) has missed t - b rounds: staleness s = t - b, 0 for a device on time.
Weight a(s) = 1 / (1 + s), the polynomial decay of FedAsync (Xie et al., 2019,
a = 1), which asynchronous Local-SGD work also discounts stale deltas by; the
round's deltas are combined with shares a_i / sum(a) (on-time devices a = 1),
so the shares sum to one and the update keeps the scale of a plain mean.

A round's membership closes when the first device it waits for is told READY:
from then on its members and shares are fixed, and a late delta arriving later
enters the next round. Everything here is plain data and an injected round
number; nothing reads a clock.

Round length (``--round-length L``, only with a deadline). A round of the
devices on time lasts as long as the slowest of them needs for one iteration:
when only the fastest are on time, every round is one fast iteration and the
exchange (push and pull of the whole model) can take as long as the
iteration itself. With L, a device on time is READY only once it has done
n_min(c) = max(1, round(L * c_min / c)) local iterations in its round (c its
capability, c_min the fastest present device's), and Algorithm 2 says READY:
a round lasts about L fast iterations, a device on time of c = 4 c_min does
L/4 of them, one slower than about 2 L fast iterations its single iteration.
Late devices are unchanged. Rounded to the nearest count, not down: whoever
finishes its count first waits for the others, |n_min(c) * c - L * c_min| at
most, and devices of nearly equal speed (never exactly equal on a real
cluster) then all do L; floored, the one a hair slower than the fastest
would do L - 1 and idle for most of an iteration every round.

L = D is the natural pairing: with L < D a device within the bound can be
slower than a round (it still does one iteration, and the round waits for
it); with L >= D every device on time fits one or more iterations in a
round, and the slower ones are late.

Late memory (``--late-memory``, only with a deadline). Between two of a late
device's deltas the rounds hold only the devices on time. On label-skewed
data (each device its own classes) those rounds pull the model towards the
fast devices' classes and undo what the late delta added: the global model
swings with every late arrival. With the memory, every round a late device is
absent from adds its latest delta again, at 1/N of the round's update (N the
devices that contribute to the round: its members and the absent ones
remembered), while the members keep their shares -- the memory of MIFA (Gu et
al., 2021), where an absent client's latest update stands in for the one it
cannot send. A device's memory is its latest *late* delta: one that enters a
round on time again drops it (it is a member of every round then), and so does
its departure. Which rounds add which memory is decided here, once per round
when its membership closes: :attr:`Membership.remembered` (absent rank -> the
round its remembered delta entered, a version the engines cache by) and
:attr:`Membership.keeper`, the one member that adds them (the lowest rank on
time: a device on time is a member of every round, so it keeps its copies
across rounds and fetches a memory once per late delta, not once a round).
"""
import dataclasses
import math

from ..errors import ConfigError


def check_deadline(value):
    """``value`` as a float deadline (0 = off), or ConfigError naming it.

    Raises:
        ConfigError: for a value that is not 0 and not a finite number >= 1.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError("round_deadline must be 0 (off) or a number >= 1, got %r" % (value,))
    if value != 0 and value < 1:
        raise ConfigError("round_deadline must be 0 (off) or a number >= 1 (a multiple of the fastest "
                          "device's iteration time), got %r" % (value,))
    return float(value)


def check_round_length(value, deadline):
    """``value`` as a float round length (0 = off), or ConfigError naming it.

    Raises:
        ConfigError: for a value that is not 0 and not a finite number >= 1, or
            a round length without a deadline (``deadline`` 0).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError("round_length must be 0 (off) or a number >= 1, got %r" % (value,))
    if value != 0 and value < 1:
        raise ConfigError("round_length must be 0 (off) or a number >= 1 (iterations of the fastest "
                          "device), got %r" % (value,))
    if value and not deadline:
        raise ConfigError("round_length (--round-length) %r needs round_deadline (--round-deadline) > 0"
                          % (value,))
    return float(value)


def min_local_iters(round_length, capability, fastest):
    """n_min = max(1, round(L * c_min / c)), halves rounded up: the fewest local
    iterations a device on time of ``capability`` c does in a round under round
    length ``round_length`` L (0: off, 1), ``fastest`` c_min the fastest present
    device's capability (seconds per iteration; None or inf while nobody is
    measured: 1). A device not measured yet (c None or inf) does 1; one as fast
    as c_min (c <= c_min, 0 included) round(L)."""
    if not round_length or fastest is None or not math.isfinite(fastest):
        return 1
    if capability is None or not math.isfinite(capability):
        return 1
    share = round_length if capability <= fastest else round_length * fastest / capability
    return max(1, int(math.floor(share + 0.5)))


def staleness_weight(staleness):
    """a(s) = 1 / (1 + s) for a delta that missed ``staleness`` rounds (int >= 0).

    Raises:
        ValueError: for a negative or non-integer staleness.
    """
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise ValueError("staleness must be an integer >= 0, got %r" % (staleness,))
    return 1.0 / (1.0 + staleness)


def waited(capabilities, deadline, running=None):
    """The ranks a round waits for: c <= D * min(c) over ``capabilities``
    (rank -> seconds per iteration, None or inf while unmeasured).

    A device not measured yet is waited for (Algorithm 2 counts it as the
    slowest until its test batch reports) unless ``running`` (rank -> seconds
    its test batch has run so far, a lower bound of its c) already exceeds the
    bound: otherwise the first round would still last one slow iteration.
    Everyone is waited for while nobody is measured or the deadline is off (0).
    """
    known = [c for c in capabilities.values() if c is not None and math.isfinite(c)]
    if not deadline or not known:
        return set(capabilities)
    bound = deadline * min(known)
    running = running or {}
    return {r for r, c in capabilities.items()
            if (c <= bound if c is not None and math.isfinite(c) else running.get(r, 0.0) <= bound)}


def training_start(origin, test_end, test_c):
    """Where the running time of a device not measured yet counts from, on the
    State Server's clock: its own start (``origin``) unless the first test batch
    reported -- it ended at ``test_end`` (the query's t_e) and lasted ``test_c``
    (its capability) -- began more than ``test_c`` after it; then that test
    batch's start, ``test_end - test_c``.

    Why: :func:`waited` bounds an unmeasured device's test batch by the time it
    has been running. In the simulator every device starts with the State
    Server (a test batch begins one registration round trip after it, less
    than its c, which includes that round trip), so the State Server's start
    stays the origin and nothing changes. On the cluster the workers start,
    load their data and join PS-LITE seconds after the State Server: counted
    from its start, a fast device whose test batch was reported a moment after
    another's would be late in round 0. Their test batches begin together,
    after the start-up barrier, so the first one's start is where they all
    begin.
    """
    begun = test_end - test_c
    return begun if begun - origin > test_c else origin


@dataclasses.dataclass(frozen=True)
class Membership:
    """A closed round: its ``members`` (rank -> share of the combined delta, summing
    to one), the late ranks' staleness, and ``target`` = the number of members.
    Under the late memory (``memory``), ``remembered`` (absent rank -> the round its
    remembered delta entered) and the member that adds them, ``keeper`` (-1: none)."""
    round: int
    members: dict
    late: dict
    remembered: dict = dataclasses.field(default_factory=dict)
    keeper: int = -1
    memory: bool = False   # under the late memory: the late members' deltas are remembered

    @property
    def target(self):
        return len(self.members)

    @property
    def memory_share(self):
        """1/N: the weight of each remembered delta in the round's update, N the members and the
        absent devices remembered (0 without a memory to add)."""
        if not self.remembered or self.keeper < 0:
            return 0.0
        return 1.0 / (len(self.members) + len(self.remembered))

    def memory_for(self, rank):
        """What ``rank``'s READY carries of the memory: ``(remembered, share)`` for the keeper
        (remembered as a flat ``(rank, round, rank, round, ...)`` tuple, by rank), ``((), 0.0)``
        for every other member."""
        if rank != self.keeper or not self.remembered:
            return (), 0.0
        return tuple(x for r in sorted(self.remembered) for x in (r, self.remembered[r])), self.memory_share


class RoundBook:
    """The rounds' memberships under a deadline: late arrivals, closing, shares.

    Raises (methods):
        ValueError: a late delta announced twice before it entered a round,
            a base round after the round it would enter, or a round closed
            twice with different devices.
    """

    def __init__(self, memory=False):
        self._pending = {}    # round -> {late rank: its base round}
        self._closed = {}     # round -> Membership
        self._entered = {}    # rank -> the round its pending late delta enters
        self.memory = bool(memory)   # --late-memory
        self._remembered = {}        # rank -> the round its latest late delta entered (under the memory)

    def is_closed(self, round_):
        return round_ in self._closed

    def membership(self, round_):
        """The closed round's :class:`Membership`, or None while it is open."""
        return self._closed.get(round_)

    def arrive(self, rank, base_round, open_round):
        """A late device in round ``base_round`` finished an iteration while the
        devices the rounds wait for are in ``open_round``: its delta enters
        ``open_round``, or the round after if that one has closed. Returns the round."""
        if rank in self._entered:
            raise ValueError("rank %d's late delta is already due in round %d" % (rank, self._entered[rank]))
        round_ = open_round
        while round_ in self._closed:
            round_ += 1
        if base_round > round_:
            raise ValueError("rank %d's base round %d is after round %d" % (rank, base_round, round_))
        self._pending.setdefault(round_, {})[rank] = base_round
        self._entered[rank] = round_
        return round_

    def close(self, round_, on_time):
        """Close ``round_`` with the ranks ``on_time`` (the devices it waited
        for) and the late deltas due in it; returns its :class:`Membership`
        (again, unchanged, for a round already closed)."""
        done = self._closed.get(round_)
        if done is not None:
            return done
        late = {r: round_ - b for r, b in self._pending.pop(round_, {}).items()}
        weights = {r: 1.0 for r in on_time if r not in late}
        weights.update({r: staleness_weight(s) for r, s in late.items()})
        total = sum(weights.values())
        members = {r: w / total for r, w in sorted(weights.items())}
        for r in late:
            del self._entered[r]
        remembered, keeper = {}, -1
        if self.memory:
            for r in members:   # a late delta is remembered, one on time forgets the rank's
                if r in late:
                    self._remembered[r] = round_
                else:
                    self._remembered.pop(r, None)
            remembered = {r: v for r, v in sorted(self._remembered.items()) if r not in members}
            keeper = min((r for r in members if r not in late), default=-1)
        done = self._closed[round_] = Membership(round_, members, late, remembered, keeper, self.memory)
        return done

    def remembered(self):
        """Under the late memory: rank -> the round its remembered delta entered (a copy)."""
        return dict(self._remembered)

    def pending_ranks(self):
        """The ranks whose late delta waits for a round that has not closed."""
        return sorted(self._entered)

    def last_closed(self):
        """The latest round closed so far (None before the first)."""
        return max(self._closed, default=None)

    def due(self, rank):
        """The round ``rank``'s late delta waits for (None when it has none pending)."""
        return self._entered.get(rank)

    def forget(self, rank):
        """Drop a departed rank's pending late delta (it will never be pushed) and its memory."""
        self._remembered.pop(rank, None)
        round_ = self._entered.pop(rank, None)
        if round_ is not None:
            self._pending.get(round_, {}).pop(rank, None)
