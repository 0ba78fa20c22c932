"""Worker programs (mxhet.protocol) with no runtime at all: scripted effect
results in, effects out. No MXNet."""
import types

import pytest

from mxhet.errors import ConfigError
from mxhet.protocol import Clock, Compute, Exchange, Payload, PushAsync, Session, WantsStop, programs


def _stats():
    return types.SimpleNamespace(rounds=0, local_iters=[])


def _run(program, results):
    """Drive ``program`` answering each effect with ``results(effect)``; returns the trace."""
    trace = []
    session = Session(program, trace)
    effect = session.advance()
    while effect is not None:
        effect = session.advance(results(effect))
    return trace


def _stop_at_round(stats, rounds):
    """Results of a job in which every worker wants to stop from ``rounds`` rounds on; votes of 3 workers."""
    def results(effect):
        if isinstance(effect, WantsStop):
            return stats.rounds >= rounds
        if isinstance(effect, Exchange):
            return 3 * effect.vote
        return None
    return results


def test_localsgd_averages_after_tau_steps_and_stops_after_the_voted_round():
    stats = _stats()
    trace = _run(programs.localsgd({"local_steps": 3}, stats), _stop_at_round(stats, 2))
    one_round = [(Compute(True), None)] * 3 + [(WantsStop(), False)]
    assert trace == (one_round + [(Exchange(Payload.DELTAS, 0, 0.0), 0.0)]
                     + one_round[:3] + [(WantsStop(), True), (Exchange(Payload.DELTAS, 1, 1.0), 3.0)])
    assert stats.rounds == 2 and stats.local_iters == [3, 3]


def test_sync_pushes_every_gradient_and_runs_exactly_the_rounds_of_the_condition():
    stats = _stats()
    trace = _run(programs.sync({}, stats), _stop_at_round(stats, 3))
    exchanges = [e for e, _ in trace if isinstance(e, Exchange)]
    assert [e.round for e in exchanges] == [0, 1, 2]
    assert all(e.payload is Payload.GRADIENTS for e in exchanges)
    assert [e.vote for e in exchanges] == [0.0, 0.0, 1.0]
    assert [e for e, _ in trace if isinstance(e, Compute)] == [Compute(local_step=False)] * 3
    assert stats.rounds == 3 and stats.local_iters == [1, 1, 1]


def test_another_workers_vote_stops_a_worker_that_wants_to_go_on():
    stats = _stats()

    def results(effect):   # this worker never wants to stop; someone else votes in round 1
        if isinstance(effect, Exchange):
            return 1.0 if effect.round == 1 else 0.0
        return False if isinstance(effect, WantsStop) else None
    trace = _run(programs.localsgd({"local_steps": 1}, stats), results)
    assert stats.rounds == 2 and trace[-1] == (Exchange(Payload.DELTAS, 1, 0.0), 1.0)


@pytest.mark.parametrize("mode", ["async", "dcasgd"])
def test_async_pushes_every_gradient_alone_and_stops_after_the_push_it_wants_to_stop_at(mode):
    from mxhet.modes.registry import get_program
    stats = _stats()
    trace = _run(get_program(mode)({}, stats), _stop_at_round(stats, 3))
    one = [(Compute(local_step=False), None)]
    assert trace == (one + [(PushAsync(Payload.GRADIENTS, 0), None), (WantsStop(), False)]
                     + one + [(PushAsync(Payload.GRADIENTS, 1), None), (WantsStop(), False)]
                     + one + [(PushAsync(Payload.GRADIENTS, 2), None), (WantsStop(), True)])
    assert stats.rounds == 3 and stats.local_iters == [1, 1, 1]


