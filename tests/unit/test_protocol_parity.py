"""Parity of the two interpreters of a worker program: one short scripted job
(3 workers, fixed iteration times, one seed, 3 rounds) run by the simulator
(the real engine, virtual time) and by the cluster's real executors
(``LocalSGD``, ``Sync``, ``Async``, ``DCASGD``, ``SSP``, ``DyLU``; ``NoDelay`` and
``PartialReduce`` with the real State Server rules) and their ``step()``
(with in-process fakes for the trainer, the parameter servers and the State
Server, one thread per worker: :mod:`tests.unit.parity_standins`) must make the same decisions: every effect
with its result, in order -- iterations, stop wishes, exchanges and
asynchronous pushes with their round and ballot, the summed ballots, SSP's
clocks, the stop -- and the same per-round accounting (rounds, local steps
per round).
"""
import threading

import pytest

from mxhet.control import messages as m
from mxhet.modes import get_mode
from mxhet.protocol import Clock, Now, Payload, PushAsync, WantsStop
from mxhet.protocol.effects import Handover, Merged, Notify, Ready
from mxhet.sim import engine
from tests.unit.parity_standins import (ITER_S, ROUNDS, SLOWDOWN, WORKERS, Client, GroupChannel, KV, OneParamTrainer,
                                        RuleClient, Servers, StateServer, VirtualClient, VirtualServer, VirtualTime,
                                        decisions, new_mode, run_in_virtual_time, run_threads, sim_traces, started,
                                        traces, until_stopped)

pytestmark = pytest.mark.timeout(300)


def _cluster_traces(mode_name, options):
    servers = Servers(WORKERS)

    class Executor(get_mode(mode_name)):
        def exchange_deltas(self, round_index, extra_keys=(), extra_values=(), extra_outs=()):
            extra_outs[0][:] = servers.exchange(round_index, extra_values[0].asscalar())

        def exchange_gradients(self, batch_size, round_index, extra_keys=(), extra_values=(), extra_outs=()):
            if extra_values:   # dist_sync with the stop ballot; a dist_async push waits for nobody
                self.exchange_deltas(round_index, extra_keys, extra_values, extra_outs)

    modes = []
    for slot in range(WORKERS):
        mode = new_mode(Executor, slot, clock=lambda: 0.0, **options)
        mode.on_setup(64)   # what setup() does after connecting and sharing the model
        started(mode)
        mode.client = Client()   # the State Server (ssp's gate: the test's rounds need no waiting)
        modes.append(mode)
    return run_threads(modes, on_error=servers.barrier.abort)


