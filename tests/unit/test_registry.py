"""The strict mode registry."""
import os
import subprocess
import sys

import pytest

from mxhet.errors import ConfigError, UnknownModeError
from mxhet.modes import SyncMode, get_mode, mode_names, register
from mxhet.policy import ModeSpec, Option, get_spec, spec_names, specs
from mxhet.policy.spec import register_spec


def test_builtin_modes():
    assert {"esync", "sync", "async", "local"} <= set(mode_names())
    assert get_mode("esync").needs_state_server
    assert get_mode("sync").kvstore_type == "dist_sync"
    assert get_mode("async").kvstore_type == "dist_async"
    assert get_mode("local").kvstore_type is None


def test_unknown_mode_names_known_ones():
    with pytest.raises(UnknownModeError, match="esync"):
        get_mode("bsp")


def test_duplicate_name_refused():
    class Other(SyncMode):
        spec = specs.ESYNC
    with pytest.raises(ConfigError, match="already registered"):
        register(Other)
    with pytest.raises(ConfigError, match="already registered"):
        register_spec(ModeSpec("esync", None, "another esync"))


def test_bad_specs_and_classes_refused():
    with pytest.raises(ConfigError, match="lowercase"):
        ModeSpec("Not A Name", None, "")
    with pytest.raises(ConfigError, match="kvstore"):
        ModeSpec("fine", "dist_maybe", "")
    with pytest.raises(ConfigError, match="twice"):
        ModeSpec("fine", None, "", options=(Option("a", 1, ""), Option("a", 2, "")))

    class NoSpec(SyncMode):
        pass
    with pytest.raises(ConfigError, match="names no ModeSpec"):
        register(NoSpec)

    class Stranger(SyncMode):
        spec = ModeSpec("stranger", None, "not registered")
    with pytest.raises(UnknownModeError):
        register(Stranger)


def test_every_executor_takes_its_metadata_from_its_spec():
    assert mode_names() == spec_names()
    for name in mode_names():
        cls, spec = get_mode(name), get_spec(name)
        assert cls.spec is spec and cls.name == name and cls.kvstore_type == spec.kvstore
        assert cls.options == spec.defaults() and cls.needs_state_server == spec.needs_state_server
        assert all(o.help for o in spec.options)


def test_mode_metadata_is_read_without_mxnet():
    code = ("import sys; from mxhet.policy import get_spec; from mxhet import launcher; "
            "args = launcher.parse_args(['-n', '2', '--sync', 'esync', '--', 'true']); "
            "assert args.needs_state_server and args.kvstore_type == 'dist_async'; "
            "assert get_spec('ssp').needs_state_server; "
            "print(sorted(m for m in ('mxnet', 'zmq') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    assert "mxnet" not in out.stdout


def test_unknown_mode_option_refused():
    from mxhet.config import WorkerConfig
    with pytest.raises(ConfigError, match="no option"):
        get_mode("local")(trainer=None, config=WorkerConfig(), bogus=1)