def test_ssp_reports_its_clock_after_each_push_and_asks_again_after_the_wait():
    stats = _stats()
    stats.iterations = 0
    waits = []

    def results(effect):   # the condition starts to hold during the second wait
        if isinstance(effect, Compute):
            stats.iterations += 1   # as both interpreters count an iteration
        if isinstance(effect, Clock):
            waits.append(effect.iterations)
        if isinstance(effect, WantsStop):
            return len(waits) >= 2
        return None
    trace = _run(programs.ssp({}, stats), results)
    assert waits == [1, 2] and stats.rounds == 2
    assert [e for e, _ in trace[-4:]] == [PushAsync(Payload.GRADIENTS, 1), WantsStop(), Clock(2), WantsStop()]
    assert trace[-1][1] is True


def test_ssp_does_not_wait_at_the_gate_once_it_wants_to_stop():
    stats = _stats()
    stats.iterations = 0
    trace = _run(programs.ssp({}, stats), _stop_at_round(stats, 1))
    assert [e for e, _ in trace] == [Compute(False), PushAsync(Payload.GRADIENTS, 0), WantsStop()]


def test_a_resumed_worker_numbers_its_rounds_from_the_checkpoint():
    stats = _stats()
    stats.rounds = 7
    trace = _run(programs.sync({}, stats), _stop_at_round(stats, 8))
    assert [e.round for e, _ in trace if isinstance(e, Exchange)] == [7]


def test_a_bad_tau_is_refused_before_any_effect():
    with pytest.raises(ConfigError, match="local_steps"):
        Session(programs.localsgd({"local_steps": 0}, _stats())).advance()


def test_the_cluster_stepping_stops_at_each_compute_and_reports_the_end():
    stats = _stats()
    session = Session(programs.localsgd({"local_steps": 2}, stats))
    handled = []

    def handle(effect):
        handled.append(effect)
        return _stop_at_round(stats, 1)(effect)
    assert session.advance() == Compute(True)                       # set-up: the first iteration is the script's
    assert session.run_until_compute(handle) == Compute(True) and handled == []   # step 1: no round yet
    assert session.run_until_compute(handle) is None and session.finished          # step 2: the round, stop
    assert handled == [WantsStop(), Exchange(Payload.DELTAS, 0, 1.0)]
    with pytest.raises(RuntimeError):
        session.advance()


def _stand_in_simulation(env, log, register_s=0.0):
    """The part of a Simulation every run_program test needs: the job, the mode
    spec, registration (logged when it takes time) and goodbye."""
    class StandIn:
        job = types.SimpleNamespace(mode_options={})
        spec = types.SimpleNamespace(resolve=dict)

        def register(self, dev):
            yield env.timeout(register_s)
            if register_s:
                log.append("register")

        def leave(self, dev):
            log.append("bye")
            yield env.timeout(0)
    return StandIn


def test_the_simulator_interpreter_runs_a_program_in_virtual_time():
    """run_program over a stand-in simulation: registration first, each Compute
    costs its iteration time, Now reads the virtual clock, goodbye last."""
    simpy = pytest.importorskip("simpy")
    from mxhet.protocol import Now
    from mxhet.sim.program import run_program

    env = simpy.Environment()
    log = []

    class Sim(_stand_in_simulation(env, log, register_s=0.25)):
        def iterate(self, dev):
            yield env.timeout(1.0)

    class Dev:
        stats = _stats()

        def compute(self, local_step):
            log.append(("compute", local_step, env.now))

    def program(opts, stats):
        yield Compute(local_step=False)
        first = yield Now()
        yield Compute()
        second = yield Now()
        log.append(("now", first, second))

    trace = []
    Sim.env = env
    env.process(run_program(Sim(), Dev(), program, trace))
    env.run()
    assert log == ["register", ("compute", False, 1.25), ("compute", True, 2.25), ("now", 1.25, 2.25), "bye"]
    assert [result for _, result in trace] == [None, 1.25, None, 2.25]