@pytest.mark.parametrize("mode_name, argv, options", [
    ("localsgd", ["--local-steps", "2"], {"local_steps": 2}),
    ("sync", [], {}),
    ("async", [], {}),
    ("dcasgd", [], {}),
    ("ssp", ["--staleness", "1"], {}),
])
def test_both_interpreters_make_the_same_decisions(tmp_path, monkeypatch, mode_name, argv, options):
    cluster = _cluster_traces(mode_name, options)
    sim = sim_traces(tmp_path, mode_name, argv, monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert sim[slot] == cluster[slot], slot
    trace, rounds, local_iters = sim[0]
    assert rounds == ROUNDS and local_iters == [options.get("local_steps", 1)] * ROUNDS
    if mode_name in ("localsgd", "sync"):
        assert trace[-1][1] == WORKERS   # everyone voted to stop in the last exchange
    else:   # each stops alone, after its last push
        assert trace[-2:] == [(PushAsync(Payload.GRADIENTS, ROUNDS - 1), None), (WantsStop(), True)]
    if mode_name == "ssp":
        assert [e.iterations for e, _ in trace if isinstance(e, Clock)] == list(range(1, ROUNDS))


# -- nodelay and Partial Reduce: a rule in the State Server beyond the stop protocol -------------

class _Courier:
    """nodelay's data-plane thread as ``dist_sync`` over no arrays: round r's
    merged model is there once every worker handed round r over."""

    def __init__(self, shared):
        self.shared, self.busy, self.round = shared, False, None

    def submit(self, round_, sends, recvs):
        with self.shared["cond"]:
            self.shared[round_] = self.shared.get(round_, 0) + 1
            self.shared["cond"].notify_all()
        self.busy, self.round = True, round_

    def take(self, timeout=0.0):
        with self.shared["cond"]:
            if not self.shared["cond"].wait_for(lambda: self.shared.get(self.round) == WORKERS, timeout=timeout):
                return None
        self.busy = False
        return self.round, 0.0

    def close(self, timeout=0.0):
        pass


def _rule_cluster_traces(mode_name, options):
    server, shared = StateServer(WORKERS), {"cond": threading.Condition()}
    modes = []
    for slot in range(WORKERS):
        mode = new_mode(get_mode(mode_name), slot, clock=lambda: 0.0, **options)
        mode.channel.num_workers, mode.channel.kv = WORKERS, KV()
        mode.keys, mode.wbufs = [], []
        mode.client = RuleClient(server, slot)
        mode.on_setup(64)
        if mode_name == "nodelay":
            mode.courier.close()
            mode.courier = _Courier(shared)
        started(mode)
        modes.append(mode)
    return run_threads(modes)


@pytest.mark.parametrize("mode_name, argv, options", [
    # tau = 1: every worker waits for each round's model, so no transfer is ever asked for
    # during an iteration and the decisions do not depend on timing
    ("nodelay", ["--max-staleness", "1"], {"staleness": 1}),
    # P = N: one group of all at every step (the groups of P < N depend on arrival order)
    ("preduce", ["--group-size", "3"], {"group_size": 3}),
])
def test_both_interpreters_make_the_same_decisions_with_a_rule(tmp_path, monkeypatch, mode_name, argv, options):
    cluster = _rule_cluster_traces(mode_name, options)
    sim = sim_traces(tmp_path, mode_name, argv, monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert decisions(sim[slot][0]) == decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:] == (ROUNDS, [1] * ROUNDS), slot
    made = decisions(sim[0][0])
    if mode_name == "nodelay":
        assert [e for e, _ in made if isinstance(e, Handover)] == [Handover(r) for r in range(ROUNDS)]
        notes = [e for e, _ in made if isinstance(e, Notify)]
        assert [n.want_stop for n in notes] == [False] * (ROUNDS - 1) + [True]
        assert made[-1] == (Merged(ROUNDS - 1), None)   # stopped with the last round's model
    else:
        groups = [r for e, r in made if isinstance(e, Ready)]
        assert [g.stop for g in groups] == [False] * ROUNDS + [True]
        assert all(g.weight == pytest.approx(1.0 / WORKERS) for g in groups[:-1])
        assert [g.k for g in groups[:-1]] == list(range(1, ROUNDS + 1))


# -- esync: the State Server scripted alike for both interpreters --------------------------------------

ESYNC_READY_AT = (3, 2, 1)   # a query of slot i is answered READY from its k-th local iteration of a round
ESYNC_SLOWEST = 2


def _esync_answer(request):
    """The scripted State Server's answer to ``request`` (any type)."""
    from mxhet.control import messages as m
    from mxhet.control import wire
    if isinstance(request, m.Query):
        return m.QueryReply(seq=request.seq, round=request.round, ready=request.k >= ESYNC_READY_AT[request.rank],
                            slowest=ESYNC_SLOWEST)
    if isinstance(request, m.Reset):   # the job stops after its last round
        return m.ResetReply(seq=request.seq, round=request.round, stop=request.round >= ROUNDS)
    # the record the request's rule answers with, naming the round where it has one
    fields = {"round": getattr(request, "round", 0)} if "round" in wire.fields_of(request.REPLY) else {}
    return request.REPLY(seq=request.seq, **fields)


class _ScriptedService:
    """Stands in for the simulator's StateService."""

    def __init__(self, *args, **kwargs):
        self.released = []

    def handle(self, request, now, sender=None):
        return _esync_answer(request)

    def stats(self):
        return {}

    def rule(self, name):
        return None   # no rule plugin: the answers are scripted


class _ScriptedClient:
    """The same script, as a cluster worker's StateClient sees it. A delayed
    answer shows at the second poll after its query (the first is right after
    the send, as in the simulator it is a round trip away); RESET's stop at the
    next poll (in the simulator it arrives during the next iteration)."""

    def __init__(self, rank):
        from mxhet.control import messages as m
        self.m, self.rank = m, rank
        self.queries = self.replies = 0
        self.rtt, self.max_in_flight, self.stop_decided = 0.001, 1, False
        self._flight, self._stop, self._seq = [], False, 0

    def _query(self, round_, k):
        self.queries += 1
        self._seq += 1
        return _esync_answer(self.m.Query(rank=self.rank, seq=self._seq, round=round_, k=k, c=0.0, since_finish=0.0))

    def query(self, round_, k, c, since_finish=0.0, loss=None):
        self.replies += 1
        return self._query(round_, k)

    def send_query(self, round_, k, c, since_finish=0.0, loss=None):
        self._flight.append([0, self._query(round_, k)])

    def poll(self, timeout=0.0):
        self.stop_decided = self.stop_decided or self._stop
        out = [reply for age, reply in self._flight if age >= 1]
        self._flight = [[age + 1, reply] for age, reply in self._flight if age < 1]
        self.replies += len(out)
        return out

    def send_reset(self, round_, want_stop=False, since_finish=0.0):
        self._stop = _esync_answer(self.m.Reset(rank=self.rank, seq=0, round=round_, want_stop=want_stop)).stop

    def bye(self):
        pass

    def close(self):
        pass


def _esync_cluster_traces(options):
    servers = Servers(WORKERS)

    class Executor(get_mode("esync")):
        def _aggregate(self, effect):   # the data plane is tested with real processes: dist_sync's wait only
            servers.exchange(effect.round, 0.0)

        def reset_optimizer_state(self):
            pass

    modes = []
    for slot in range(WORKERS):
        mode = new_mode(Executor, slot, clock=lambda: 0.0, **options)
        mode.stats.rank = slot
        mode.client = _ScriptedClient(slot)
        started(mode)
        mode.on_setup(64)
        modes.append(mode)
    return run_threads(modes, on_error=servers.barrier.abort)


def _esync_decisions(trace):
    """The decisions of an ESync trace, without the times (durations, round trips, clock readings)."""
    from mxhet.protocol.effects import AwaitAnswer, Iterate, Listen, Now, RoundTrip, SendReset, StateQuery
    out = []
    for effect, result in trace:
        if isinstance(effect, (Now, RoundTrip, Listen)):
            continue
        if isinstance(effect, Iterate):
            out.append(("iterate", effect.test, effect.abortable, result.aborted))
        elif isinstance(effect, StateQuery):
            out.append(("query", effect.round, effect.k, effect.blocking,
                        None if result is None else (result.ready, result.slowest)))
        elif isinstance(effect, AwaitAnswer):
            out.append(("await",))
        elif isinstance(effect, SendReset):
            out.append(("reset", effect.round, effect.want_stop))
        else:
            out.append((effect, result))
    return out


@pytest.mark.parametrize("argv, options, local_iters", [
    ([], {}, [3, 2, 1]),
    (["--ack", "delayed"], {"ack": "delayed"}, [3, 2, 1]),
    (["--max-local-steps", "2", "--aggregation", "weighted", "--reset-optimizer-state"],
     {"max_local_steps": 2, "aggregation": "weighted", "reset_optimizer_state": True}, [2, 2, 1]),
])
def test_both_interpreters_make_the_same_esync_decisions(tmp_path, monkeypatch, argv, options, local_iters):
    from mxhet.protocol.effects import AggregateDeltas, AwaitAnswer, Iterate, ResetOptimizer
    monkeypatch.setattr(engine, "StateService", _ScriptedService)
    cluster = _esync_cluster_traces(options)
    sim = sim_traces(tmp_path, "esync", argv, monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert _esync_decisions(sim[slot][0]) == _esync_decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:] == (ROUNDS, [local_iters[slot]] * ROUNDS), slot
    trace = [effect for effect, _ in sim[0][0]]
    assert isinstance(trace[1], Iterate) and trace[1].test
    assert [e.steps for e in trace if isinstance(e, AggregateDeltas)] == [local_iters[0]] * ROUNDS
    assert sum(isinstance(e, ResetOptimizer) for e in trace) == (ROUNDS if "reset_optimizer_state" in options else 0)
    delayed = options.get("ack") == "delayed"
    aborted = [[r.aborted for e, r in sim[slot][0] if isinstance(e, Iterate)].count(True) for slot in range(WORKERS)]
    # Delayed ACKs: a READY abandons the next iteration, except on the device last named slowest, which
    # waits for its answer (one AwaitAnswer a query once named).
    assert aborted == ([ROUNDS, ROUNDS, 0] if delayed else [0, 0, 0])
    awaits = [any(isinstance(e, AwaitAnswer) for e, _ in sim[slot][0]) for slot in range(WORKERS)]
    assert awaits == [False, False, delayed]


# -- ADSP: commit reports to the State Server's scheduler ------------------------------------------

class _TimedStateServer(StateServer):
    """:class:`~tests.unit.parity_standins.StateServer` whose service reads the workers' shared fake
    clock, with ADSP's check period."""

    def __init__(self, n, now, **kwargs):
        from mxhet.control.server import StateService
        super().__init__(n)
        self.service = StateService(n, now=0.0, **kwargs)
        self.now = now

    def handle(self, request):
        with self.cond:
            reply = self.service.handle(request, self.now(), sender=request.rank)
            self.inbox[request.rank].append(reply)
            self.cond.notify_all()


class _ADSPClient(RuleClient):
    def commit_report(self, commits, loss, commit_cost):
        reply = self._ask(m.Commit, commits=commits, loss=float(loss), commit_cost=float(commit_cost))
        return reply.target, reply.period_left


def _adsp_cluster_traces(period):
    lock, ticks = threading.Lock(), [0.0]

    def clock():   # one shared clock, a second per reading: every iteration outlasts the check period
        with lock:
            ticks[0] += 1.0
            return ticks[0]
    server = _TimedStateServer(WORKERS, lambda: ticks[0], adsp_period=period, adsp_window=1)

    class Executor(get_mode("adsp")):
        def exchange_deltas(self, round_index, extra_keys=(), extra_values=(), extra_outs=()):
            pass   # dist_async: applied on arrival, nobody waits

    modes = []
    for slot in range(WORKERS):
        mode = new_mode(Executor, slot, clock=clock)
        mode.client = _ADSPClient(server, slot)
        mode.on_setup(64)
        started(mode, clock())
        modes.append(mode)
    for mode in modes:   # one at a time: nobody waits for anybody
        until_stopped(mode)
    return traces(modes)


def _adsp_decisions(trace):
    """What does not depend on the engine's clock or the model: the effects in order with the commits
    reported, the commits' rounds and the stop wishes (not the losses, the commit costs, the times)."""
    from mxhet.protocol.effects import ReportCommits
    out = []
    for effect, result in trace:
        if isinstance(effect, ReportCommits):
            out.append(("report", effect.commits))
        elif isinstance(effect, (PushAsync, WantsStop)):
            out.append((effect, result))
        elif not isinstance(effect, Now):
            out.append(type(effect).__name__)
    return out


def test_adsp_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch):
    # Iterations far longer than the check period (and the report margin) and speeds 1 : 2 : 3, so the
    # commit timer's decisions do not depend on each engine's clock: the fastest worker, always the one
    # with the most commits, meets each target right after its commit (the scheduler counts the commits
    # reported at the last checkpoint), asks for the next at its next iteration and commits at the one
    # after; the others are always behind it and commit at every iteration.
    cluster = _adsp_cluster_traces(period=0.001)
    sim = sim_traces(tmp_path, "adsp", ["--slowdown", "1,2,3", "--base-iter", "0.1", "--adsp-period", "0.001",
                                        "--adsp-window", "1"], monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert _adsp_decisions(sim[slot][0]) == _adsp_decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:], slot
    assert [sim[slot][2] for slot in range(WORKERS)] == [[1, 2, 2], [1, 1, 1], [1, 1, 1]]
    made = _adsp_decisions(sim[1][0])
    assert [d for d in made if isinstance(d, tuple) and d[0] == "report"] == [("report", c) for c in range(ROUNDS)]
    assert made[-2:] == [(PushAsync(Payload.DELTAS, ROUNDS - 1), None), (WantsStop(), True)]


