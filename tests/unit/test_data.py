"""Fashion-MNIST loading, sharding and batch streams.

The data-dependent tests need Debian's ``dataset-fashion-mnist`` (or
MXHET_DATA_DIR); without it they fail with the DataError, they do not skip.
"""
import gzip
import json
import os
import struct

import numpy as np
import pytest

from mxhet import data
from mxhet.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def train():
    return data.load_fashion_mnist("train")


@pytest.fixture(scope="module")
def test_set():
    return data.load_fashion_mnist("test")


def _normalized(images):
    return (images.astype(np.float32) / 255.0 - data.MEAN) / data.STD


# ----------------------------------------------------------------- loading

def test_load_shapes_and_classes(train, test_set):
    images, labels = train
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.int32
    assert np.bincount(labels).tolist() == [6000] * 10
    t_images, t_labels = test_set
    assert t_images.shape == (10000, 28, 28)
    assert np.bincount(t_labels).tolist() == [1000] * 10


def test_load_is_cached_and_read_only(train):
    images, labels = data.load_fashion_mnist("train")
    assert images is train[0]
    with pytest.raises(ValueError):
        images[0, 0, 0] = 1


def test_unknown_split():
    with pytest.raises(ConfigError, match="'valid'"):
        data.load_fashion_mnist("valid")


def test_missing_dir_says_how_to_install(tmp_path):
    with pytest.raises(DataError) as info:
        data.load_fashion_mnist("test", data_dir=str(tmp_path))
    message = str(info.value)
    assert str(tmp_path / "t10k-images-idx3-ubyte.gz") in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "MXHET_DATA_DIR" in message


def test_env_override_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("MXHET_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=str(tmp_path)):
        data.load_fashion_mnist("train")


def _write_idx(path, magic, dims, payload):
    with gzip.open(str(path), "wb") as f:
        f.write(struct.pack(">I%dI" % len(dims), magic, *dims) + payload)


def test_bad_magic_and_size_are_refused(tmp_path):
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 0x0801, (2, 28, 28), bytes(2 * 784))
    with pytest.raises(DataError, match="magic"):
        data.load_fashion_mnist("test", data_dir=str(tmp_path))
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 0x0803, (2, 28, 28), bytes(784))
    with pytest.raises(DataError, match="1568"):
        data.load_fashion_mnist("test", data_dir=str(tmp_path))


def test_wrong_sample_count_is_refused(tmp_path):
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", 0x0803, (2, 28, 28), bytes(2 * 784))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", 0x0801, (2,), bytes(2))
    with pytest.raises(DataError, match="10000"):
        data.load_fashion_mnist("test", data_dir=str(tmp_path))


# ---------------------------------------------------------------- sharding

@pytest.mark.parametrize("dist", ["iid", "non-iid"])
def test_shards_equal_disjoint_deterministic(dist):
    labels = np.random.RandomState(1).randint(0, 10, size=1003)
    shards = [data.partition(labels, 4, p, dist=dist, seed=7) for p in range(4)]
    assert all(s.dtype == np.int64 and len(s) == 250 for s in shards)
    union = np.concatenate(shards)
    assert len(np.unique(union)) == 1000
    assert union.min() >= 0 and union.max() < 1003
    again = [data.partition(labels, 4, p, dist=dist, seed=7) for p in range(4)]
    assert all(np.array_equal(a, b) for a, b in zip(shards, again))
    other = data.partition(labels, 4, 0, dist=dist, seed=8)
    assert not np.array_equal(other, shards[0])


def test_iid_shards_mix_labels(train):
    _, labels = train
    for p in range(10):
        counts = np.bincount(labels[data.partition(labels, 10, p)], minlength=10)
        assert counts.sum() == 6000 and counts.min() > 450


def test_non_iid_shards_hold_few_labels(train):
    _, labels = train
    # 6000 samples per class: a shard of 8571 (7 parts) can straddle 3 classes.
    for num_parts, most in ((10, 2), (5, 2), (7, 3)):
        for p in range(num_parts):
            shard = data.partition(labels, num_parts, p, dist="non-iid", seed=3)
            assert len(np.unique(labels[shard])) <= most
    shard = data.partition(labels, 10, 0, dist="non-iid", seed=3)
    assert not np.all(np.diff(shard) > 0), "non-iid shard should be shuffled"


