"""The simulator's model of ``nodelay`` (asynchronous SGD without gradient delay).

The same decisions as the cluster (:mod:`mxhet.modes.nodelay`): the worker is
:class:`~mxhet.policy.nodelay.NoDelayPolicy`, the master the State Server's
:class:`~mxhet.control.nodelay.TransferRule` behind the real
:class:`~mxhet.control.server.StateService`, the merge ``dist_sync`` with the
ESync averaging updater (:class:`~mxhet.sim.engine.SyncRound`). Each device:

* computes iterations of virtual duration; a transfer request that arrives
  meanwhile is carried out at once (thread 2: ``w.x`` handed over, ``x_init
  = x``), except the job's last one, carried out at the end of the iteration;
* announces a round (Notify) after the first gradient since its last
  transfer, without waiting; the answer comes when the rule requests the transfer;
* pushes ``w.x`` and pulls the merged model in a process of its own (the
  data-plane thread), one round after the other;
* takes a merged model in between two iterations (``x_init = PS.x``,
  ``x = x_init + w.x``) and reports it (Merged);
* waits, computing nothing, while ``s == tau``: that time is its ``wait_s``.
"""
from ...control import messages as m
from ...dataplane import nbytes
from ...errors import ConfigError
from ...policy.nodelay import DEFAULT_STALENESS, NoDelayPolicy
from ...policy.worker import Action
from ..engine import sim_driver


class _Mailbox:
    """What reaches a device while it computes or waits: transfer requests and merged models."""

    def __init__(self, env):
        self.env = env
        self.requests = []
        self.arrivals = []
        self.wake = env.event()

    def post(self, box, item):
        box.append(item)
        if not self.wake.triggered:
            self.wake.succeed()

    def rearm(self):
        if self.wake.triggered:
            self.wake = self.env.event()


def send(sim, dev, request, on_reply):
    """A request without waiting; ``on_reply(reply)`` runs when the (possibly deferred) answer arrives."""
    latency = sim.job.network.message(dev.slot)
    there = sim.env.timeout(latency)  # scheduled now: requests reach the State Server in the order sent

    def go():
        yield there
        reply = sim._answer(dev, request)
        if reply is None:  # deferred: the State Server answers when the rule releases it
            event = sim.env.event()
            sim._deferred[(dev.rank, request.seq)] = event
            reply = yield event
        else:
            yield sim.env.timeout(latency)
        if not reply.ok:
            raise ConfigError("State Server refused %s of slot %d: %s" % (request.TYPE, dev.slot, reply.error))
        dev.stats.state_replies += 1
        on_reply(reply)
    dev.stats.state_queries += 1
    sim.env.process(go())


def hand_over(sim, dev, policy, x_init, mailbox):
    """Lines 22-23: hand ``w.x`` over, ``x_init = x``; the push and pull run in a process of their own."""
    weights = dev.weights()
    wx = [x - xi for x, xi in zip(weights, x_init)]
    for x, xi in zip(weights, x_init):
        x.copyto(xi)
    round_, k, _ = policy.transferred()
    dev.stats.rounds += 1
    dev.stats.local_iters.append(k)
    sim.env.process(_courier(sim, dev, round_, wx, mailbox))
    return round_, wx


def _courier(sim, dev, round_, wx, mailbox):
    keys = list(range(len(dev.params)))
    size = nbytes(wx)
    transfer = sim.job.network.transfer(dev.slot, size, len(keys))
    yield sim.env.timeout(transfer)
    rnd = sim.sync_round(("nodelay", round_), keys)
    rnd.arrive(wx)
    yield rnd.done
    yield sim.env.timeout(transfer)
    dev.stats.bytes_pushed += size
    dev.stats.bytes_pulled += size
    mailbox.post(mailbox.arrivals, (round_, rnd.result))


def take_in(sim, dev, policy, x_init, round_, merged):
    """Lines 8-11: ``x_init = PS.x``, ``x = x_init + w.x``; reports the arrival."""
    weights = dev.weights()
    for x, xi, g in zip(weights, x_init, merged):
        wx = x - xi
        g.copyto(xi)
        (xi + wx).copyto(x)
    for k, g in enumerate(merged):
        dev.global_copy[k] = g.copy()
    policy.arrived(round_)
    dev.stats.round_end_s.append(sim.env.now)
    send(sim, dev, dev.message(m.Merged, round=round_), lambda reply: None)


@sim_driver("nodelay")
def nodelay(sim, dev):
    policy = NoDelayPolicy(sim.job.mode_options.get("staleness", DEFAULT_STALENESS))
    mailbox = _Mailbox(sim.env)
    yield from sim.register(dev)
    x_init = [w.copy() for w in dev.weights()]
    policy.arrived(-1)

    def on_request(reply):
        mailbox.post(mailbox.requests, reply)

    def take_requests(stop_ok):
        while mailbox.requests:
            reply = mailbox.requests[0]
            if reply.stop and not stop_ok:
                return
            mailbox.requests.pop(0)
            policy.requested(reply.round, reply.stop)
            hand_over(sim, dev, policy, x_init, mailbox)

    def take_arrivals():
        while mailbox.arrivals:
            round_, merged = mailbox.arrivals.pop(0)
            take_in(sim, dev, policy, x_init, round_, merged)

    while True:
        # Between two iterations: merged models in, due transfers out, and line 5.
        take_arrivals()
        take_requests(stop_ok=True)
        t0 = sim.env.now
        if policy.blocked:
            dev.stats.waited_iterations += 1   # this step ended with the worker waiting at s = tau
        while policy.blocked or (policy.stopping and not policy.done):
            mailbox.rearm()
            yield mailbox.wake
            take_arrivals()
            take_requests(stop_ok=True)
        if sim.env.now > t0:
            sim.blocked(dev, t0)
        if policy.done:
            break
        # One iteration; thread 2 answers transfer requests meanwhile.
        duration = dev.iteration_time(sim.env.now, sim.job.base_iter_s, sim.job.jitter)
        end = sim.env.now + duration
        while sim.env.now < end:
            mailbox.rearm()
            yield sim.env.timeout(end - sim.env.now) | mailbox.wake
            take_requests(stop_ok=False)
        dev.stats.compute_s += duration
        dev.compute(local_step=True)
        if policy.completed() is Action.QUERY:
            dev.stats.rounds += 1  # stop after the announced round if the condition holds once it is done
            want_stop = sim.wants_stop(dev)
            dev.stats.rounds -= 1
            send(sim, dev, dev.message(m.Notify, round=policy.round, pending=policy.pending,
                                       want_stop=bool(want_stop)), on_request)
    yield from sim.leave(dev)