# -- CADA: the State Server selects, a member's work may be dropped, the last upload steps ----------

def _cada_cluster_traces(options):
    import mxnet as mx
    server = StateServer(WORKERS)
    modes = []
    for slot in range(WORKERS):
        mode = new_mode(get_mode("cada"), slot, clock=lambda: 0.0, trainer=OneParamTrainer(),
                        channel=GroupChannel(WORKERS), config={"num_servers": 1}, **options)
        mode.keys, mode.wbufs = [0], [mx.nd.zeros((2,))]
        mode.client = RuleClient(server, slot)
        modes.append(mode)

    def script(mode):
        mode.on_setup(64)   # its first request waits for the others'
        started(mode)
        until_stopped(mode, ignore_stale_grad=True)   # no backward ran: the fake gradients are not fresh
    return run_threads(modes, script)


def _cada_decisions(trace):
    """The decisions but who has the servers step (the iteration's last upload: each engine's timing)."""
    from mxhet.protocol.effects import StepServers, Upload
    return [(e, None if isinstance(e, Upload) else r) for e, r in trace if not isinstance(e, StepServers)]


def test_cada_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch):
    # D = 1: every worker (a group of one) is selected in every iteration, so nobody's work is dropped and
    # the selections do not depend on timing.
    from mxhet.protocol.effects import BeginIteration, Selection, StepServers, Upload
    options = {"max_delay": 1}
    cluster = _cada_cluster_traces(options)
    sim = sim_traces(tmp_path, "cada", ["--max-delay", "1"], monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    # The wish to stop goes with the request for the next iteration, answered after the selection of the
    # current one: the job runs ROUNDS + 1 iterations under --max-rounds ROUNDS (as it did before the port).
    iterations = ROUNDS + 1
    for slot in range(WORKERS):
        assert _cada_decisions(sim[slot][0]) == _cada_decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:] == (iterations, [1] * iterations), slot
    begins = [(e, r) for e, r in _cada_decisions(sim[0][0]) if isinstance(e, BeginIteration)]
    assert [r for _, r in begins] == ([Selection(k, ready=True) for k in range(iterations)]
                                      + [Selection(iterations, stop=True)])
    for by_slot in (sim, cluster):   # one step of the servers per iteration, by its last uploader
        steps = sorted(e.iteration for slot in by_slot for e, _ in by_slot[slot][0] if isinstance(e, StepServers))
        lasts = [e for slot in by_slot for e, r in by_slot[slot][0] if isinstance(e, Upload) and r]
        assert steps == list(range(iterations)) and len(lasts) == iterations


