"""The mode specs are the one source of the mode options' flags, defaults and checks
(mxhet.policy.flags): python -m mxhet.train and python -m mxhet.sim take the same
flags, and both refuse a bad value the same way."""
import pytest

from mxhet import train
from mxhet.config import WorkerConfig
from mxhet.errors import ConfigError
from mxhet.policy import ModeSpec, Option, get_spec, spec_names
from mxhet.policy.checks import at_least
from mxhet.policy.flags import GROUP_TITLE, dest, flag_table
from mxhet.sim import cli as sim_cli

#: a value each option with a check refuses (by name; a new checked option must be added here)
BAD = {"global_lr": "0", "state_timeout": "-1", "outer_lr": "0", "outer_momentum": "1.0", "max_local_steps": "-1",
       "lamda": "-0.5", "local_steps": "0", "staleness": "0", "group_size": "1", "alpha": "1.0",
       "frozen_window": "-1", "groups": "0", "max_delay": "0", "c": "0", "step_size": "0", "beta1": "1",
       "beta2": "1.5", "nesterov_period": "-1", "round_deadline": "0.5",
       "round_length": "0.5", "wait_needed": "0.5"}


def _options():
    return [(name, o) for name in spec_names() for o in get_spec(name).options]


def _mode_actions(parser):
    group = next(g for g in parser._action_groups if g.title == GROUP_TITLE)
    return {a.option_strings[0]: a for a in group._group_actions}


def test_every_spec_option_is_a_flag_of_both_parsers_and_nothing_else_is():
    flags = {o.flag for _, o in _options()}
    assert {"--local-steps", "--dc-lambda", "--max-staleness", "--lazy-c", "--frozen-filter", "--ack",
            "--dynamic-local-steps", "--reset-optimizer-state"} <= flags
    for parser in (train.build_parser(), sim_cli.build_parser()):
        actions = _mode_actions(parser)
        assert set(actions) == flags
        for flag, action in actions.items():
            assert action.default is None and action.dest == dest(flag)
            assert all(name in action.help for name, o in _options() if o.flag == flag)  # each mode named


def _train_args(mode, *argv):
    return train.build_parser().parse_args(["--sync", mode, "--metrics-out", "unused", *argv])


def _sim_args(mode, *argv):
    n = "1" if mode == "local" else "4"
    return sim_cli.build_parser().parse_args(["-n", n, "--sync", mode, "--base-iter", "0.1",
                                              "--metrics-out", "unused", *argv])


def test_a_bad_value_of_every_checked_option_is_refused_by_both_engines_naming_it():
    checked = [(mode, o) for mode, o in _options() if o.check is not None]
    assert {o.name for _, o in checked} == set(BAD)
    for mode, option in checked:
        argv = (option.flag, BAD[option.name])
        with pytest.raises(ConfigError, match=r"%s: %s \(%s\)" % (mode, option.name, option.flag)):
            train.run(_train_args(mode, *argv), config=WorkerConfig(sync=mode))   # before any model or data
        with pytest.raises(ConfigError, match=r"%s: %s \(%s\)" % (mode, option.name, option.flag)):
            sim_cli.make_job(_sim_args(mode, *argv))


def test_a_value_outside_the_choices_is_refused_on_the_command_line_and_by_the_spec(capsys):
    with_choices = [(mode, o) for mode, o in _options() if o.choices or o.type is bool]
    assert {o.name for _, o in with_choices} >= {"ack", "aggregation", "outer_optimizer", "weights", "smoothness",
                                                 "frozen_filter", "dynamic", "reset_optimizer_state"}
    for mode, option in with_choices:
        if not option.switch:
            for parse in (_train_args, _sim_args):
                with pytest.raises(SystemExit) as exit_:
                    parse(mode, option.flag, "sometimes")
                assert exit_.value.code == 2 and option.flag in capsys.readouterr().err
        with pytest.raises(ConfigError, match=r"%s: %s \(%s\).*'sometimes'" % (mode, option.name, option.flag)):
            get_spec(mode).resolve({option.name: "sometimes"})   # the Trainer's keyword path


def test_resolve_fills_each_modes_own_default_for_a_shared_flag():
    assert train.mode_options(_train_args("gcada"), "gcada")["c"] == 0.3
    assert train.mode_options(_train_args("cada"), "cada")["c"] == 2.0
    assert sim_cli.make_job(_sim_args("cada")).mode_options["c"] == 2.0
    for mode in ("gcada", "cada"):
        assert train.mode_options(_train_args(mode, "--lazy-c", "1.5"), mode)["c"] == 1.5
    for mode in ("localsgd", "dylu"):
        assert train.mode_options(_train_args(mode), mode)["local_steps"] == 8
        assert sim_cli.make_job(_sim_args(mode, "--local-steps", "3")).mode_options["local_steps"] == 3
    assert train.mode_options(_train_args("esync"), "esync") == get_spec("esync").defaults()


def test_booleans_keep_their_command_line_syntax_and_other_modes_flags_are_ignored():
    opts = train.mode_options(_train_args("preduce", "--frozen-filter", "off", "--local-steps", "0"), "preduce")
    assert opts["frozen_filter"] is False and "local_steps" not in opts
    assert train.mode_options(_train_args("dylu", "--dynamic-local-steps", "off"), "dylu")["dynamic"] is False
    assert train.mode_options(_train_args("dylu"), "dylu")["dynamic"] is True
    esync = sim_cli.make_job(_sim_args("esync", "--reset-optimizer-state", "--ack", "delayed")).mode_options
    assert esync["reset_optimizer_state"] is True and esync["ack"] == "delayed"
    assert train.mode_options(_train_args("esync"), "esync")["reset_optimizer_state"] is False


def test_options_sharing_a_flag_must_agree_and_defaults_must_pass_their_checks():
    a = ModeSpec("fine_a", "dist_async", "", options=(Option("steps", 4, ""),))
    b = ModeSpec("fine_b", "dist_async", "", options=(Option("rounds", 0.5, "", flag="--steps"),))
    assert list(flag_table([a])) == ["--steps"]
    with pytest.raises(ConfigError, match="--steps"):
        flag_table([a, b])
    with pytest.raises(ConfigError, match="steps.*default.*>= 1"):
        Option("steps", 0, "", check=at_least(1))
    with pytest.raises(ConfigError, match="type"):
        Option("anything", None, "")
    with pytest.raises(ConfigError, match="integer"):
        a.resolve({"steps": 2.5})


def test_preduce_checks_p_and_t_against_the_number_of_workers_where_it_is_known():
    from mxhet.control.preduce import check_options
    opts = get_spec("preduce").defaults()
    check_options(opts, 2)
    with pytest.raises(ConfigError, match="group_size .* number of workers 4, got 5"):
        check_options(dict(opts, group_size=5), 4)
    with pytest.raises(ConfigError, match=r"frozen_window .* = 4, got 3"):
        check_options(dict(opts, frozen_window=3), 5)
    with pytest.raises(ConfigError, match=r"preduce: alpha \(--alpha\)"):
        check_options(dict(opts, alpha=1.0))


def test_specs_are_plain_data_that_pickle():
    import pickle
    for name in spec_names():
        assert pickle.loads(pickle.dumps(get_spec(name))) == get_spec(name)
