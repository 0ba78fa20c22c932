"""Fashion-MNIST: loading, sharding across workers, and mini-batch streams.

The data set comes from Debian's ``dataset-fashion-mnist`` package (four gzip
idx files under ``/usr/share/datasets/fashion-mnist``) or the directory named by
``MXHET_DATA_DIR``; nothing is downloaded.

Every random choice (shards, epoch order) uses ``numpy.random.RandomState``
seeded from plain integers: its stream is frozen across NumPy versions, so
workers on different machines that share a seed draw the same shards.
"""
import gzip
import hashlib
import mmap
import os
import struct
import threading
import zlib

import numpy as np
import mxnet as mx

from . import config
from .errors import ConfigError, DataError

#: Mean and standard deviation of Fashion-MNIST training pixels scaled to [0, 1].
MEAN = 0.2860
STD = 0.3530

IMAGE_SIZE = 28
NUM_CLASSES = 10
DEBIAN_PACKAGE = "dataset-fashion-mnist"

_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000),
}
_IMAGES_MAGIC = 0x00000803  # idx: unsigned byte, 3 dimensions
_LABELS_MAGIC = 0x00000801  # idx: unsigned byte, 1 dimension
_DISTRIBUTIONS = ("iid", "non-iid", "group")

_cache = {}
_cache_lock = threading.Lock()

#: Environment variable naming the directory of decompressed copies of the idx
#: files (default ``$XDG_CACHE_HOME/mxhet/idx``, else ``~/.cache/mxhet/idx``);
#: ``off`` reads the gzip files every time.
CACHE_ENV = "MXHET_DATA_CACHE"


# ----------------------------------------------------------------- loading

def _missing(path):
    return DataError(
        "Fashion-MNIST file not found: %s. Install the data set with "
        "`apt-get install %s` (it fills %s), or set MXHET_DATA_DIR to a "
        "directory holding %s."
        % (path, DEBIAN_PACKAGE, config.DEFAULT_DATA_DIR,
           ", ".join(_FILES["train"][:2] + _FILES["test"][:2])))


def _read_idx(path, magic, ndim):
    """Read one gzip idx file into a read-only uint8 array, cached per path."""
    path = os.path.abspath(path)
    with _cache_lock:
        cached = _cache.get(path)
    if cached is not None:
        return cached
    if not os.path.isfile(path):
        raise _missing(path)
    raw = _decompressed(path)
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError("%s is too short for an idx header (%d bytes)" % (path, len(raw)))
    (found,) = struct.unpack(">I", raw[:4])
    if found != magic:
        raise DataError("%s has idx magic 0x%08x, expected 0x%08x" % (path, found, magic))
    dims = struct.unpack(">%dI" % ndim, raw[4:header])
    expected = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != expected:
        raise DataError("%s: header says %s = %d bytes of data, file holds %d"
                        % (path, "x".join(map(str, dims)), expected, len(raw) - header))
    array = np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)
    array.setflags(write=False)
    with _cache_lock:
        return _cache.setdefault(path, array)


def _cache_dir(env=None):
    """Where decompressed idx files are kept; None when the cache is off."""
    env = os.environ if env is None else env
    chosen = env.get(CACHE_ENV, "")
    if chosen == "off":
        return None
    if chosen:
        return chosen
    base = env.get("XDG_CACHE_HOME", "") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mxhet", "idx")


def _decompressed(path):
    """The bytes of gzip file ``path``, decompressed: memory-mapped from a copy in
    :func:`_cache_dir`, made by the first reader. Every worker of a job reads the
    same files, and gunzipping the training images costs each about 0.25 CPU s,
    where a mapped copy costs almost nothing and its pages are shared. The copy's
    name holds the source's path, size and modification time, so a changed file
    is decompressed again; a cache that cannot be written is skipped."""
    directory = _cache_dir()
    copy = None
    if directory is not None:
        try:
            info = os.stat(path)
            key = "%s|%d|%d" % (path, info.st_size, info.st_mtime_ns)
            copy = os.path.join(directory, "%s-%s.idx" % (
                os.path.basename(path)[:-3] if path.endswith(".gz") else os.path.basename(path),
                hashlib.sha256(key.encode()).hexdigest()[:16]))
            with open(copy, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):   # no copy yet (ValueError: an empty file cannot be mapped)
            pass
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError("cannot read %s: %s" % (path, e)) from e
    if copy is not None:
        try:
            os.makedirs(directory, exist_ok=True)
            partial = "%s.%d.tmp" % (copy, os.getpid())
            with open(partial, "wb") as f:
                f.write(raw)
            os.replace(partial, copy)   # readers see the whole copy or none
        except OSError:
            pass
    return raw