# -- dylu: speeds shared on control keys, H_i from the fastest -------------------------------------

DYLU_ITER_S = (0.02, 0.02, 0.06)   # the simulator's --base-iter 0.02 --slowdown 1,1,3, in seconds


def _dylu_cluster_traces(options):
    """The workers stepped one at a time in the order of their own virtual clocks (nobody waits in
    ``dylu``), each iteration taking DYLU_ITER_S; the speed keys as one table, read when shared."""
    table = [0.0] * WORKERS
    clocks = [0.0] * WORKERS

    class Executor(get_mode("dylu")):
        def exchange_deltas(self, round_index, extra_keys=(), extra_values=(), extra_outs=()):
            pass   # dist_async: applied on arrival, nobody waits

        def share_speed(self, iteration_s):
            table[self.config.slot] = float(iteration_s)
            return tuple(table)

    modes = []
    for slot in range(WORKERS):
        mode = new_mode(Executor, slot, clock=lambda slot=slot: clocks[slot], **options)
        mode.channel.num_workers, mode.channel.rank = WORKERS, slot
        mode.client = Client()
        mode.on_setup(64)
        started(mode)
        modes.append(mode)
    while not all(mode.stopped for mode in modes):
        mode = min((mode for mode in modes if not mode.stopped), key=lambda mode: (clocks[mode.config.slot],
                                                                                   mode.config.slot))
        clocks[mode.config.slot] += DYLU_ITER_S[mode.config.slot]   # the iteration's forward and backward
        mode.step(64)
    return traces(modes)