@pytest.mark.parametrize("kwargs, text", [
    (dict(num_parts=0, part=0), "num_parts"),
    (dict(num_parts=4, part=4), "part"),
    (dict(num_parts=4, part=-1), "part"),
    (dict(num_parts=4, part=0, dist="dirichlet"), "dirichlet"),
    (dict(num_parts=4, part=0, seed=-1), "seed"),
    (dict(num_parts=4, part=1.0), "part"),
    (dict(num_parts=11, part=0), "11"),
])
def test_partition_validates(kwargs, text):
    with pytest.raises(ValueError, match=text):
        data.partition(np.zeros(10, dtype=np.int32), **kwargs)


# ----------------------------------------------------------------- batches

def test_iterator_batches_are_normalized_and_labelled(train):
    images, labels = train
    shard = data.partition(labels, 2, 1, seed=0)
    it = data.ShardIterator(images, labels, shard, 500, seed=5)
    twin = data.ShardIterator(images, labels, shard, 500, seed=5)
    x, y = next(it)
    assert x.shape == (500, 1, 28, 28) and x.dtype == np.float32
    assert y.shape == (500,) and y.dtype == np.float32
    idx = twin.next_indices()
    assert np.isin(idx, shard).all()
    np.testing.assert_allclose(x.asnumpy()[:, 0], _normalized(images[idx]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y.asnumpy(), labels[idx])
    values = x.asnumpy()
    assert abs(values.mean()) < 0.1 and abs(values.std() - 1.0) < 0.1


def test_iterator_resizes(train):
    images, labels = train
    it = data.ShardIterator(images, labels, np.arange(100), 8, input_size=32)
    x, y = it.next()
    assert x.shape == (8, 1, 32, 32) and y.shape == (8,)


def test_epochs_reshuffle_and_cover_the_shard():
    images = np.zeros((50, 28, 28), dtype=np.uint8)
    labels = np.arange(50) % 10
    shard = np.arange(10, 40)
    it = data.ShardIterator(images, labels, shard, 10, seed=2)
    epoch0 = np.concatenate([it.next_indices() for _ in range(3)])
    assert (it.epoch, it.position, it.samples_seen) == (1, 0, 30)
    epoch1 = np.concatenate([it.next_indices() for _ in range(3)])
    assert sorted(epoch0) == sorted(epoch1) == list(shard)
    assert not np.array_equal(epoch0, epoch1)


def test_batch_spanning_epochs_stays_full():
    images = np.zeros((10, 28, 28), dtype=np.uint8)
    it = data.ShardIterator(images, np.zeros(10), np.arange(10), 4, seed=0)
    first = [it.next_indices() for _ in range(3)]
    assert [len(b) for b in first] == [4, 4, 4]
    assert sorted(np.concatenate(first)[:10]) == list(range(10))
    assert (it.epoch, it.position, it.samples_seen) == (1, 2, 12)


def test_state_dict_round_trip_resumes_the_stream(train):
    images, labels = train
    shard = data.partition(labels, 3, 2, seed=1)
    it = data.ShardIterator(images, labels, shard, 64, seed=9)
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    expected_x, expected_y = next(it)

    resumed = data.ShardIterator(images, labels, shard, 64, seed=9)
    resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.position, resumed.samples_seen) == (0, 320, 320)
    x, y = next(resumed)
    np.testing.assert_array_equal(x.asnumpy(), expected_x.asnumpy())
    np.testing.assert_array_equal(y.asnumpy(), expected_y.asnumpy())


def test_state_of_another_stream_is_refused(train):
    images, labels = train
    it = data.ShardIterator(images, labels, np.arange(100), 10, seed=1)
    state = it.state_dict()
    with pytest.raises(ConfigError, match="another stream"):
        data.ShardIterator(images, labels, np.arange(100), 10, seed=2).load_state_dict(state)
    with pytest.raises(ConfigError, match="another stream"):
        data.ShardIterator(images, labels, np.arange(1, 101), 10, seed=1).load_state_dict(state)
    with pytest.raises(ConfigError):
        it.load_state_dict({"epoch": 3})


