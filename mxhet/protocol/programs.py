"""The worker programs of the ported modes (see :mod:`mxhet.protocol`).

A program is called with the mode's resolved options and the worker's
statistics record (``rounds``, ``local_iters``: the per-round accounting both
engines report) and yields :mod:`.effects`. Ported: ``localsgd``, ``sync`` (and
:func:`sync_rounds`, its elastic form),
``async`` and ``dcasgd`` (:func:`asynchronous`), ``ssp``, ``local``, ``esync``.
"""
from ..errors import ConfigError
from ..policy.stop import StopRule
from ..policy.worker import Action, LocalSGDPolicy
from .effects import JOB_OVER, Clock, Compute, Exchange, Payload, PushAsync, WantsStop
from ..policy import specs
from ..policy.worker import ESyncPolicy
from .effects import AggregateDeltas, AwaitAnswer, Iterate, Listen, Now, ResetOptimizer, RoundTrip, SendReset, StateQuery


def _aggregate(stats, payload, local_steps):
    """One synchronous round: count it, vote on stopping with it; returns True
    when the job agreed to stop after it.

    The round is counted before the vote, so a stop condition on
    ``stats.rounds`` (``--max-rounds R``) stops after exactly R rounds.
    """
    index = stats.rounds
    stats.rounds += 1
    stats.local_iters.append(local_steps)
    wants = yield WantsStop()
    votes = yield Exchange(payload, index, StopRule.ballot(wants))
    if votes is JOB_OVER:
        # the round came after the job's agreed stop (this worker rejoined while the last one was
        # open): it was never taken part in
        stats.rounds -= 1
        stats.local_iters.pop()
        return True
    return StopRule.agreed(votes)


def localsgd(opts, stats):
    """Local SGD / fixed ADACOMM: τ = ``opts["local_steps"]`` local steps,
    then the model deltas are averaged synchronously; every worker stops after
    the same round (the stop vote rides on the average)."""
    policy = LocalSGDPolicy(opts["local_steps"])
    while True:
        yield Compute(local_step=True)
        if policy.completed() is not Action.AGGREGATE:
            continue
        if (yield from _aggregate(stats, Payload.DELTAS, policy.aggregated())):
            return


def sync(opts, stats):
    """Synchronous SGD: every iteration's gradient goes to the servers, which
    apply their mean once every worker's has arrived; the stop vote rides on
    each step's exchange, so every worker runs the same number of steps."""
    while True:
        yield Compute(local_step=False)
        if (yield from _aggregate(stats, Payload.GRADIENTS, 1)):
            return


def sync_rounds(opts, stats):
    """Synchronous SGD where a worker may leave or die (``sync`` under ``mxhet-launch --elastic`` or
    the simulator's ``--events``): every iteration is a local optimizer step, then the model deltas are
    averaged over the round's members -- local SGD with one local step. For SGD with momentum, weight
    decay or Nesterov the step is linear in the gradient, so the mean of the members' one-step deltas is
    ``sync``'s server-side step on their mean gradient (:class:`mxhet.modes.gradient.ElasticSync`)."""
    while True:
        yield Compute(local_step=True)
        if (yield from _aggregate(stats, Payload.DELTAS, 1)):
            return


def _push_gradient(stats):
    """One asynchronous step: count it as a round of one iteration, push its gradient."""
    index = stats.rounds
    stats.rounds += 1
    stats.local_iters.append(1)
    yield PushAsync(Payload.GRADIENTS, index)


def asynchronous(opts, stats):
    """Asynchronous SGD (``async``; ``dcasgd`` is the same worker with the
    delay-compensating updater on the servers): every iteration's gradient is
    pushed and applied on arrival, the model pulled; each worker stops on its
    own, after a push, once it wants to (there is no vote: nobody waits)."""
    while True:
        yield Compute(local_step=False)
        yield from _push_gradient(stats)
        if (yield WantsStop()):
            return


def ssp(opts, stats):
    """Stale synchronous parallel: asynchronous SGD, but after each push the
    worker reports its clock and waits until it is no more than the staleness
    ahead of the slowest worker still training. A worker that stops leaves the
    gate (the runtime's goodbye) so the others do not wait for it; the wish to
    stop is asked again after the wait, which may have outlasted the job."""
    while True:
        yield Compute(local_step=False)
        yield from _push_gradient(stats)
        if (yield WantsStop()):
            return
        yield Clock(stats.iterations)
        if (yield WantsStop()):
            return


# -- local, esync ---------------------------------------------------------------------------------


