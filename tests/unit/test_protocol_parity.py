"""Parity of the two interpreters of a worker program: one short scripted job
(3 workers, fixed iteration times, one seed, 3 rounds) run by the simulator
(the real engine, virtual time) and by the cluster's real executors
(``LocalSGD``, ``Sync``, ``Async``, ``DCASGD``, ``SSP``) and their ``step()``
(with in-process fakes for the trainer, the parameter servers and the State
Server, one thread per worker) must make the same decisions: every effect
with its result, in order -- iterations, stop wishes, exchanges and
asynchronous pushes with their round and ballot, the summed ballots, SSP's
clocks, the stop -- and the same per-round accounting (rounds, local steps
per round).
"""
import threading

import pytest

from mxhet.config import WorkerConfig
from mxhet.modes import get_mode
from mxhet.protocol import Clock, Payload, PushAsync, WantsStop
from mxhet.sim import cli, engine

pytestmark = pytest.mark.timeout(300)

ROUNDS = 3
WORKERS = 3


class _Servers:
    """``dist_sync`` for the stop ballot: sum every worker's, hand the sum to all."""

    def __init__(self, n):
        self.barrier = threading.Barrier(n, timeout=60)
        self.lock = threading.Lock()
        self.sums = {}

    def exchange(self, round_index, vote):
        with self.lock:
            self.sums[round_index] = self.sums.get(round_index, 0.0) + vote
        self.barrier.wait()
        return self.sums[round_index]


class _Trainer:
    _params = []   # no parameters: the decisions do not depend on the model

    def local_step(self, batch_size, ignore_stale_grad=False):
        pass


class _Channel:
    def init(self, keys, values):
        pass


class _Client:
    def clock(self, iterations):
        pass

    def bye(self):
        pass

    def close(self):
        pass


def _cluster_traces(mode_name, options):
    servers = _Servers(WORKERS)

    class Executor(get_mode(mode_name)):
        def exchange_deltas(self, round_index, extra_keys=(), extra_values=(), extra_outs=()):
            extra_outs[0][:] = servers.exchange(round_index, extra_values[0].asscalar())

        def exchange_gradients(self, batch_size, round_index, extra_keys=(), extra_values=(), extra_outs=()):
            if extra_values:   # dist_sync with the stop ballot; a dist_async push waits for nobody
                self.exchange_deltas(round_index, extra_keys, extra_values, extra_outs)

    now = [0.0]
    modes = []
    for slot in range(WORKERS):
        mode = Executor(_Trainer(), WorkerConfig(slot=slot, num_slots=WORKERS), clock=lambda: now[0],
                        sleep=lambda s: None, **options)
        mode.trace = []
        mode.channel = _Channel()
        mode.on_setup(64)   # what setup() does after connecting and sharing the model
        mode._ready = True
        mode._t_last = mode._t_start = 0.0
        mode.stop_condition = lambda stats: stats.rounds >= ROUNDS   # mxhet.train's --max-rounds
        mode.client = _Client()   # the State Server (ssp's gate: the test's rounds need no waiting)
        modes.append(mode)
    errors = []

    def script(mode):   # the training loop: step() until the mode stops
        try:
            while not mode.stopped:
                mode.step(64)
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)
            servers.barrier.abort()
    threads = [threading.Thread(target=script, args=(mode,)) for mode in modes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads), errors
    return {m.config.slot: (m.trace, m.stats.rounds, m.stats.local_iters) for m in modes}


def _sim_traces(tmp_path, mode_name, argv, monkeypatch):
    made = []
    init = engine.Simulation.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.traces = {}
        made.append(self)
    monkeypatch.setattr(engine.Simulation, "__init__", recording_init)
    out = tmp_path / mode_name
    args = cli.build_parser().parse_args([
        "-n", str(WORKERS), "--sync", mode_name, "--slowdown", "1,1,3", "--base-iter", "0.02", "--seed", "0",
        "--max-rounds", str(ROUNDS), "--time-budget", "100", "--model", "smallcnn", "--eval-samples", "50",
        "--final-eval-samples", "50", "--eval-interval", "10", "--no-progress", "--metrics-out", str(out), *argv])
    args.argv = []
    summary = cli.run(args)
    sim = made[0]
    workers = {w["slot"]: w for w in summary["workers"]}
    return {slot: (sim.traces[slot], workers[slot]["rounds"], workers[slot]["local_iters"]) for slot in workers}


@pytest.mark.parametrize("mode_name, argv, options", [
    ("localsgd", ["--local-steps", "2"], {"local_steps": 2}),
    ("sync", [], {}),
    ("async", [], {}),
    ("dcasgd", [], {}),
    ("ssp", ["--staleness", "1"], {}),
])
def test_both_interpreters_make_the_same_decisions(tmp_path, monkeypatch, mode_name, argv, options):
    cluster = _cluster_traces(mode_name, options)
    sim = _sim_traces(tmp_path, mode_name, argv, monkeypatch)
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
