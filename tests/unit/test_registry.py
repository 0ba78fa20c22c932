"""The strict mode registry."""
import pytest

from mxhet.errors import ConfigError, UnknownModeError
from mxhet.modes import SyncMode, get_mode, mode_names, register


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
        name = "esync"
    with pytest.raises(ConfigError, match="already registered"):
        register(Other)


def test_bad_name_refused():
    class Bad(SyncMode):
        name = "Not A Name"
    with pytest.raises(ConfigError):
        register(Bad)


def test_unknown_mode_option_refused():
    from mxhet.config import WorkerConfig
    with pytest.raises(ConfigError, match="no option"):
        get_mode("local")(trainer=None, config=WorkerConfig(), bogus=1)