def _dylu_decisions(trace):
    """The effects in order, the speeds shared as which devices were known (and their ratio to the
    fastest, rounded: the engines measure the same iterations with different clocks)."""
    from mxhet.protocol.effects import ShareSpeed
    out = []
    for effect, result in trace:
        if isinstance(effect, ShareSpeed):
            known = [t for t in result if t > 0]
            out.append(("share", tuple(round(t / min(known), 3) if t > 0 else 0 for t in result)))
        elif not isinstance(effect, Now):
            out.append((effect, result))
    return out


@pytest.mark.parametrize("argv, options, local_iters", [
    # H = 3: the slow device (3x) knows the others' speeds from its first iteration on: round(3/3) = 1
    (["--local-steps", "3"], {"local_steps": 3}, [[3, 3, 3], [3, 3, 3], [1, 1, 1]]),
    (["--local-steps", "3", "--dynamic-local-steps", "off"], {"local_steps": 3, "dynamic": False},
     [[3, 3, 3]] * WORKERS),
])
def test_dylu_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch, argv, options, local_iters):
    from mxhet.protocol.effects import ShareSpeed
    cluster = _dylu_cluster_traces(options)
    sim = sim_traces(tmp_path, "dylu", argv, monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert _dylu_decisions(sim[slot][0]) == _dylu_decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:] == (ROUNDS, local_iters[slot]), slot
    trace = [effect for effect, _ in sim[2][0]]
    # one share a round, and one after the first iteration (the first round's H_i)
    assert sum(isinstance(e, ShareSpeed) for e in trace) == (ROUNDS + 1 if options.get("dynamic", True) else 0)
    assert trace[-2:] == [PushAsync(Payload.DELTAS, ROUNDS - 1), WantsStop()]   # each stops alone


