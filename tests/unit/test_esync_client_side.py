"""ESync's worker side: the State Server client state machine, with a fake
transport and a fake clock (no sockets, no parameter server)."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from mxhet.config import WorkerConfig
from mxhet.control import messages as m
from mxhet.control import wire
from mxhet.control.client import StateClient
from mxhet.errors import ConfigError, StateServerTimeout
from mxhet.modes import get_mode
from mxhet.protocol.effects import Iterated
from mxhet.trainer import Trainer


class FakeClock:
    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeTransport:
    """Keeps sent messages; hands over scripted replies at given clock times."""

    def __init__(self, clock):
        self.clock = clock
        self.sent = []
        self.inbox = []  # (deliver_at, bytes)
        self.auto = None  # callable(message) -> Reply or None, answered at once

    def send(self, data):
        msg = m.decode(data)
        self.sent.append(msg)
        reply = self.auto(msg) if self.auto else None
        if reply is not None:
            self.deliver(reply)

    def deliver(self, reply, at=None):
        self.inbox.append((self.clock() if at is None else at, m.encode(reply)))
        self.inbox.sort(key=lambda item: item[0])

    def recv(self, timeout=0.0):
        if self.inbox and self.inbox[0][0] <= self.clock() + timeout:
            at, data = self.inbox.pop(0)
            self.clock.now = max(self.clock(), at)
            return at, data
        self.clock.advance(timeout)
        return None

    def queries(self):
        return [q for q in self.sent if isinstance(q, m.Query)]

    def close(self):
        pass


def _without_parameter_server(trainer, clock, transport, tested=True):
    """Make ``trainer``'s esync mode ready to step with a fake clock and a
    State Server client on ``transport``, without the parameter server.

    ``tested``: the worker is past its test batch (Algorithm 1 line 3), so its
    next step is a local iteration; else its next step is the test batch."""
    mode = trainer.mode
    mode.clock = mode.timer.clock = clock   # the mode's own readings and its timer's
    mode.sleep = clock.advance
    mode.client = StateClient("fake", rank=0, slot=0, clock=clock, transport=transport)
    mode.wbufs = [w.copy() for w in mode.weights()]   # the global model as pulled at setup
    mode._ready = True
    mode.timer.t_last = mode.timer.t_start = clock()
    mode.on_setup(1)   # the worker program starts; it waits on the test batch
    if tested:   # the test batch, answered NOT-READY at once, then forgotten
        auto, transport.auto = transport.auto, lambda msg: _reply(msg, False) if isinstance(msg, m.Query) else None
        mode._advance(Iterated(0.0))
        transport.auto = auto
        transport.sent.clear()
        transport.inbox.clear()
        mode.client.queries = mode.client.replies = 0
        mode.client._rtt = type(mode.client._rtt)()
        mode.stats.rtt_s = 0.0
        mode.answers.named_slowest = False
        mode.stats.state_queries = mode.stats.state_replies = mode.stats.waited_iterations = 0
    return mode


def _esync(ack, clock, transport, slowdown=1.0, tested=True):
    """A real mxhet.Trainer in esync mode on a 1-parameter net, without the parameter server."""
    net = gluon.nn.Dense(1, use_bias=False, in_units=1)
    net.initialize(mx.init.Constant(1.0))
    config = WorkerConfig(sync="esync", slowdown=slowdown)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, config=config, ack=ack)
    mode = _without_parameter_server(trainer, clock, transport, tested)
    aggregations = []

    def aggregate(effect):  # the data plane is tested with real processes
        aggregations.append((effect.steps, float(net.weight.data().asscalar())))
    mode._aggregate = aggregate
    return net, trainer, aggregations


def _iteration(net, trainer, clock, seconds=0.1):
    x = mx.nd.ones((1, 1))
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    clock.advance(seconds)
    trainer.step(1)


def _reply(query, ready, **kw):
    return m.QueryReply(seq=query.seq, ready=ready, round=query.round, **kw)


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_the_first_step_is_a_test_batch_reported_with_k_zero(ack):
    """Algorithm 1 lines 3-6: the first step is timed (emulated slowdown
    included) and reported as c with k = 0; its gradient is not applied and it
    is not counted as an iteration; local iterations then count from k = 1."""
    clock = FakeClock()
    transport = FakeTransport(clock)
    transport.auto = lambda msg: _reply(msg, False) if isinstance(msg, m.Query) else None
    net, trainer, aggregations = _esync(ack, clock, transport, slowdown=3.0, tested=False)
    _iteration(net, trainer, clock, seconds=0.1)          # 0.1 s compute + 0.2 s emulated
    (test,) = transport.queries()
    assert (test.round, test.k, test.c) == (0, 0, pytest.approx(0.3))
    assert float(net.weight.data().asscalar()) == 1.0    # w_0,0 = w_0
    assert not net.weight.list_data()[0]._fresh_grad      # the gradient was dropped
    stats = trainer.stats
    assert (stats.iterations, stats.samples, stats.aborted, stats.waited_iterations) == (0, 0, 0, 0)
    assert stats.compute_s == pytest.approx(0.3) and stats.test_batch_s == pytest.approx(0.3)
    assert trainer.mode.aggregated                        # the replica holds no local work
    _iteration(net, trainer, clock, seconds=0.1)
    assert [q.k for q in transport.queries()] == [0, 1]
    assert float(net.weight.data().asscalar()) == pytest.approx(0.9)
    assert stats.iterations == 1 and stats.samples == 1 and stats.compute_s == pytest.approx(0.6)
    assert stats.waited_iterations == (1 if ack == "blocking" else 0) and aggregations == []


def test_a_resumed_worker_reports_a_test_batch_in_its_round():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net = gluon.nn.Dense(1, use_bias=False, in_units=1)
    net.initialize(mx.init.Constant(1.0))
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, config=WorkerConfig(sync="esync"),
                      ack="delayed")
    trainer.mode.restore_state({"round": 3, "rounds": 3, "iterations": 20, "samples": 20})
    _without_parameter_server(trainer, clock, transport, tested=False)
    _iteration(net, trainer, clock)
    _iteration(net, trainer, clock)
    assert [(q.round, q.k) for q in transport.queries()] == [(3, 0), (3, 1)]
    assert trainer.stats.iterations == 21 and float(net.weight.data().asscalar()) == pytest.approx(0.9)


def test_the_test_batch_leaves_batchnorm_statistics_at_the_global_model():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(3, in_units=2), gluon.nn.BatchNorm(in_channels=3), gluon.nn.Dense(1, in_units=3))
    net.initialize(mx.init.Xavier())
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                      config=WorkerConfig(sync="esync"), ack="delayed")
    _without_parameter_server(trainer, clock, transport, tested=False)
    before = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    x = mx.nd.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0], [-2.0, 1.0]])
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    moved = net[1].running_mean.data().asnumpy()
    assert not np.array_equal(moved, before[net[1].running_mean.name])   # the forward pass moved them
    trainer.step(4)
    for name, p in net.collect_params().items():         # ... and the test batch put them back
        np.testing.assert_array_equal(p.data().asnumpy(), before[name])
    assert [q.k for q in transport.queries()] == [0]


def test_delayed_acks_never_wait_and_late_not_ready_changes_nothing():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net, trainer, aggregations = _esync("delayed", clock, transport)
    for _ in range(5):
        _iteration(net, trainer, clock)
    # five queries went out, none answered yet: implicit NOT-READY, training went on
    assert [q.k for q in transport.queries()] == [1, 2, 3, 4, 5]
    assert trainer.stats.waited_iterations == 0 and trainer.stats.iterations == 5
    # the answers to the first three arrive three iterations late: all NOT-READY
    for q in transport.queries()[:3]:
        transport.deliver(_reply(q, False))
    _iteration(net, trainer, clock)
    assert aggregations == [] and trainer.stats.iterations == 6
    assert trainer.stats.state_replies == 3


def test_ready_mid_iteration_aborts_without_partial_update():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net, trainer, aggregations = _esync("delayed", clock, transport)
    _iteration(net, trainer, clock)
    _iteration(net, trainer, clock)
    w_after_two = float(net.weight.data().asscalar())
    assert w_after_two == pytest.approx(1.0 - 2 * 0.1)  # d(loss)/dw = 1
    # READY for iteration 1 arrives while iteration 3 runs (δ = 2)
    transport.deliver(_reply(transport.queries()[0], True, slowest=3))
    _iteration(net, trainer, clock)
    assert aggregations == [(2, pytest.approx(w_after_two))]  # iterations 1..k+δ-1, nothing of the 3rd
    assert trainer.stats.aborted == 1 and trainer.stats.iterations == 2
    assert trainer.stats.round_aborted == [1] and trainer.stats.round_slowest == [3]
    assert len(transport.queries()) == 2  # the abandoned iteration sent nothing


def test_ready_right_after_query_aggregates_without_waste():
    clock = FakeClock()
    transport = FakeTransport(clock)
    transport.auto = lambda msg: _reply(msg, msg.k >= 2) if isinstance(msg, m.Query) else None
    net, trainer, aggregations = _esync("delayed", clock, transport)
    _iteration(net, trainer, clock)
    _iteration(net, trainer, clock)
    assert [k for k, _ in aggregations] == [2] and trainer.stats.aborted == 0


def test_ready_during_emulated_slowdown_ends_it():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net, trainer, aggregations = _esync("delayed", clock, transport, slowdown=10.0)
    _iteration(net, trainer, clock, seconds=0.1)          # 0.1 s compute + 0.9 s emulated
    assert clock() == pytest.approx(1.0)
    transport.deliver(_reply(transport.queries()[0], True), at=1.3)
    _iteration(net, trainer, clock, seconds=0.1)          # READY at 1.3 s, inside the emulated part
    assert clock() == pytest.approx(1.3)
    assert trainer.stats.aborted == 1 and [k for k, _ in aggregations] == [1]


def test_late_and_duplicate_replies_for_an_old_round_are_ignored():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net, trainer, aggregations = _esync("delayed", clock, transport)
    _iteration(net, trainer, clock)
    first = transport.queries()[0]
    transport.deliver(_reply(first, True))
    _iteration(net, trainer, clock)                       # aborted, round 0 aggregated
    assert len(aggregations) == 1
    transport.deliver(_reply(first, True))                # duplicate READY of round 0
    _iteration(net, trainer, clock)
    _iteration(net, trainer, clock)
    assert len(aggregations) == 1 and trainer.stats.late_replies == 1
    assert trainer.stats.iterations == 3


def test_blocking_mode_waits_for_every_answer():
    clock = FakeClock()
    transport = FakeTransport(clock)
    transport.auto = lambda msg: _reply(msg, msg.k >= 3) if isinstance(msg, m.Query) else None
    net, trainer, aggregations = _esync("blocking", clock, transport)
    for _ in range(4):
        _iteration(net, trainer, clock)
    assert trainer.stats.waited_iterations == 4
    assert [k for k, _ in aggregations] == [3] and trainer.stats.aborted == 0


def test_capability_includes_rtt():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net, trainer, _ = _esync("delayed", clock, transport)
    _iteration(net, trainer, clock, seconds=0.1)
    transport.deliver(_reply(transport.queries()[0], False), at=clock() + 0.05)  # 50 ms round trip
    clock.advance(0.05)
    _iteration(net, trainer, clock, seconds=0.1)
    assert trainer.stats.rtt_s == pytest.approx(0.05)
    assert transport.queries()[1].c == pytest.approx(0.15 + 0.05)


@pytest.mark.parametrize("offset", [5.0, -5.0, 300.0, -300.0])
def test_skewed_worker_clock_sends_the_same_queries(offset):
    sent = []
    for start in (1000.0, 1000.0 + offset):
        clock = FakeClock(start)
        transport = FakeTransport(clock)
        transport.auto = lambda msg: _reply(msg, False) if isinstance(msg, m.Query) else None
        net, trainer, _ = _esync("blocking", clock, transport)
        for _ in range(3):
            _iteration(net, trainer, clock)
        sent.append([(q.round, q.k, round(q.c, 9), round(q.since_finish, 9)) for q in transport.queries()])
    assert sent[0] == sent[1]
    assert all(q[3] < 1e-6 for q in sent[0])  # a duration, not an instant


def test_bad_options():
    with pytest.raises(ConfigError):
        get_mode("esync")(trainer=None, config=WorkerConfig(), global_lr=0)
    with pytest.raises(ConfigError, match="ack"):
        get_mode("esync")(trainer=None, config=WorkerConfig(), ack="sometimes")


class Flaky(FakeTransport):
    """Loses the first ``lose`` messages; then answers like a (possibly restarted) State Server."""

    def __init__(self, clock, lose=0, forget=False):
        super().__init__(clock)
        self.lose, self.forget, self.registered = lose, forget, False

    def send(self, data):
        msg = m.decode(data)
        self.sent.append(msg)
        if self.lose > 0:
            self.lose -= 1
            return
        if isinstance(msg, m.Register):
            self.registered = True
            self.deliver(m.Registered(seq=msg.seq, round=msg.round))
        elif self.forget and not self.registered:
            self.deliver(m.Reply(seq=msg.seq, ok=False, error="rank 0 has not registered", code="not_registered"))
        else:
            # the record the request's rule answers with, naming its round where it has one
            fields = {"round": getattr(msg, "round", 0)} if "round" in wire.fields_of(msg.REPLY) else {}
            self.deliver(msg.REPLY(seq=msg.seq, **fields))


def test_lost_requests_are_sent_again_with_the_same_sequence_number():
    clock = FakeClock()
    transport = Flaky(clock, lose=2)
    client = StateClient("fake", rank=0, slot=0, clock=clock, transport=transport, timeout=30)
    assert client.reset(3) is False
    resets = [msg for msg in transport.sent if isinstance(msg, m.Reset)]
    assert len(resets) == 3 and len({(r.seq, r.incarnation) for r in resets}) == 1
    assert clock() == pytest.approx(0.5 + 1.0)  # back-off: 0.5 s, then 1 s


def test_a_restarted_state_server_gets_a_new_registration_with_the_round():
    clock = FakeClock()
    transport = Flaky(clock, forget=True)
    client = StateClient("fake", rank=0, slot=2, clock=clock, transport=transport)
    client.send_query(5, 1, 0.1)                   # the worker is in round 5
    transport.inbox.clear()
    assert client.reset(6) is False                # answered "not registered" first
    register = [msg for msg in transport.sent if isinstance(msg, m.Register)]
    assert len(register) == 1 and register[0].round == 6 and register[0].slot == 2  # the latest round it spoke of
    assert client.reregistrations == 1


def test_retry_budget_ends_with_a_clear_error():
    clock = FakeClock()
    client = StateClient("fake", rank=0, slot=0, clock=clock, transport=Flaky(clock, lose=10 ** 6), timeout=20)
    with pytest.raises(StateServerTimeout, match="attempts"):
        client.reset(1)
    assert clock() == pytest.approx(20.0)


def test_base_iteration_pads_each_iteration_to_f_times_t_and_counts_overruns():
    clock = FakeClock()
    transport = FakeTransport(clock)
    net = gluon.nn.Dense(1, use_bias=False, in_units=1)
    net.initialize(mx.init.Constant(1.0))
    config = WorkerConfig(sync="esync", slowdown=3.0, base_iter_s=0.2)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, config=config, ack="delayed")
    mode = _without_parameter_server(trainer, clock, transport, tested=False)
    _iteration(net, trainer, clock, seconds=0.25)   # the test batch, padded to 3 x 0.2 = 0.6 s as any iteration
    assert clock() == pytest.approx(0.6) and trainer.stats.overruns == 0
    _iteration(net, trainer, clock, seconds=0.9)    # slower than 0.6 s: no padding, one overrun
    assert clock() == pytest.approx(1.5) and trainer.stats.overruns == 1
    assert trainer.stats.compute_s == pytest.approx(1.5)


def test_abort_on_a_model_with_batchnorm_drops_only_real_gradients():
    """BatchNorm running statistics have grad_req='null': an abort must not
    touch their (non-existent) gradient state. It raised "NDArray has not been
    marked as a variable" on every BatchNorm model before."""
    clock = FakeClock()
    transport = FakeTransport(clock)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(3, in_units=2), gluon.nn.BatchNorm(in_channels=3), gluon.nn.Dense(1, in_units=3))
    net.initialize(mx.init.Xavier())
    assert any(p.grad_req == "null" for p in net.collect_params().values())
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                      config=WorkerConfig(sync="esync"), ack="delayed")
    mode = _without_parameter_server(trainer, clock, transport)
    aggregated = []
    mode._aggregate = lambda effect: aggregated.append(effect.steps)
    x = mx.nd.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0], [-2.0, 1.0]])

    def iteration():
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        clock.advance(0.1)
        trainer.step(4)
    iteration()
    transport.deliver(_reply(transport.queries()[0], True))
    before = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()
              if p.grad_req != "null"}
    iteration()                                           # READY: this iteration is abandoned
    assert trainer.stats.aborted == 1 and aggregated == [1]
    for name, value in before.items():                    # no part of it reached the replica
        np.testing.assert_array_equal(net.collect_params()[name].data().asnumpy(), value)
    weight = net[0].weight
    assert not weight.list_data()[0]._fresh_grad          # its gradients were dropped


