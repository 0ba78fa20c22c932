"""Key layout of the parameter server.

MXNet routes a small array with integer key ``k`` to server
``(k * 9973) % num_servers`` (``kvstore_dist.h``), computed in a C ``int``: keys
must stay below 2**31 / 9973 (about 215 000) or the product overflows.

* ``[0, PREDUCE_KEY_BASE)``: model parameters, in the Trainer's sorted order.
* ``[PREDUCE_KEY_BASE, CONTROL_KEY_BASE)``: Partial Reduce's rendezvous slots
  (:func:`preduce_keys`).
* ``[CONTROL_KEY_BASE, PROBE_KEY_BASE)``: control values (e.g. the stop vote of
  synchronous modes). The server stores the plain sum of the pushes.
* ``[PROBE_KEY_BASE, MAX_KEY)``: the updater probe, one key per server. The
  server stamps ``sum + PROBE_STAMP`` so that a worker can tell whether the
  mxhet updater ran (see :mod:`kvstore_ext.probe`).
"""

CONTROL_KEY_BASE = 90_000
STOP_VOTE_KEY = CONTROL_KEY_BASE
ESYNC_COUNT_KEY = 94_999  # ESync: the devices' step and sample counts (their sum); the last control key
#: ``Trainer.allreduce_grads()`` in mode sync: parameter i's gradient sum at
#: ``ALLREDUCE_KEY_BASE + i`` (a control key: the server stores the plain sum).
ALLREDUCE_KEY_BASE = CONTROL_KEY_BASE + 1
ALLREDUCE_KEY_END = 93_999
#: Modes ``sync`` and ``nodelay``: how many workers still train, exchanged before
#: each round's push (a control key on ``dist_sync``: the sum of 1 per training
#: worker, 0 per worker that left its loop), see :class:`mxhet.modes.gradient.Sync`.
LIVE_KEY = 93_999
#: Mode ``dylu``: rank r's seconds per iteration at ``SPEED_KEY_BASE + r`` (a
#: control key on ``dist_async``: the last push is the value), see :func:`speed_keys`.
SPEED_KEY_BASE = 94_000
SPEED_KEY_END = 94_999   # ESYNC_COUNT_KEY
PROBE_KEY_BASE = 95_000
MAX_KEY = 100_000
PROBE_STAMP = 4096.0

_ROUTING_PRIME = 9973  # MXNet's load-balancing heuristic for small arrays


def server_of(key, num_servers):
    """Index of the server that holds the (small) array with this key."""
    return (key * _ROUTING_PRIME) % num_servers


def probe_keys(num_servers):
    """One probe key per server, in server order.

    Raises:
        ValueError: if ``num_servers`` is not a positive integer.
    """
    if not isinstance(num_servers, int) or num_servers < 1:
        raise ValueError("num_servers must be a positive integer, got %r" % (num_servers,))
    found = {}
    key = PROBE_KEY_BASE
    while len(found) < num_servers:
        if key >= MAX_KEY:
            raise ValueError("no probe key range left for %d servers" % num_servers)
        found.setdefault(server_of(key, num_servers), key)
        key += 1
    return [found[s] for s in range(num_servers)]


def is_param_key(key):
    return 0 <= key < PREDUCE_KEY_BASE


#: Partial Reduce (mode ``preduce``): slot s of parameter i is ``PREDUCE_KEY_BASE + s * num_params + i``;
#: a group's members push their weighted models there and pull the sum.
PREDUCE_KEY_BASE = 60_000


