"""ESync's worker side with a fake State Server client and fake clocks."""
import pytest

from mxhet.config import WorkerConfig
from mxhet.errors import ConfigError
from mxhet.modes import get_mode


class FakeClock:
    def __init__(self, start):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeClient:
    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []
        self.queries = 0

    def query(self, round_, k, c, since_finish=0.0):
        self.queries += 1
        self.sent.append((round_, k, round(c, 9), round(since_finish, 9)))
        return self.answers.pop(0)


def _mode(clock, answers):
    mode = get_mode("esync")(trainer=None, config=WorkerConfig(sync="esync"), clock=clock)
    mode.client = FakeClient(answers)
    mode.aggregate = lambda: None  # the data plane is tested with real processes
    return mode


@pytest.mark.parametrize("offset", [5.0, -5.0, 300.0, -300.0])
def test_skewed_worker_clock_sends_the_same_queries(offset):
    sent = []
    for start in (1000.0, 1000.0 + offset):
        clock = FakeClock(start)
        mode = _mode(clock, [False, False, True])
        for _ in range(3):
            end = clock()
            clock.advance(0.004)  # encoding the query takes a moment
            mode.communicate(64, capability=0.25, compute_end=end)
            clock.advance(0.25)
        sent.append(mode.client.sent)
    assert sent[0] == sent[1]
    assert [q[1] for q in sent[0]] == [1, 2, 3]            # k counts local iterations
    assert all(q[3] == pytest.approx(0.004) for q in sent[0])  # a duration, not an instant


def test_ready_triggers_aggregation_once():
    clock = FakeClock(0.0)
    mode = _mode(clock, [False, True])
    calls = []
    mode.aggregate = lambda: calls.append(mode.k)
    mode.communicate(64, 0.1, clock())
    mode.communicate(64, 0.1, clock())
    assert calls == [2]


def test_bad_global_lr():
    with pytest.raises(ConfigError):
        get_mode("esync")(trainer=None, config=WorkerConfig(), global_lr=0)