def local(opts, stats):
    """Standalone training on one device: local steps, each counted as a
    round of one iteration, until the worker wants to stop."""
    while True:
        yield Compute(local_step=True)
        stats.rounds += 1
        stats.local_iters.append(1)
        if (yield WantsStop()):
            return


SLOWEST_WAIT_RTTS = 4
SLOWEST_WAIT_MAX_S = 0.02
"""Delayed ACKs: after its query, the device the latest answer named the
slowest waits for the answer up to this many round trips (at most this many
seconds; not at all when one round trip is longer)."""


class ESyncAnswers:
    """The State Server's answers to one ESync worker, as they come
    (:class:`~.effects.Listen`): they feed its :class:`ESyncPolicy` and say
    when to abandon the iteration in progress (a READY for this round) and
    when the job has stopped (after the round last aggregated)."""

    def __init__(self, policy, stats):
        self.policy, self.stats = policy, stats
        self.stop_decided = False
        self.named_slowest = False   # the latest answer named this device the slowest
        self.members, self.weight = 0, 0.0   # --round-deadline: the READY's round size and this device's share
        self.memory = ()   # --late-memory: the READY's (remember, memories, their share)

    def answer(self, reply):
        if reply.ready and reply.target > 0:
            # --round-deadline: a READY names the round's members and this device's share; a late
            # device's names the (later) round its delta enters
            if reply.round > self.policy.round:
                self.policy.join_round(reply.round)
            self.members, self.weight = reply.target, reply.weight
            self.memory = (reply.remember, tuple(reply.memory), reply.memory_share)
        self.policy.answer(reply.round, reply.ready, reply.slowest)
        self.named_slowest = reply.slowest == self.stats.rank
        self.stats.late_replies = self.policy.late_replies
        if reply.stop:
            self.stop_decided = True

    def stop(self):
        self.stop_decided = True

    @property
    def abort(self):
        return self.policy.before_update() is Action.ABORT

    @property
    def wake(self):
        return self.stop_decided or self.abort


ACK_MODES = specs.ACK_MODES


def check_esync(opts):
    """Validate ESync's resolved options (both engines): its spec's checks
    (:meth:`mxhet.policy.spec.ModeSpec.check`).

    Raises:
        ConfigError: naming the bad ``global_lr``, ``ack`` or aggregation option, or
            ``round_length``, ``late_memory`` or ``wait_needed`` without ``round_deadline``.
    """
    specs.ESYNC.check(opts)
    if opts.get("round_length") and not opts.get("round_deadline"):
        raise ConfigError("esync: round_length (--round-length) %r needs round_deadline (--round-deadline) > 0"
                          % (opts["round_length"],))
    if opts.get("late_memory") and not opts.get("round_deadline"):
        raise ConfigError("esync: late_memory (--late-memory) needs round_deadline (--round-deadline) > 0")
    if opts.get("wait_needed") and not opts.get("round_deadline"):
        raise ConfigError("esync: wait_needed (--wait-needed) %r needs round_deadline (--round-deadline) > 0"
                          % (opts["wait_needed"],))
    if opts.get("round_deadline"):
        # A late device's READY waits for its round to close (a deferred answer): only a blocking
        # query waits for it. Its share replaces the mean's 1/m; the count weightings would need
        # the late device's counts in a round it joins after the count exchange.
        if opts.get("ack", "blocking") != "blocking":
            raise ConfigError("esync: round_deadline (--round-deadline) needs ack 'blocking', got ack %r"
                              % (opts["ack"],))
        if opts.get("aggregation", "mean") != "mean":
            raise ConfigError("esync: round_deadline (--round-deadline) needs aggregation 'mean', got %r"
                              % (opts["aggregation"],))


def _esync_query(answers, stats, duration, delayed, iteration=True, loss=None):
    """QUERY-STATE for the policy's round and k with c = ``duration`` + the round trip (and
    ``loss``, the training loss on the global model last pulled, when not None)."""
    policy = answers.policy
    rtt = yield RoundTrip()
    # The device the State Server last named slowest is READY as soon as its
    # query arrives (Algorithm 2) while every other device waits for its push:
    # with delayed ACKs it waits a few round trips for that answer rather than
    # start an iteration the READY would abandon -- on the cluster a whole
    # forward and backward pass, since an abort is noticed only after it. Both
    # engines wait alike: in the simulator the answer ends the wait after one
    # round trip, as it would have ended the iteration, so no batch is wasted
    # and no abort counted. A wait capped below one round trip could only end
    # without the answer (a slow link): then the device does not wait at all.
    wait = 0.0
    if delayed and answers.named_slowest and rtt <= SLOWEST_WAIT_MAX_S:
        wait = min(SLOWEST_WAIT_RTTS * rtt, SLOWEST_WAIT_MAX_S)
    # Where the next iteration starts before the answer, the query's receipt is
    # that much ahead of t_e + c (mxhet.control.state_rule).
    ahead = max(0.0, rtt - wait) if delayed else 0.0
    t0 = yield Now()
    reply = yield StateQuery(policy.round, policy.k, duration + rtt, ahead, blocking=not delayed, loss=loss)
    if delayed:
        if wait > 0:
            yield AwaitAnswer(wait)
    else:
        if iteration:
            stats.waited_iterations += 1
        answers.answer(reply)
    waited = (yield Now()) - t0
    stats.query_wait_max_s = max(stats.query_wait_max_s, waited)
    if stats.query_wait_min_s is None or waited < stats.query_wait_min_s:
        stats.query_wait_min_s = waited


