"""The simulator's effects of ``gcada`` and ``cada`` (:mod:`mxhet.protocol.programs_gcada`).

The same decisions as the cluster (:mod:`mxhet.modes.gcada`): the rule is
:class:`~mxhet.control.gcada.GroupCoordinator` behind the real
:class:`~mxhet.control.server.StateService`, and the servers' step is
:class:`kvstore_ext.gcada.GroupAMSGrad` applied through MXNet's updater path,
with the groups' last gradients and the norms in the same reserved keys. A
:class:`~mxhet.protocol.effects.Download` pulls θ^k (a request, then the
transfer) and sends a ``GroupWatch``; the
:class:`~mxhet.protocol.effects.WatchedCompute` after it lasts one
iteration's virtual time (exponential under ``--slowdown-dist exp``) -- or
less: the watch's answer that a teammate claimed the upload ends it the
moment it arrives.

With ``--latency-ms 0 --per-key-ms 0`` and a large bandwidth, messages and
transfers take no virtual time: an iteration then lasts exactly the longest,
over the selected groups, of the group's shortest computing time -- the
paper's model (eqs. 10, 14).
"""
import mxnet as mx

from kvstore_ext import keys as ps_keys
from kvstore_ext.gcada import GroupAMSGrad
from ..control import messages as m
from ..control.gcada import group_of
from ..dataplane import nbytes
from ..modes.gcada import check_rule_options
from ..modes.registry import get_mode
from ..protocol.effects import (BeginIteration, ClaimUpload, Download, Selection, StepServers, Upload,
                                WatchedCompute)
from .engine import Servers


class _GroupKeys:
    """The servers' G-CADA keys of one simulation (norms, per-group last gradients)."""

    def __init__(self, sim):
        opts = sim.spec.resolve(sim.job.mode_options)
        check_rule_options(opts)
        n = len(sim.devices)
        self.groups = get_mode(sim.job.mode).groups_for(n, opts)
        self.rule = dict(groups=self.groups, max_delay=opts["max_delay"], c=float(opts["c"]))
        layout = ps_keys.group_key_layout(self.groups, 1, num_params=len(sim.devices[0].params))
        self.grad_keys = list(sim.grad_keys)
        first = sim.devices[0].weights()
        self.norm_keys = [ps_keys.group_norm_key(i, layout) for i in self.grad_keys]
        self.group_keys = [[ps_keys.group_grad_key(i, g, layout) for i in self.grad_keys] for g in range(self.groups)]
        arrays = {key: mx.nd.zeros((self.groups + 1,)) for key in self.norm_keys}
        arrays.update({key: mx.nd.zeros(first[i].shape, dtype=first[i].dtype)
                       for keys in self.group_keys for key, i in zip(keys, self.grad_keys)})
        if not isinstance(sim.servers.updater, GroupAMSGrad):
            raise TypeError("the servers of a %s simulation must run GroupAMSGrad" % sim.job.mode)
        self.store = Servers(arrays, sim.servers.updater)   # the same rule object as the parameter keys'
        self.trigger = [mx.nd.zeros(first[i].shape, dtype=first[i].dtype) for i in self.grad_keys]
        self.model_bytes = nbytes(self.trigger)


def _keys(sim):
    if getattr(sim, "_gcada", None) is None:
        sim._gcada = _GroupKeys(sim)
    return sim._gcada


def _ask(sim, dev, cls, **fields):
    t0 = sim.env.now
    dev.stats.state_queries += 1
    reply = yield from sim.request(dev, dev.message(cls, **fields))
    sim.blocked(dev, t0, query=True)
    return reply


def _watch(sim, dev, k, group, dropped):
    """GroupWatch over the link; ``dropped`` succeeds when the answer says drop."""
    net = sim.job.network
    request = dev.message(m.GroupWatch, iteration=k, group=group)   # numbered now: requests arrive in order
    yield sim.env.timeout(net.message(dev.slot))
    dev.stats.state_queries += 1
    reply = sim._answer(dev, request)
    if reply is None:   # deferred until a member claims the upload; _deliver adds the way back
        event = sim.env.event()
        sim._deferred[(dev.rank, request.seq)] = event
        reply = yield event
    else:
        yield sim.env.timeout(net.message(dev.slot))
    dev.stats.state_replies += 1
    if reply.iteration == k and not reply.keep and not dropped.triggered:
        dropped.succeed()


