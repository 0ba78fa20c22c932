"""The worker configuration read from the launcher's environment."""
import pytest

from mxhet.config import omp_wait_policy, parse_context, parse_slowdown_schedule, worker_config
from mxhet.errors import ConfigError


def test_schedule_parsing_and_lookup():
    env = {"MXHET_SLOWDOWN": "2", "MXHET_SLOWDOWN_SCHEDULE": "10-20=4,30-=8", "MXHET_NET_DELAY_MS": "30"}
    cfg = worker_config(env)
    assert cfg.slowdown_schedule == ((10.0, 20.0, 4.0), (30.0, None, 8.0))
    assert [cfg.slowdown_at(t) for t in (0, 10, 19.9, 20, 29, 30, 1e6)] == [2, 4, 4, 2, 2, 8, 8]
    assert cfg.net_delay_ms == 30.0


@pytest.mark.parametrize("text", ["", "10=4", "a-b=2", "10-5=2", "0-10=0.5", "0-=2,5-=3", "0-10=2,5-20=3"])
def test_bad_schedules(text):
    with pytest.raises(ConfigError):
        parse_slowdown_schedule(text)


@pytest.mark.parametrize("env", [
    {"MXHET_NET_DELAY_MS": "-1"}, {"MXHET_NET_DELAY_MS": "inf"}, {"MXHET_SLOT": "3", "MXHET_NUM_SLOTS": "3"},
    {"MXHET_SLOWDOWN": "0.5"}, {"MXHET_CONTEXT": "tpu(0)"}, {"MXHET_NUM_SLOTS": "x"},
])
def test_bad_environment(env):
    with pytest.raises(ConfigError):
        worker_config(env)


def test_contexts():
    assert parse_context("cpu") == ("cpu", 0)
    assert parse_context("gpu(3)") == ("gpu", 3)
    with pytest.raises(ConfigError):
        parse_context("gpu")


def test_defaults_outside_the_launcher():
    cfg = worker_config({})
    assert (cfg.sync, cfg.slot, cfg.num_slots, cfg.launched, cfg.slowdown_at(5.0)) == ("local", 0, 1, False, 1.0)


def test_mx_context_refuses_a_gpu_that_is_missing_or_cannot_run_a_kernel(monkeypatch):
    import mxnet as mx

    from mxhet.config import mx_context
    assert mx_context("cpu") == mx.cpu()
    monkeypatch.setattr(mx.context, "num_gpus", lambda: 0)
    with pytest.raises(ConfigError, match=r"gpu\(0\) asked for, but MXNet sees 0 GPU"):
        mx_context("gpu(0)")
    # One GPU that MXNet has no kernels for (a Hopper GPU under MXNet 1.9.1's CUDA packages)
    monkeypatch.setattr(mx.context, "num_gpus", lambda: 1)

    def no_kernel(*args, **kwargs):
        raise mx.base.MXNetError("CUDA: no kernel image is available for execution on the device\nstack")
    monkeypatch.setattr(mx.nd, "ones", no_kernel)
    with pytest.raises(ConfigError, match=r"cannot run a kernel on gpu\(0\): CUDA: no kernel image .*8\.6"):
        mx_context("gpu(0)")


def test_openmp_waits_passively_unless_the_environment_chooses():
    assert omp_wait_policy({}) == "PASSIVE"
    assert omp_wait_policy({"OMP_WAIT_POLICY": ""}) == "PASSIVE"
    assert omp_wait_policy({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