# -- rules whose decisions depend on arrival order: the cluster's workers in virtual time ---------------

def _virtual_cluster_traces(mode_name, options):
    server = VirtualServer(WORKERS)
    time = server.time = VirtualTime(server)
    modes = []
    for slot in range(WORKERS):
        mode = new_mode(get_mode(mode_name), slot, clock=lambda slot=slot: time.clocks[slot], **options)
        mode.channel.num_workers, mode.channel.kv = WORKERS, KV()
        mode.keys, mode.wbufs = [], []
        modes.append(mode)

    def start(mode):
        mode.client = VirtualClient(server, mode.config.slot)
        mode.on_setup(64)
    return run_in_virtual_time(modes, time, start, ITER_S)


def _groups(by_slot):
    """Each group's members, in order: {group: [slots]} from the answers to READY."""
    out = {}
    for slot in sorted(by_slot):
        for effect, answer in decisions(by_slot[slot][0]):
            if isinstance(effect, Ready) and not answer.stop:
                out.setdefault(answer.group, []).append(slot)
    return out


def test_preduce_with_groups_smaller_than_all_makes_the_same_decisions_on_both_interpreters(tmp_path, monkeypatch):
    # P = 2 of N = 3: the groups are made by arrival order at the controller, so the cluster's workers
    # run in virtual time with the simulator's iteration times (VirtualTime).
    cluster = _virtual_cluster_traces("preduce", {"group_size": 2})
    sim = sim_traces(tmp_path, "preduce", ["--group-size", "2", *SLOWDOWN], monkeypatch)
    assert sorted(sim) == sorted(cluster) == list(range(WORKERS))
    for slot in range(WORKERS):
        assert decisions(sim[slot][0]) == decisions(cluster[slot][0]), slot
        assert sim[slot][1:] == cluster[slot][1:], slot
    # the two fast workers reduce together twice, then the slow one joins the first to be READY again
    assert _groups(sim) == _groups(cluster) == {0: [0, 1], 1: [0, 1], 2: [0, 2]}
