"""Under mxhet-launch, a script's kv.create('dist') creates the kvstore the mode needs."""
import mxnet as mx
import pytest

from mxhet import kvstore_alias


@pytest.fixture
def created(monkeypatch):
    """mx.kv.create replaced by a recorder of the types asked for (restored after the test)."""
    names = []

    def create(name="local"):
        names.append(name)
        return name
    monkeypatch.setattr(mx.kvstore, "create", create)
    return names


def test_dist_becomes_the_modes_type_and_explicit_types_are_kept(created):
    kvstore_alias.install("dist_async")
    kvstore_alias.install("dist_async")   # idempotent: not wrapped twice
    assert [mx.kv.create("dist"), mx.kv.create("dist_sync"), mx.kv.create("local"), mx.kv.create()] == \
        ["dist_async", "dist_sync", "local", "local"]
    assert created == ["dist_async", "dist_sync", "local", "local"]


@pytest.mark.parametrize("env, aliased", [
    ({"DMLC_ROLE": "worker", "MXHET_SYNC": "esync"}, True),       # dist_async servers
    ({"DMLC_ROLE": "worker", "MXHET_SYNC": "async"}, True),
    ({"DMLC_ROLE": "worker", "MXHET_SYNC": "sync"}, False),       # 'dist' already fits
    ({"DMLC_ROLE": "server", "MXHET_SYNC": "esync"}, False),      # not a worker
    ({"MXHET_SYNC": "esync"}, False),                             # not started by the launcher
    ({"DMLC_ROLE": "worker", "MXHET_SYNC": "nosuchmode"}, False),  # the Trainer reports it
])
def test_only_a_launched_worker_of_a_dist_async_mode_gets_the_alias(created, env, aliased):
    kvstore_alias.install_for_launched_worker(env)
    assert mx.kv.create("dist") == ("dist_async" if aliased else "dist")


def test_a_type_that_is_not_dist_is_refused():
    with pytest.raises(ValueError, match="local"):
        kvstore_alias.install("local")
