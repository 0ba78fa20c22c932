"""Worker programs (mxhet.protocol) with no runtime at all: scripted effect
results in, effects out. No MXNet."""
import types

import pytest

from mxhet.errors import ConfigError
from mxhet.protocol import Compute, Exchange, Payload, Session, WantsStop, programs


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


def test_the_simulator_interpreter_runs_a_program_in_virtual_time():
    """run_program over a stand-in simulation: registration first, each Compute
    costs its iteration time, Now reads the virtual clock, goodbye last."""
    simpy = pytest.importorskip("simpy")
    from mxhet.protocol import Now
    from mxhet.sim.program import run_program

    env = simpy.Environment()
    log = []

    class Sim:
        job = types.SimpleNamespace(mode_options={})
        spec = types.SimpleNamespace(resolve=dict)

        def register(self, dev):
            yield env.timeout(0.25)
            log.append("register")

        def leave(self, dev):
            log.append("bye")
            yield env.timeout(0)

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