def load_fashion_mnist(split="train", data_dir=None):
    """Load one split of Fashion-MNIST.

    Args:
        split: ``"train"`` (60000 samples) or ``"test"`` (10000 samples).
        data_dir: directory of the idx files; default :func:`mxhet.config.data_dir`.

    Returns:
        ``(images, labels)``: read-only ``uint8`` array N x 28 x 28 and
        ``int32`` array N with values 0..9. Arrays are cached per file in this
        process, so repeated calls are cheap.

    Raises:
        ConfigError: for an unknown split.
        DataError: when a file is missing (the message says how to install it)
            or malformed.
    """
    if split not in _FILES:
        raise ConfigError("unknown split %r; expected one of %s" % (split, ", ".join(_FILES)))
    directory = config.data_dir() if data_dir is None else data_dir
    images_name, labels_name, count = _FILES[split]
    images = _read_idx(os.path.join(directory, images_name), _IMAGES_MAGIC, 3)
    labels = _read_idx(os.path.join(directory, labels_name), _LABELS_MAGIC, 1)
    if images.shape != (count, IMAGE_SIZE, IMAGE_SIZE):
        raise DataError("%s: expected %d x %d x %d images, found %s"
                        % (images_name, count, IMAGE_SIZE, IMAGE_SIZE, images.shape))
    if labels.shape != (count,):
        raise DataError("%s: expected %d labels, found %s" % (labels_name, count, labels.shape))
    if labels.max() >= NUM_CLASSES:
        raise DataError("%s: label %d is out of range 0..%d"
                        % (labels_name, labels.max(), NUM_CLASSES - 1))
    labels32 = labels.astype(np.int32)
    labels32.setflags(write=False)
    return images, labels32


# ---------------------------------------------------------------- sharding