def test_iterator_validates():
    images = np.zeros((20, 28, 28), dtype=np.uint8)
    labels = np.zeros(20)
    with pytest.raises(ConfigError, match="batch_size=11 exceeds the shard size 10"):
        data.ShardIterator(images, labels, np.arange(10), 11)
    with pytest.raises(ConfigError, match="indices"):
        data.ShardIterator(images, labels, np.arange(15, 25), 5)
    with pytest.raises(ConfigError, match="uint8"):
        data.ShardIterator(images.astype(np.float32), labels, np.arange(10), 5)


def test_eval_batches_in_order(test_set):
    images, labels = test_set
    batches = list(data.eval_batches(images, labels, 256, limit=1000))
    assert [b[0].shape[0] for b in batches] == [256, 256, 256, 232]
    got = np.concatenate([b[1].asnumpy() for b in batches])
    np.testing.assert_array_equal(got, labels[:1000])
    np.testing.assert_allclose(batches[1][0].asnumpy()[:, 0], _normalized(images[256:512]), atol=1e-5)


def test_evaluate_counts_correct_predictions(test_set):
    import mxnet as mx
    images, labels = test_set

    def always_class_3(x):
        return mx.nd.one_hot(mx.nd.full((x.shape[0],), 3), 10)

    expected = float(np.mean(labels[:700] == 3))
    assert data.evaluate(always_class_3, images, labels, batch_size=128, limit=700) == expected


# ------------------------------------------------------- decompressed copies

def _tiny_test_split(directory, first_label=0):
    _write_idx(directory / "t10k-images-idx3-ubyte.gz", 0x0803, (10000, 28, 28),
               bytes(range(256)) * (10000 * 784 // 256) + bytes(10000 * 784 % 256))
    _write_idx(directory / "t10k-labels-idx1-ubyte.gz", 0x0801, (10000,),
               bytes((first_label + i) % 10 for i in range(10000)))


def test_a_second_reader_maps_the_decompressed_copy_and_a_changed_file_is_read_again(tmp_path, monkeypatch):
    source, cache = tmp_path / "data", tmp_path / "cache"
    source.mkdir()
    monkeypatch.setenv(data.CACHE_ENV, str(cache))
    _tiny_test_split(source)
    monkeypatch.setattr(data, "_cache", {})
    images, labels = data.load_fashion_mnist("test", data_dir=str(source))
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["t10k", "t10k"]
    # a fresh process (no in-memory cache) never opens the gzip files again
    monkeypatch.setattr(data, "_cache", {})

    def no_gunzip(*args, **kwargs):
        raise AssertionError("gunzipped although a decompressed copy exists")
    monkeypatch.setattr(data.gzip, "open", no_gunzip)
    again, again_labels = data.load_fashion_mnist("test", data_dir=str(source))
    assert np.array_equal(again, images) and np.array_equal(again_labels, labels)
    assert not again.flags.writeable
    # the labels file changes (size equal, contents and time not): decompressed again, new values
    monkeypatch.undo()
    monkeypatch.setenv(data.CACHE_ENV, str(cache))
    monkeypatch.setattr(data, "_cache", {})
    _tiny_test_split(source, first_label=1)
    os.utime(source / "t10k-labels-idx1-ubyte.gz", ns=(1, 10 ** 18))
    _, changed = data.load_fashion_mnist("test", data_dir=str(source))
    assert np.array_equal(changed, (labels + 1) % 10)


def test_the_copy_is_skipped_when_off_or_unwritable(tmp_path, monkeypatch):
    source = tmp_path / "data"
    source.mkdir()
    _tiny_test_split(source)
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory would go")
    for setting in ("off", str(blocked / "idx")):
        monkeypatch.setenv(data.CACHE_ENV, setting)
        monkeypatch.setattr(data, "_cache", {})
        images, _ = data.load_fashion_mnist("test", data_dir=str(source))
        assert images.shape == (10000, 28, 28)
    assert data._cache_dir({data.CACHE_ENV: "off"}) is None
    assert data._cache_dir({"XDG_CACHE_HOME": "/x"}) == os.path.join("/x", "mxhet", "idx")