def test_the_simulator_interpreter_pushes_asynchronously_and_waits_at_the_gate():
    """PushAsync goes through the simulation's dist_async push (which puts the
    pulled model into the replica) with the gradients themselves; Clock is a
    blocking CLOCK request, counted as a query wait and a waited iteration."""
    simpy = pytest.importorskip("simpy")
    from mxhet.sim.program import run_program

    env = simpy.Environment()
    log = []

    class Sim(_stand_in_simulation(env, log)):
        grad_keys = [0]

        def push_async(self, dev, values, keys):
            yield env.timeout(0.5)
            log.append(("push", values, keys))

        def request(self, dev, request):
            yield env.timeout(2.0)
            log.append(("clock", request.clock))

        def blocked(self, dev, since, query=False):
            log.append(("blocked", since, env.now, query))

    class Grad:
        def grad(self):
            return "g"

    class Dev:
        stats = _stats()
        params = [Grad()]

        def message(self, cls, **fields):
            return cls(rank=0, seq=1, incarnation=1, **fields)

    Dev.stats.waited_iterations = 0

    def program(opts, stats):
        yield PushAsync(Payload.GRADIENTS, 0)
        yield Clock(5)

    Sim.env = env
    env.process(run_program(Sim(), Dev(), program))
    env.run()
    assert log == [("push", ["g"], [0]), ("clock", 5), ("blocked", 0.5, 2.5, True), "bye"]
    assert Dev.stats.waited_iterations == 1


# -- nodelay and Partial Reduce ----------------------------------------------------------------

def _dialogue(program, script):
    """Drive ``program`` through ``script``, a list of (expected effect, result); returns the trace."""
    script = list(script)

    def results(effect):
        expected, result = script.pop(0)
        assert effect == expected
        return result
    trace = _run(program, results)
    assert not script
    return trace


def test_nodelay_hands_over_mid_iteration_but_keeps_the_last_transfer_for_the_iterations_end():
    from mxhet.protocol import programs_groups
    from mxhet.protocol.effects import (Handover, ListeningCompute, Merged, ModelArrived, Notify, Now, Poll, TakeIn,
                                        TransferAsked)
    stats = types.SimpleNamespace(rounds=0, local_iters=[], waited_iterations=0, round_end_s=[])
    step = ListeningCompute()
    _dialogue(programs_groups.nodelay({"staleness": 2}, stats), [
        (TakeIn(-1), None), (Poll(False), ()),
        (step, None), (WantsStop(), False), (Notify(0, 1, False), None),       # the first gradient announces round 0
        (Poll(False), ()),
        (step, (TransferAsked(0, False),)), (Handover(0), None), (step, None),  # thread 2, mid-iteration
        (WantsStop(), True), (Notify(1, 1, True), None),                        # s = tau: blocked
        (Poll(False), ()), (Poll(True), (ModelArrived(0),)),
        (TakeIn(0), None), (Now(), 0.5), (Merged(0), None),                    # s = 1: computing again
        (step, (TransferAsked(1, True),)), (step, None),                         # the job's last: after the step
        (Poll(False), ()), (Handover(1), None),
        (Poll(True), (ModelArrived(1),)), (TakeIn(1), None), (Now(), 0.9), (Merged(1), None),
    ])
    assert stats.rounds == 2 and stats.local_iters == [1, 2]
    assert stats.waited_iterations == 2 and stats.round_end_s == [0.5, 0.9]


def test_preduce_reduces_in_its_group_goes_on_from_the_groups_k_and_stops_when_told():
    from mxhet.protocol import programs_groups
    from mxhet.protocol.effects import Grouped, JoinReduce, Ready, Reduce
    stats = _stats()
    opts = {"group_size": 2, "weights": "dynamic", "alpha": 0.5, "frozen_filter": True, "frozen_window": 0}
    _dialogue(programs_groups.preduce(opts, stats), [
        (JoinReduce(2, True, 0.5, True, 0), None),
        (Compute(True), None), (WantsStop(), False), (Ready(1, False), Grouped(False, 7, 1, 0.25, 4)),
        (Reduce(7, 1, 0.25), None),
        (Compute(True), None), (WantsStop(), True), (Ready(5, True), Grouped(stop=True)),
    ])
    assert stats.rounds == 1 and stats.local_iters == [1]


