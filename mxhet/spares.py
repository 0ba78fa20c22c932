"""Spare worker processes reserved at launch (``mxhet-launch --elastic --max-restarts K``, K > 1).

MXNet 1.9.1's PS-LITE scheduler serves one recovery of a dead node per job (``van.cc:104``), so a
second worker started again would abort it. Instead the launcher starts K extra PS-LITE workers with
the job; each waits, idle, until the launcher hands it a dead worker's slot, and then trains as that
slot. The PS-LITE side of it, kept in this one module:

* every PS-LITE node registers at start-up, so a spare creates its kvstore with the others, at
  ``import mxhet`` (before the script reads its slot, which the spare does not know yet);
* every worker's ``kv.init`` ends in a PS-LITE barrier over all workers, spares included: a daemon
  thread of the spare answers them by calling the barrier in a loop (its last call then waits for
  ever, harmlessly: under ``--elastic`` nothing calls PS-LITE's barrier after the start-up, which
  would count the dead);
* once given a slot, the spare's ``kv.init`` does nothing (the keys live on the servers already, and
  its barrier would wait for ever): a single-device worker's push and pull need no local state from it;
* every worker's kvstore reports the job's rank and size, not PS-LITE's: ``num_workers`` without the
  spares, ``rank`` = PS-LITE's rank less the spares' ranks below it, and a spare given a slot reports
  the rank the launcher names (the dead worker's: the State Server takes that rank back).

The launcher's side is :mod:`mxhet.launcher.jobplan` (placement, ranks) and
:mod:`mxhet.launcher.supervisor` (the orders in ``MXHET_SPARE_FILE``: a file in the launcher's progress
directory for a local spare; for a remote one (``--launcher ssh``) a file on the spare's host, which the
launcher writes over ssh with :func:`remote_write_command`). A spare removes its order file once read.
"""
import functools
import json
import os
import shlex
import threading
import time

#: Seconds between two looks of an idle spare at its order file.
ORDER_POLL_S = 0.2


def job_rank(ps_rank, spare_ranks):
    """The job's rank of the worker PS-LITE numbers ``ps_rank``: the spares' ranks are skipped."""
    return ps_rank - sum(1 for r in spare_ranks if r < ps_rank)


def read_order(path):
    """The launcher's order to a spare, a dict, or None while there is none.

    ``{"slot": S, "rank": R, "env": {...}}`` makes it the worker of slot S with job rank R (its
    environment updated by ``env``); ``{"over": true}``: the job's workers are done, it exits 0."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return json.loads(text) if text.strip() else None


def write_order(path, order):
    """Write ``order`` (see :func:`read_order`) atomically."""
    with open(path + ".tmp", "w") as f:
        f.write(order_text(order))
    os.replace(path + ".tmp", path)


def remote_write_command(path):
    """The shell command that writes an order read from its stdin to ``path`` on a remote spare's host,
    as atomically as :func:`write_order` (a rename in the same directory): the spare never reads half of
    one. Its exit status is 0 only once the order is in place."""
    return "cat > {tmp} && mv -f {tmp} {path}".format(tmp=shlex.quote(path + ".tmp"), path=shlex.quote(path))


def order_text(order):
    """``order`` as :func:`write_order` writes it (and :func:`remote_write_command` takes it on stdin)."""
    return json.dumps(order)


def wait_for_order(path, poll_s=ORDER_POLL_S, sleep=time.sleep):
    """Block until the launcher's order arrives; returns it and removes its file (on a remote host
    nothing else would: the launcher's progress directory is not there)."""
    while True:
        order = read_order(path)
        if order is not None:
            try:
                os.remove(path)
            except OSError:
                pass
            return order
        sleep(poll_s)


@functools.lru_cache(maxsize=None)
def _adapter_class():
    import mxnet as mx

    class JobKVStore(mx.kv.KVStore):
        """A PS-LITE kvstore that reports the job's rank and size (the spares left out)."""

        @property
        def rank(self):
            return self._mxhet_rank

        @property
        def num_workers(self):
            return self._mxhet_num_workers

        def init(self, key, value):
            if self._mxhet_skip_init:
                return   # a spare given a slot: the keys are on the servers, and the barrier would hang
            super().init(key, value)

    return JobKVStore


def adapt(kv, rank, num_workers, skip_init=False):
    """Make ``kv`` (an ``mxnet.kv.KVStore``) report ``rank`` and ``num_workers``, and skip its
    ``init`` when ``skip_init``; the same object and handle (the Trainer finds it as the script's)."""
    kv.__class__ = _adapter_class()
    kv._mxhet_rank = rank
    kv._mxhet_num_workers = num_workers
    kv._mxhet_skip_init = skip_init
    return kv


def _answer_barriers(kv, barrier):
    while True:
        barrier(kv)


def install(setup, kvstore_type, original_create):
    """Install ``mx.kv.create`` for a launched worker of a job with spares (``setup``: a
    :class:`mxhet.config.SpareSetup`). In a spare, this joins PS-LITE, waits for its order and
    either exits 0 (the job's end) or returns as the worker of the slot it is given."""
    import mxnet as mx
    if getattr(mx.kvstore.create, "mxhet_spares", False):
        return
    made = {}

    def adapted(kv):
        return adapt(kv, job_rank(kv.rank, setup.spare_ranks), setup.num_workers)

    if setup.spare_file:
        from .gluon_private import kvstore_barrier   # imported here: the thread runs while mxhet is imported
        kv = original_create(kvstore_type)
        threading.Thread(target=_answer_barriers, args=(kv, kvstore_barrier), name="mxhet-spare-barriers",
                         daemon=True).start()
        order = wait_for_order(setup.spare_file)
        if order.get("over"):
            os._exit(0)   # PS-LITE's exit barrier would count the dead
        os.environ.update(order["env"])
        os.environ.pop("MXHET_SPARE_FILE", None)
        made["kv"] = adapt(kv, int(order["rank"]), setup.num_workers, skip_init=True)

    def create(name="local"):
        # One PS-LITE connection per process: a second kvstore would wait for ever in a start-up barrier.
        if "kv" not in made:
            made["kv"] = adapted(original_create(kvstore_type if name == "dist" else name))
        return made["kv"]
    create.mxhet_alias = kvstore_type
    create.mxhet_spares = True
    create.__wrapped__ = original_create
    mx.kvstore.create = create