def _trigger(sim, gk, dev, k, group):
    """The servers' step of iteration ``k`` and its norms to the State Server."""
    net = sim.job.network
    t0 = sim.env.now
    transfer = net.transfer(dev.slot, gk.model_bytes, len(gk.grad_keys))
    yield sim.env.timeout(transfer)
    for key, value in zip(gk.grad_keys, gk.trigger):
        sim.servers.apply(key, value)
    yield sim.env.timeout(transfer)   # θ^{k+1} back
    small = net.transfer(dev.slot, 4 * (gk.groups + 1) * len(gk.norm_keys), len(gk.norm_keys))
    yield sim.env.timeout(small)
    for key in gk.norm_keys:
        gk.store.apply(key, mx.nd.zeros((gk.groups + 1,)))
    yield sim.env.timeout(small)
    sim.blocked(dev, t0, sync=True)
    total = sum(gk.store.weights[key].asnumpy().astype("float64") for key in gk.norm_keys)
    dev.stats.bytes_pushed += gk.model_bytes
    dev.stats.bytes_pulled += gk.model_bytes
    yield from _ask(sim, dev, m.GroupStepped, iteration=k, group=group, delta_sq=float(total[0]),
                    group_sq=[float(x) for x in total[1:]])


def _group(sim, dev, gk):
    return group_of(dev.slot, len(sim.devices), gk.groups)


def _begin(sim, dev, effect):
    gk = _keys(sim)
    reply = yield from _ask(sim, dev, m.GroupBegin, iteration=effect.iteration, group=_group(sim, dev, gk),
                            want_stop=effect.want_stop, smoothness=dev.smoothness, **gk.rule)
    joined = getattr(dev, "joined_at", None)
    if joined is not None and getattr(dev, "gcada_joined_at", None) != joined and not reply.stop:
        # its first request after an --events join: the coordinator's next iteration is its first back
        dev.gcada_joined_at = joined
        dev.stats.rejoined_at_round = reply.iteration
    return Selection(reply.iteration, stop=reply.stop, target=int(reply.step_servers), ready=reply.download)


def _download(sim, dev, effect):
    gk = _keys(sim)
    net = sim.job.network
    t0 = sim.env.now
    yield sim.env.timeout(net.message(dev.slot))
    model = sim.servers.snapshot(gk.grad_keys)
    yield sim.env.timeout(net.transfer(dev.slot, gk.model_bytes, len(gk.grad_keys)))
    sim.take_global(dev, model, gk.grad_keys)
    sim.blocked(dev, t0, sync=True)
    dev.stats.bytes_pulled += gk.model_bytes
    dev.stats.downloads += 1
    dropped = sim.env.event()
    sim.__dict__.setdefault("_gcada_watch", {})[dev.slot] = dropped
    sim.env.process(_watch(sim, dev, effect.iteration, _group(sim, dev, gk), dropped))


def _watched_compute(sim, dev, effect):
    dropped = sim._gcada_watch.pop(dev.slot)
    t1 = sim.env.now
    duration = dev.iteration_time(t1, sim.job.base_iter_s, sim.job.jitter)
    yield sim.env.timeout(duration) | dropped
    if dropped.triggered:   # a teammate finished first: this work is dropped at once
        dev.stats.compute_s += sim.env.now - t1
        dev.stats.aborted += 1
        dev.skip_batch()
        return False
    dev.stats.compute_s += duration
    dev.compute(local_step=effect.local_step)
    return True


def _claim(sim, dev, effect):
    gk = _keys(sim)
    claim = yield from _ask(sim, dev, m.GroupDone, iteration=effect.iteration, group=_group(sim, dev, gk))
    return bool(claim.upload)


def _upload(sim, dev, effect):
    gk = _keys(sim)
    net = sim.job.network
    group = _group(sim, dev, gk)
    grads = [dev.params[i].grad().copy() for i in gk.grad_keys]
    t2 = sim.env.now
    yield sim.env.timeout(net.transfer(dev.slot, gk.model_bytes, len(gk.grad_keys)))
    for key, value in zip(gk.group_keys[group], grads):
        gk.store.apply(key, value)
    yield sim.env.timeout(net.message(dev.slot))   # the push's acknowledgement
    sim.blocked(dev, t2, sync=True)
    dev.stats.bytes_pushed += gk.model_bytes
    dev.stats.uploads += 1
    done = yield from _ask(sim, dev, m.GroupUploaded, iteration=effect.iteration, group=group)
    return bool(done.step_servers)


def _step_servers(sim, dev, effect):
    gk = _keys(sim)
    yield from _trigger(sim, gk, dev, effect.iteration, _group(sim, dev, gk))


def zero_group(sim, dev):
    """``dev`` left and its group has no member left (the goodbye's ``retired``): it zeroes the
    group's last gradient on the servers, as the cluster's worker does at its goodbye, so their sum
    no longer carries a shard nobody trains on."""
    gk = _keys(sim)
    yield sim.env.timeout(sim.job.network.transfer(dev.slot, gk.model_bytes, len(gk.grad_keys)))
    for key, w in zip(gk.group_keys[_group(sim, dev, gk)], gk.trigger):
        gk.store.apply(key, mx.nd.zeros(w.shape, dtype=w.dtype))


HANDLERS = {BeginIteration: _begin, Download: _download, WatchedCompute: _watched_compute, ClaimUpload: _claim,
            Upload: _upload, StepServers: _step_servers}
"""The simulator's handlers of G-CADA's effects (added to :mod:`mxhet.sim.program`'s)."""