def test_local_counts_every_step_as_a_round_and_stops_when_it_wants():
    stats = _stats()
    trace = _run(programs.local({}, stats), _stop_at_round(stats, 2))
    assert trace == [(Compute(True), None), (WantsStop(), False), (Compute(True), None), (WantsStop(), True)]
    assert stats.rounds == 2 and stats.local_iters == [1, 1]


def _esync_stats(rank=0):
    from mxhet.modes.base import WorkerStats
    return WorkerStats(rank=rank)


def _esync_opts(**kw):
    from mxhet.policy import get_spec
    return get_spec("esync").resolve(kw)


class _EsyncScript:
    """Results for an ESync program: iterations of 0.1 s, a 0.002 s round trip,
    a READY from the ``ready_at``-th local iteration of a round naming
    ``slowest``; delayed answers arrive when the next iteration starts."""

    def __init__(self, stats, ready_at, slowest=-1, rounds=2):
        from mxhet.control import messages as m
        self.m, self.stats, self.ready_at, self.slowest, self.rounds = m, stats, ready_at, slowest, rounds
        self.answers, self.flight, self.now = None, [], 0.0

    def reply(self, effect):
        return self.m.QueryReply(seq=1, round=effect.round, ready=effect.k >= self.ready_at, slowest=self.slowest)

    def __call__(self, effect):
        from mxhet.protocol import effects as e
        if isinstance(effect, e.Listen):
            self.answers = effect.answers
        elif isinstance(effect, e.Iterate):
            for reply in self.flight:
                self.answers.answer(reply)
            self.flight = []
            return e.Iterated(0.1, aborted=effect.abortable and self.answers.abort)
        elif isinstance(effect, e.RoundTrip):
            return 0.002
        elif isinstance(effect, e.Now):
            self.now += 0.001
            return self.now
        elif isinstance(effect, e.StateQuery):
            if effect.blocking:
                return self.reply(effect)
            self.flight.append(self.reply(effect))
        elif isinstance(effect, e.AwaitAnswer):
            self.flight, replies = [], self.flight
            for reply in replies:
                self.answers.answer(reply)
        elif isinstance(effect, e.SendReset):
            if effect.round >= self.rounds:
                self.answers.stop()
        elif isinstance(effect, WantsStop):
            return self.stats.rounds >= self.rounds
        return None


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_esync_runs_the_test_batch_then_queries_after_every_iteration_until_ready(ack):
    from mxhet.protocol import effects as e
    stats = _esync_stats()
    trace = _run(programs.esync(_esync_opts(ack=ack), stats), _EsyncScript(stats, ready_at=2))
    effects = [effect for effect, _ in trace]
    assert effects[1] == e.Iterate(test=True)
    queries = [(q.round, q.k, q.blocking) for q in effects if isinstance(q, e.StateQuery)]
    blocking = ack == "blocking"
    # blocking: READY after the 2nd iteration's query; delayed: it abandons the 3rd iteration
    assert queries == [(0, 0, blocking), (0, 1, blocking), (0, 2, blocking), (1, 1, blocking), (1, 2, blocking)]
    assert [(a.round, a.steps) for a in effects if isinstance(a, e.AggregateDeltas)] == [(0, 2), (1, 2)]
    assert stats.rounds == 2 and stats.local_iters == [2, 2]
    aborted = [r.aborted for a, r in trace if isinstance(a, e.Iterate)]
    assert aborted.count(True) == (0 if blocking else 2)
    assert [r.round for r in effects if isinstance(r, e.SendReset)] == [1, 2]
    assert stats.waited_iterations == (4 if blocking else 0) and len(stats.round_end_s) == 2
    assert effects[-1] == e.Iterate(local_step=True, abortable=not blocking)   # the stop came during it
    assert not any(isinstance(a, e.AwaitAnswer) for a in effects)