def preduce_keys(slot, num_params):
    """The keys of rendezvous ``slot`` for a model of ``num_params`` arrays.

    Raises:
        ValueError: for a bad argument, or when the slot lies beyond the range.
    """
    for name, value in (("slot", slot), ("num_params", num_params)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("%s must be an integer >= 0, got %r" % (name, value))
    first = PREDUCE_KEY_BASE + slot * num_params
    if first + num_params > CONTROL_KEY_BASE:
        raise ValueError("Partial Reduce slot %d of a %d-array model lies beyond the key range (%d keys)"
                         % (slot, num_params, CONTROL_KEY_BASE - PREDUCE_KEY_BASE))
    return list(range(first, first + num_params))


def memory_keys(rank, num_params):
    """ESync's ``--late-memory``: the keys of rank ``rank``'s latest late delta, for a model of
    ``num_params`` arrays. They reuse Partial Reduce's range (the two modes never share a job's
    servers); :class:`kvstore_ext.updaters.MemberSum` keeps the last push there.

    Raises:
        ValueError: for a bad argument, or when the rank's keys lie beyond the range.
    """
    try:
        return preduce_keys(rank, num_params)
    except ValueError:
        raise ValueError("the late memory of rank %r for a %r-array model lies beyond the key range (%d keys)"
                         % (rank, num_params, CONTROL_KEY_BASE - PREDUCE_KEY_BASE)) from None


def is_preduce_key(key):
    return PREDUCE_KEY_BASE <= key < CONTROL_KEY_BASE


def is_control_key(key):
    return CONTROL_KEY_BASE <= key < PROBE_KEY_BASE


def is_probe_key(key):
    return PROBE_KEY_BASE <= key < MAX_KEY


# G-CADA (kvstore_ext.gcada): ``[GROUP_KEY_BASE, GROUP_KEY_END)`` holds, per
# parameter key i, the servers' norms of the last step (slot 0) and each
# group's last uploaded gradient (slot g + 1), slot s at
# ``GROUP_KEY_BASE + s * GROUP_STRIDE + i``. Base and stride are multiples of
# 5040 = 7!, hence of every server count up to 10 (and 12, 14, 15, 16, ...): a
# slot's key and parameter i's key go to the same server, so the updater of i
# reads them in one process.
GROUP_STRIDE = 5040
GROUP_KEY_BASE = 20 * GROUP_STRIDE   # 100 800
GROUP_KEY_END = 215_000
MAX_GROUPS = (GROUP_KEY_END - GROUP_KEY_BASE) // GROUP_STRIDE - 1   # 21


def group_key_layout(groups, num_servers=1, num_params=None):
    """``(base, stride)`` of the G-CADA key range, checked for ``groups``
    groups, ``num_servers`` servers and ``num_params`` parameter keys (None:
    not checked here).

    Raises:
        ValueError: naming a bad argument, or when the range is too small.
    """
    for name, value in (("groups", groups), ("num_servers", num_servers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("%s must be a positive integer, got %r" % (name, value))
    if groups > MAX_GROUPS:
        raise ValueError("G-CADA's key range holds at most %d groups, got %d" % (MAX_GROUPS, groups))
    if GROUP_STRIDE % num_servers:
        raise ValueError("G-CADA's key layout needs a server count dividing %d, got %d" % (GROUP_STRIDE, num_servers))
    if num_params is not None and not 0 < num_params <= GROUP_STRIDE:
        raise ValueError("G-CADA's key range holds at most %d parameter keys, got %r" % (GROUP_STRIDE, num_params))
    return GROUP_KEY_BASE, GROUP_STRIDE


def group_grad_key(param, group, layout):
    """The key of ``group``'s last gradient of parameter ``param``."""
    base, stride = layout
    return base + (group + 1) * stride + param


def group_norm_key(param, layout):
    """The key the servers write parameter ``param``'s step norms to."""
    base, _ = layout
    return base + param


def split_group_key(key, layout):
    """``(slot, param)`` of a G-CADA key (slot 0: norms, g + 1: group g), or None."""
    base, stride = layout
    if not base <= key < GROUP_KEY_END:
        return None
    return divmod(key - base, stride)


def is_group_key(key):
    return GROUP_KEY_BASE <= key < GROUP_KEY_END


def speed_keys(num_workers):
    """Mode ``dylu``: the control keys of ranks ``0 .. num_workers - 1``' speeds.

    Raises:
        ValueError: for a bad count, or more workers than the range holds.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError("num_workers must be a positive integer, got %r" % (num_workers,))
    if SPEED_KEY_BASE + num_workers > SPEED_KEY_END:
        raise ValueError("the speed key range holds at most %d workers, got %d"
                         % (SPEED_KEY_END - SPEED_KEY_BASE, num_workers))
    return list(range(SPEED_KEY_BASE, SPEED_KEY_BASE + num_workers))