def _check_int(name, value, minimum, maximum=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError("%s must be an integer, got %r" % (name, value))
    if value < minimum or (maximum is not None and value > maximum):
        bound = "%d..%d" % (minimum, maximum) if maximum is not None else ">= %d" % minimum
        raise ConfigError("%s must be %s, got %r" % (name, bound, value))
    return int(value)


def partition(labels, num_parts, part, dist="iid", seed=0, groups=None):
    """Indices of worker ``part``'s shard of a data set.

    ``"iid"``: a seeded permutation of all samples, cut into ``num_parts``
    equal shards. ``"non-iid"``: samples stably sorted by label, cut into
    ``num_parts`` contiguous equal shards, each shuffled with a seed derived
    from ``(seed, part)``, so each shard holds few classes. In both cases the
    ``len(labels) % num_parts`` left-over samples are dropped, shards are
    disjoint, and every process with the same arguments gets the same shards.
    ``"group"`` (G-CADA): the workers form ``groups`` groups of contiguous
    parts (``num_parts / groups`` each); every member of a group gets the
    same shard, the group's ``"iid"`` shard of ``groups`` parts: identical
    within a group, disjoint across groups, together all but the
    ``len(labels) % groups`` left-over samples.

    Returns:
        int64 array of ``len(labels) // num_parts`` sample indices
        (``len(labels) // groups`` for ``"group"``).

    Raises:
        ConfigError: naming a bad ``num_parts``, ``part``, ``dist``, ``seed``
            or ``groups`` (``"group"`` needs a divisor of ``num_parts``),
            or labels that are not 1-D or too few for ``num_parts``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ConfigError("labels must be 1-D, got shape %s" % (labels.shape,))
    num_parts = _check_int("num_parts", num_parts, 1)
    part = _check_int("part", part, 0, num_parts - 1)
    seed = _check_int("seed", seed, 0, 2**32 - 1)
    if dist not in _DISTRIBUTIONS:
        raise ConfigError("unknown dist %r; expected one of %s" % (dist, ", ".join(_DISTRIBUTIONS)))
    if dist == "group":
        if groups is None:
            raise ConfigError("dist 'group' needs the number of groups (--groups)")
        groups = _check_int("groups", groups, 1, num_parts)
        if num_parts % groups:
            raise ConfigError("groups=%d must divide the %d workers" % (groups, num_parts))
        return partition(labels, groups, part // (num_parts // groups), dist="iid", seed=seed)
    size = len(labels) // num_parts
    if size == 0:
        raise ConfigError("num_parts=%d exceeds the %d samples" % (num_parts, len(labels)))
    if dist == "iid":
        order = np.random.RandomState(seed).permutation(len(labels))
        return order[part * size:(part + 1) * size].astype(np.int64)
    order = np.argsort(labels, kind="stable")
    shard = order[part * size:(part + 1) * size].astype(np.int64)
    np.random.RandomState([seed, part]).shuffle(shard)
    return shard


# ----------------------------------------------------------------- batches

def _to_batch(images, input_size, ctx):
    """uint8 N x H x W -> normalized float32 NDArray N x 1 x S x S on ``ctx``."""
    x = images.astype(np.float32)
    x *= 1.0 / (255.0 * STD)
    x -= MEAN / STD
    data = mx.nd.array(x[:, None, :, :], ctx=ctx, dtype=np.float32)
    if input_size != images.shape[1] or input_size != images.shape[2]:
        data = mx.nd.contrib.BilinearResize2D(data, height=input_size, width=input_size)
    return data


def _check_dataset(images, labels):
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ConfigError("images must be a uint8 N x H x W array, got %s %s"
                          % (images.dtype, images.shape))
    if labels.shape != (len(images),):
        raise ConfigError("labels must have shape (%d,), got %s" % (len(images), labels.shape))
    return images, labels


class ShardIterator:
    """Endless stream of mini-batches over one worker's shard.

    Each epoch visits every index of the shard once, in an order drawn from
    ``RandomState([seed, epoch])``. A batch that reaches past the end of an
    epoch is completed from the start of the next one, so every batch holds
    ``batch_size`` samples and no sample is skipped. The whole state is
    ``samples_seen``; :meth:`state_dict` / :meth:`load_state_dict` let a
    checkpoint resume the exact stream.

    Args:
        images: uint8 array N x H x W (e.g. from :func:`load_fashion_mnist`).
        labels: integer array N.
        indices: this shard's sample indices (e.g. from :func:`partition`).
        batch_size: samples per batch, 1..len(indices).
        seed: integer seed of the epoch orders.
        input_size: side S of the square batches; resized bilinearly when it
            differs from the images' size.
        ctx: MXNet context of the batches (default ``mx.cpu()``).

    Raises:
        ConfigError: for a bad argument, e.g. ``batch_size`` above the shard size.
    """

    STATE_VERSION = 1

    def __init__(self, images, labels, indices, batch_size, seed=0, input_size=IMAGE_SIZE, ctx=None):
        self._images, labels = _check_dataset(images, labels)
        self._labels = labels.astype(np.float32)
        indices = np.asarray(indices)
        if indices.ndim != 1 or len(indices) == 0 or not np.issubdtype(indices.dtype, np.integer):
            raise ConfigError("indices must be a non-empty 1-D integer array, got %s %s"
                              % (indices.dtype, indices.shape))
        if indices.min() < 0 or indices.max() >= len(self._images):
            raise ConfigError("indices must lie in 0..%d" % (len(self._images) - 1))
        self._indices = indices.astype(np.int64)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        if self.batch_size > len(self._indices):
            raise ConfigError("batch_size=%d exceeds the shard size %d"
                              % (self.batch_size, len(self._indices)))
        self.seed = _check_int("seed", seed, 0, 2**32 - 1)
        self.input_size = _check_int("input_size", input_size, 1)
        self.ctx = mx.cpu() if ctx is None else ctx
        self._fingerprint = zlib.crc32(self._indices.tobytes())
        self.samples_seen = 0
        self._order_epoch = None
        self._order = None

    @property
    def num_samples(self):
        """Samples in the shard (one epoch)."""
        return len(self._indices)

    @property
    def epoch(self):
        """Index of the epoch the next sample comes from (0-based)."""
        return self.samples_seen // len(self._indices)

    @property
    def position(self):
        """Offset of the next sample within the current epoch's order."""
        return self.samples_seen % len(self._indices)

    def _epoch_order(self, epoch):
        if self._order_epoch != epoch:
            self._order = self._indices[np.random.RandomState([self.seed, epoch]).permutation(len(self._indices))]
            self._order_epoch = epoch
        return self._order

    def next_indices(self):
        """Sample indices of the next batch; advances the stream."""
        picked = []
        need = self.batch_size
        while need:
            order = self._epoch_order(self.epoch)
            take = order[self.position:self.position + need]
            picked.append(take)
            need -= len(take)
            self.samples_seen += len(take)
        return np.concatenate(picked) if len(picked) > 1 else picked[0]

    def __next__(self):
        """``(data, label)``: float32 NDArrays (b, 1, S, S) and (b,) on ``ctx``."""
        idx = self.next_indices()
        data = _to_batch(self._images[idx], self.input_size, self.ctx)
        label = mx.nd.array(self._labels[idx], ctx=self.ctx, dtype=np.float32)
        return data, label

    next = __next__

    def __iter__(self):
        return self

    def state_dict(self):
        """The stream position as a JSON-serialisable dict of ints."""
        return {
            "version": self.STATE_VERSION,
            "seed": self.seed,
            "num_samples": len(self._indices),
            "indices_crc32": self._fingerprint,
            "samples_seen": self.samples_seen,
            "epoch": self.epoch,
            "position": self.position,
        }

    def load_state_dict(self, state):
        """Resume from :meth:`state_dict` output; the batch size may differ.

        Raises:
            ConfigError: if the state is malformed or belongs to another shard
                or seed.
        """
        try:
            version = state["version"]
            seen = state["samples_seen"]
            checks = {k: state[k] for k in ("seed", "num_samples", "indices_crc32")}
        except (KeyError, TypeError):
            raise ConfigError("not a ShardIterator state: %r" % (state,)) from None
        if version != self.STATE_VERSION:
            raise ConfigError("ShardIterator state version %r, expected %d"
                              % (version, self.STATE_VERSION))
        mine = {"seed": self.seed, "num_samples": len(self._indices),
                "indices_crc32": self._fingerprint}
        if checks != mine:
            raise ConfigError("ShardIterator state is for another stream: %r, this one is %r"
                              % (checks, mine))
        self.samples_seen = _check_int("samples_seen", seen, 0)


def eval_batches(images, labels, batch_size, input_size=IMAGE_SIZE, ctx=None, limit=None):
    """Yield ``(data, label)`` over the first ``limit`` samples (default all), in order.

    The last batch may be smaller than ``batch_size``.

    Raises:
        ConfigError: for a bad ``batch_size``, ``input_size`` or ``limit``.
    """
    images, labels = _check_dataset(images, labels)
    batch_size = _check_int("batch_size", batch_size, 1)
    input_size = _check_int("input_size", input_size, 1)
    count = len(images) if limit is None else min(_check_int("limit", limit, 0), len(images))
    ctx = mx.cpu() if ctx is None else ctx
    for start in range(0, count, batch_size):
        stop = min(start + batch_size, count)
        data = _to_batch(images[start:stop], input_size, ctx)
        label = mx.nd.array(labels[start:stop], ctx=ctx, dtype=np.float32)
        yield data, label


def evaluate(net, images, labels, batch_size=256, input_size=IMAGE_SIZE, ctx=None, limit=None):
    """Top-1 accuracy in [0, 1] of ``net`` over the first ``limit`` samples.

    Runs with autograd paused in predict mode (even inside ``record()``), so
    BatchNorm uses its running statistics and Dropout is off.

    Raises:
        ConfigError: for bad arguments or when there is nothing to evaluate.
    """
    correct = 0
    total = 0
    with mx.autograd.pause(train_mode=False):
        for data, label in eval_batches(images, labels, batch_size, input_size, ctx, limit):
            pred = net(data).argmax(axis=1)
            correct += int((pred == label).sum().asscalar())
            total += label.shape[0]
    if total == 0:
        raise ConfigError("nothing to evaluate (limit=%r)" % (limit,))
    return correct / total