def test_esync_with_delayed_acks_the_device_named_slowest_waits_for_its_answer():
    from mxhet.protocol import effects as e
    stats = _esync_stats(rank=3)
    trace = _run(programs.esync(_esync_opts(ack="delayed"), stats), _EsyncScript(stats, ready_at=1, slowest=3))
    effects = [effect for effect, _ in trace]
    awaits = [a for a in effects if isinstance(a, e.AwaitAnswer)]
    # named by the test batch's answer, read when the 1st iteration starts: every later query waits
    # min(4 RTTs, 20 ms) for its answer, and the READY comes in that wait: no iteration is abandoned
    assert awaits and all(a.timeout == pytest.approx(4 * 0.002) for a in awaits)
    assert all(not r.aborted for a, r in trace if isinstance(a, e.Iterate))
    assert stats.local_iters == [1, 1]
    queries = [q for q in effects if isinstance(q, e.StateQuery)]
    assert [q.ahead for q in queries] == [0.002, 0.0, 0.0]   # the named device waits out its round trip
    assert [q.c for q in queries] == [pytest.approx(0.102)] * 3


def test_esync_under_a_deadline_reports_the_test_batch_after_a_warm_up():
    """--round-deadline: the first iteration (MXNet's warm-up on the cluster) is run and dropped
    unreported; the test batch after it is the capability the first query reports."""
    from mxhet.protocol import effects as e

    class WarmUp(_EsyncScript):
        def __call__(self, effect):
            if isinstance(effect, e.Iterate) and effect.warmup:
                return e.Iterated(2.5)   # far longer than any iteration
            return super().__call__(effect)

    stats = _esync_stats()
    trace = _run(programs.esync(_esync_opts(round_deadline=4.0), stats), WarmUp(stats, ready_at=2))
    effects = [effect for effect, _ in trace]
    assert effects[1:3] == [e.Iterate(test=True, warmup=True), e.Iterate(test=True)]
    first = next(q for q in effects if isinstance(q, e.StateQuery))
    assert first.k == 0 and first.c == pytest.approx(0.1 + 0.002)   # the test batch and the round trip
    assert sum(isinstance(a, e.Iterate) and a.warmup for a in effects) == 1
    plain = [effect for effect, _ in _run(programs.esync(_esync_opts(), _esync_stats()),
                                          _EsyncScript(_esync_stats(), ready_at=2))]
    assert not any(isinstance(a, e.Iterate) and a.warmup for a in plain)   # the paper's ESync: no warm-up


def test_esync_checks_its_options_on_both_engines():
    with pytest.raises(ConfigError, match="ack"):
        Session(programs.esync(_esync_opts(ack="sometimes"), _esync_stats())).advance()
    with pytest.raises(ConfigError, match="global_lr"):
        Session(programs.esync(_esync_opts(global_lr=0.0), _esync_stats())).advance()


def test_esync_on_a_link_slower_than_the_wait_cap_the_named_device_does_not_wait():
    from mxhet.protocol import effects as e

    class SlowLink(_EsyncScript):
        def __call__(self, effect):
            return 0.05 if isinstance(effect, e.RoundTrip) else super().__call__(effect)
    stats = _esync_stats(rank=3)
    trace = _run(programs.esync(_esync_opts(ack="delayed"), stats), SlowLink(stats, ready_at=1, slowest=3))
    assert not any(isinstance(effect, e.AwaitAnswer) for effect, _ in trace)   # 20 ms could not cover 50 ms
    assert [q.ahead for q, _ in trace if isinstance(q, e.StateQuery)] == [0.05] * 3


# -- ADSP ------------------------------------------------------------------------------------------

def _adsp_job(stats, losses, stop_at_rounds):
    """Results of a scripted ADSP job: iterations of 1 s with the given losses, commits taking no time,
    a scheduler that always asks for one more commit within 4 s."""
    from mxhet.protocol.effects import Measured, MeasuredCompute, ReportCommits
    from mxhet.protocol import Now
    clock = [0.0]
    losses = iter(losses)

    def results(effect):
        if isinstance(effect, MeasuredCompute):
            clock[0] += 1.0
            return Measured(1.0, next(losses))
        if isinstance(effect, ReportCommits):
            return effect.commits + 1, 4.0
        if isinstance(effect, Now):
            return clock[0]
        if isinstance(effect, WantsStop):
            return stats.rounds >= stop_at_rounds
        return None
    return results


