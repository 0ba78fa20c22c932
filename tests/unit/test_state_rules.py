"""The State Server's rules as plugins (mxhet.control.rules): chosen by the mode's spec, one owner per kind."""
import pytest

from mxhet.control import messages as m
from mxhet.control.rules import ALL_RULES, PLUGINS
from mxhet.control.server import StateService
import mxhet.policy.specs  # noqa: F401  (registers the specs)
from mxhet.policy.spec import ModeSpec, registered_specs
from mxhet.errors import ConfigError


def _service(rules, n=2):
    svc = StateService(n, now=0.0, rules=rules)
    for r in range(n):
        assert svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r).ok
    return svc


def test_every_request_kind_has_exactly_one_handler_with_every_rule_loaded():
    core = {m.Register.TYPE, m.Bye.TYPE, m.Heartbeat.TYPE}
    owned = [kind for cls in PLUGINS.values() for kind in cls.KINDS]
    assert len(owned) == len(set(owned))
    assert set(owned) | core == set(m.REQUEST_TYPES)
    assert not set(owned) & core


def test_a_kind_no_loaded_rule_handles_is_refused_and_names_the_rules():
    svc = _service(("esync", "membership"))
    reply = svc.handle(m.Clock(rank=0, seq=2, clock=1), 1.0, sender=0)
    assert not reply.ok
    assert "'clock'" in reply.error and "esync, membership" in reply.error
    # the refusal changes nothing: the rules loaded still answer
    assert svc.handle(m.Query(rank=0, seq=3, round=0, k=1, c=0.1, since_finish=0.0), 1.0, sender=0).ok


def test_without_rules_only_registration_heartbeats_and_goodbyes_are_served():
    svc = _service(())
    assert svc.handle(m.Heartbeat(rank=0, seq=2), 1.0, sender=0) is None
    assert not svc.handle(m.Query(rank=0, seq=3, round=0, k=1, c=0.1, since_finish=0.0), 1.0, sender=0).ok
    assert svc.handle(m.Bye(rank=0, seq=4), 2.0, sender=0).ok
    assert svc.handle(m.Bye(rank=1, seq=2), 2.0, sender=1).ok
    assert svc.finished
    stats = svc.stats()
    assert stats["rounds"] == [] and stats["ssp_clocks"] == {} and stats["gcada"] is None


def test_an_unknown_rule_name_is_a_value_error():
    with pytest.raises(ValueError, match="nosuch"):
        StateService(2, rules=("esync", "nosuch"))
    with pytest.raises(ValueError):
        StateService(2, rules="esync")


@pytest.mark.parametrize("spec", registered_specs(), ids=lambda s: s.name)
def test_every_mode_spec_names_known_rules(spec):
    assert set(spec.state_rules) <= set(ALL_RULES)
    if spec.state_rules:
        assert spec.needs_state_server
    StateService(2, rules=spec.state_rules)


def test_a_spec_with_malformed_rule_names_is_refused():
    with pytest.raises(ConfigError):
        ModeSpec("x", "dist_async", "x", state_rules=("ssp", "ssp"))
    with pytest.raises(ConfigError):
        ModeSpec("x", "dist_async", "x", state_rules="ssp")


def test_ssp_deferred_clock_is_released_by_the_slowest_leaving():
    svc = StateService(2, now=0.0, staleness=0, rules=("ssp",))
    for r in range(2):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r)
    assert svc.handle(m.Clock(rank=0, seq=2, clock=1), 1.0, sender=0) is None   # one ahead of rank 1
    svc.handle(m.Bye(rank=1, seq=2), 2.0, sender=1)
    assert [(r, reply.seq) for r, reply in svc.take_released()] == [(0, 2)]


def test_the_state_server_command_refuses_an_unknown_rule_before_binding(capsys):
    from mxhet import state_server
    with pytest.raises(SystemExit) as exc:
        state_server.main(["--bind", "tcp://127.0.0.1:0", "--num-workers", "2", "--rules", "esync,bogus"])
    assert exc.value.code == 2
    assert "bogus" in capsys.readouterr().err
