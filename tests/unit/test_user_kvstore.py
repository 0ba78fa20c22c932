"""Which kvstore a script created can carry which mode (no PS-LITE needed)."""
from types import SimpleNamespace

import pytest

from mxhet.dataplane import check_kvstore
from mxhet.dataplane.channel import server_mode
from mxhet.errors import ConfigError


@pytest.mark.parametrize("kv_type, mode", [("dist", "dist_sync"), ("dist_sync", "dist_sync"),
                                           ("dist_device_sync", "dist_sync"), ("dist_async", "dist_async")])
def test_server_mode_of_a_kvstore_type(kv_type, mode):
    # MXNet sends the servers its sync-mode command for every dist type without "_async"
    assert server_mode(kv_type) == mode


def test_a_fitting_kvstore_is_accepted():
    check_kvstore(SimpleNamespace(type="dist"), "dist_sync", "esync")
    check_kvstore(SimpleNamespace(type="dist_async"), "dist_async", "async")


@pytest.mark.parametrize("kv_type, needed, mode", [("dist", "dist_async", "async"),
                                                   ("dist_async", "dist_sync", "sync")])
def test_a_misfit_is_refused_naming_the_mode_and_both_types(kv_type, needed, mode):
    with pytest.raises(ConfigError, match=r"sync mode '%s' needs a '%s' kvstore.*created a '%s' one"
                       % (mode, needed, kv_type)):
        check_kvstore(SimpleNamespace(type=kv_type), needed, mode)