def test_adsp_commits_when_its_timer_is_due_and_reports_the_smoothed_loss():
    from mxhet.protocol import programs_adsp
    from mxhet.protocol.effects import ReportCommits
    stats = _stats()
    trace = _run(programs_adsp.adsp({"global_lr": 1.0}, stats), _adsp_job(stats, [3.0, 2.0, 1.0, 1.0], 2))
    # One commit due within 4 s: aimed at 2 s after each report, taken at the boundary nearest to it.
    assert [e for e, _ in trace if isinstance(e, PushAsync)] == [PushAsync(Payload.DELTAS, 0),
                                                                   PushAsync(Payload.DELTAS, 1)]
    assert stats.rounds == 2 and stats.local_iters == [2, 2]
    reports = [e for e, _ in trace if isinstance(e, ReportCommits)]
    weight = programs_adsp.LOSS_WEIGHT   # the moving average of the batches' losses, not the last batch's
    assert reports == [ReportCommits(0, -1.0, 0.0), ReportCommits(1, (1 - weight) * 3.0 + weight * 2.0, 0.0)]
    assert trace[-1] == (WantsStop(), True)   # stops right after its last commit, without another report


def test_adsp_commits_its_local_work_before_stopping():
    from mxhet.protocol import programs_adsp
    stats = _stats()
    trace = _run(programs_adsp.adsp({"global_lr": 1.0}, stats), _adsp_job(stats, [3.0], 0))
    assert [e for e, _ in trace][-2:] == [PushAsync(Payload.DELTAS, 0), programs_adsp.Now()]
    assert stats.rounds == 1 and stats.local_iters == [1]


def test_adsp_rejects_a_non_positive_global_lr():
    from mxhet.protocol import programs_adsp
    with pytest.raises(ConfigError, match="global_lr"):
        next(programs_adsp.adsp({"global_lr": 0.0}, _stats()))


# -- G-CADA and CADA -----------------------------------------------------------------------------

def test_gcada_follows_the_state_servers_selection_and_drops_work_a_teammate_claimed():
    from mxhet.protocol import programs_gcada
    from mxhet.protocol.effects import (BeginIteration, ClaimUpload, Download, Selection, StepServers, Upload,
                                        WatchedCompute)
    stats = types.SimpleNamespace(rounds=0, local_iters=[], aborted=0)
    selections = iter([Selection(0, ready=True), Selection(1), Selection(2, target=True), Selection(3, ready=True),
                       Selection(4, ready=True), Selection(5, stop=True)])
    computed = iter([True, False, True])   # iteration 3's work is dropped during the iteration
    claims = iter([True, False])           # iteration 4's claim comes second

    def results(effect):
        if isinstance(effect, WantsStop):
            return stats.rounds >= 4
        if isinstance(effect, BeginIteration):
            return next(selections)
        if isinstance(effect, WatchedCompute):
            return next(computed)
        if isinstance(effect, ClaimUpload):
            return next(claims)
        if isinstance(effect, Upload):
            return True   # the iteration's last upload
        return None
    trace = _run(programs_gcada.gcada({}, stats), results)
    effects = [e for e, _ in trace if not isinstance(e, WantsStop)]
    assert effects == [BeginIteration(0, False), Download(0), WatchedCompute(), ClaimUpload(0), Upload(0),
                       StepServers(0),
                       BeginIteration(1, False),                       # not selected: ask for the next
                       BeginIteration(2, False), StepServers(2),       # nobody selected: this worker steps
                       BeginIteration(3, False), Download(3), WatchedCompute(),   # dropped: no claim
                       BeginIteration(4, False), Download(4), WatchedCompute(), ClaimUpload(4),   # not first
                       BeginIteration(5, True)]
    assert stats.rounds == 5 and stats.local_iters == [1, 1] and stats.aborted == 1