@pytest.mark.parametrize("ack", ["blocking", "delayed"])
def test_a_worker_reports_the_round_trip_it_does_not_wait_as_time_since_finish(ack):
    """t_e + c is the next query's arrival (mxhet.control.state_rule): a blocking
    query waits its round trip before the next iteration, so it reports only the
    time since the iteration ended; a delayed-ACK query, and RESET, start the next
    iteration at once and report the round trip too."""
    clock = FakeClock()
    transport = FakeTransport(clock)
    net, trainer, _ = _esync(ack, clock, transport)
    mode = trainer.mode
    answered = 0.05      # a 50 ms round trip for every query

    def auto(msg):
        if isinstance(msg, m.Query):
            transport.deliver(_reply(msg, msg.k >= 2), at=clock() + answered)
    transport.auto = auto
    mode._member_round = lambda effect: (clock(),) * 3   # the data plane is tested with real processes
    del mode._aggregate                               # back to ESync._aggregate
    for _ in range(4):
        _iteration(net, trainer, clock)
        if ack == "delayed":
            clock.advance(answered)
    queries = transport.queries()
    assert trainer.stats.rtt_s == pytest.approx(answered)
    unwaited = 0.0 if ack == "blocking" else answered
    assert [q.since_finish for q in queries[1:]] == pytest.approx([unwaited] * (len(queries) - 1))
    resets = [msg for msg in transport.sent if isinstance(msg, m.Reset)]
    assert resets and all(r.since_finish == pytest.approx(answered) for r in resets)