def _esync_round_mark(stats):
    return stats.query_s + stats.sync_s, stats.state_queries, stats.state_replies, stats.aborted


def esync(opts, stats):
    """ESync (Algorithm 1): local iterations, each followed by QUERY-STATE,
    until the State Server says READY (blocking ACKs), or until a READY
    arrives -- abandoning the iteration in progress -- (delayed ACKs, §4.2);
    then the round's deltas are aggregated and RESET sent without waiting,
    with the worker's stop wish. The job's stop decision comes back with
    RESET's or the next query's answer: the worker stops at once, the
    iterations since the round last aggregated dropped. ``opts["max_local_steps"]``
    K caps a round (:class:`ESyncPolicy`). Under ``opts["wait_needed"]`` the
    first iteration from each global model (the initial one, then each pulled)
    reads its batch's loss, and the query after it carries it
    (:mod:`mxhet.policy.needed`). Keeps the per-round statistics (``round_*``),
    ``rounds``, ``local_iters`` and the query waits.
    """
    check_esync(opts)
    delayed = opts["ack"] == "delayed"
    policy = ESyncPolicy(round_=stats.rounds, max_local_steps=opts["max_local_steps"])
    answers = ESyncAnswers(policy, stats)
    yield Listen(answers)
    mark = _esync_round_mark(stats)
    # Algorithm 1 line 3: the test batch, reported with k = 0 (always NOT-READY),
    # so the State Server knows every capability before anyone asks to aggregate.
    if opts.get("round_deadline"):
        # The deadline judges devices by this time: on the cluster the first iteration is MXNet's warm-up,
        # which can outlast D x a fast device's, so the test batch is the one after it.
        yield Iterate(test=True, warmup=True)
    test = yield Iterate(test=True)
    policy.test_batch_done()
    yield from _esync_query(answers, stats, test.duration, delayed, iteration=False)
    # --wait-needed: the replica is the global model until its first step from it (the test batch's is dropped)
    need = bool(opts.get("wait_needed"))
    fresh = need
    while True:
        done = yield Iterate(local_step=True, abortable=delayed, read_loss=fresh)
        if answers.stop_decided:
            return
        if not done.aborted:
            policy.completed()
            yield from _esync_query(answers, stats, done.duration, delayed, loss=done.loss if fresh else None)
            fresh = False
            if answers.stop_decided:
                return
            if policy.after_query() is not Action.AGGREGATE:
                continue
        if answers.members:   # --round-deadline: the round's members and this device's share, from its READY
            remember, memory, share = answers.memory or (False, (), 0.0)
            effect = AggregateDeltas(policy.round, policy.k, opts["aggregation"], answers.members, answers.weight,
                                     remember, memory, share)
            answers.members, answers.weight, answers.memory = 0, 0.0, ()
        else:
            effect = AggregateDeltas(policy.round, policy.k, opts["aggregation"])
        if (yield effect) is JOB_OVER:
            # a round after the job's agreed stop (this worker rejoined while the last one was open)
            answers.stop()
            return
        if opts["reset_optimizer_state"]:
            yield ResetOptimizer()
        fresh = need
        _, k, slowest = policy.aggregated()
        stats.local_iters.append(k)
        stats.rounds = policy.round
        wants = yield WantsStop()
        # The next iteration starts without waiting for RESET's answer: a round trip ahead.
        rtt = yield RoundTrip()
        yield SendReset(policy.round, wants, rtt)
        blocked, queries, replies, aborted = mark
        stats.round_blocked_s.append(stats.query_s + stats.sync_s - blocked)
        stats.round_queries.append(stats.state_queries - queries)
        stats.round_replies.append(stats.state_replies - replies)
        stats.round_aborted.append(stats.aborted - aborted)
        stats.round_slowest.append(slowest)
        stats.round_end_s.append((yield Now()))
        mark = _esync_round_mark(stats)
