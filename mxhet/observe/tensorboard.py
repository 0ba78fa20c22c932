"""Per-device and job scalars as TensorBoard event files (tensorboardX).

``python -m mxhet.train --tensorboard DIR`` (and ``python -m mxhet.sim
--tensorboard DIR``) write one TensorBoard run per device, ``DIR/device-<slot>``,
and one for the job, ``DIR/job`` (written by rank 0), so ``tensorboard
--logdir DIR`` overlays the devices in one chart per tag:

========================  ==============================================  ================================
tag                       value                                           step
========================  ==============================================  ================================
``device/local_iters``    n_i, local iterations of the round              the device's round (1-based)
``device/compute_ratio``  compute / (compute + waiting) time so far       the device's round
``device/samples_per_s``  samples per second over the last seconds        the device's round
``device/bytes_pushed``   bytes pushed so far                             the device's round
``device/bytes_pulled``   bytes pulled so far                             the device's round
``device/rtt_s``          smoothed State Server round trip, seconds       the device's round
``device/loss``           training loss of the device's latest batch      the device's round
``job/train_loss``        rank 0's training loss                          milliseconds of training
``job/accuracy``          test accuracy of the global model               milliseconds of training
``job/final_accuracy``    the final model on the whole test set           milliseconds of training
``job/rounds``            rounds so far                                   milliseconds of training
========================  ==============================================  ================================

Event wall times are the run's start plus the training time, so
TensorBoard's "relative" axis shows training time. In the simulator every
time is virtual (the run "starts" at 0).
"""
import os
import struct

from .live import _finite

DEVICE_RUN = "device-%d"
JOB_RUN = "job"
DEFAULT_FLUSH_S = 5
"""Seconds between flushes of the event files to disk (tensorboardX's queue)."""


def _writer(logdir, run, flush_secs=DEFAULT_FLUSH_S):
    from tensorboardX import SummaryWriter
    return SummaryWriter(logdir=os.path.join(logdir, run), flush_secs=flush_secs)


def _ms(seconds):
    return int(round(seconds * 1000))


class DeviceLog:
    """One device's scalars, written while it trains (:meth:`update` after each step).

    Args:
        logdir: the TensorBoard directory.
        slot: the device's slot (its run is ``device-<slot>``).
        start_unix: wall-clock time training started (events are stamped
            ``start_unix + elapsed``).

    Raises:
        ValueError: for an empty ``logdir``.
    """

    def __init__(self, logdir, slot, start_unix, flush_secs=DEFAULT_FLUSH_S):
        if not logdir:
            raise ValueError("the TensorBoard directory must be a path, got %r" % (logdir,))
        self.start_unix = start_unix
        self.writer = _writer(logdir, DEVICE_RUN % slot, flush_secs)
        self._rounds_written = 0

    def update(self, stats, elapsed_s, samples_per_s=None, loss=None):
        """Write the rounds finished since the last call (n_i of each, the rest at the latest round)."""
        rounds = stats.rounds
        if rounds <= self._rounds_written:
            return False
        wall = self.start_unix + elapsed_s
        add = self.writer.add_scalar
        for r in range(self._rounds_written, min(rounds, len(stats.local_iters))):
            add("device/local_iters", stats.local_iters[r], r + 1, walltime=wall)
        total = stats.compute_s + stats.wait_s
        values = {
            "device/compute_ratio": stats.compute_s / total if total > 0 else None,
            "device/samples_per_s": _finite(samples_per_s),
            "device/bytes_pushed": stats.bytes_pushed,
            "device/bytes_pulled": stats.bytes_pulled,
            "device/rtt_s": _finite(stats.rtt_s) if stats.state_replies else None,
            "device/loss": _finite(loss),
        }
        for tag, value in values.items():
            if value is not None:
                add(tag, value, rounds, walltime=wall)
        self._rounds_written = rounds
        return True

    def close(self):
        self.writer.close()


class JobLog:
    """The job's scalars (rank 0): loss while training, accuracy as snapshots are scored."""

    def __init__(self, logdir, start_unix, flush_secs=DEFAULT_FLUSH_S):
        if not logdir:
            raise ValueError("the TensorBoard directory must be a path, got %r" % (logdir,))
        self.start_unix = start_unix
        self.writer = _writer(logdir, JOB_RUN, flush_secs)

    def _add(self, tag, value, seconds):
        value = _finite(value)
        if value is not None:
            self.writer.add_scalar(tag, value, _ms(seconds), walltime=self.start_unix + seconds)

    def loss(self, seconds, loss, rounds=None):
        self._add("job/train_loss", loss, seconds)
        if rounds is not None:
            self._add("job/rounds", rounds, seconds)

    def accuracy(self, seconds, accuracy):
        self._add("job/accuracy", accuracy, seconds)

    def final(self, seconds, accuracy):
        self._add("job/final_accuracy", accuracy, seconds)
        self.writer.flush()

    def close(self):
        self.writer.close()


def write_summary(logdir, summary, start_unix=0.0):
    """Write a finished run's ``summary.json`` (train or sim) as event files.

    Per device: n_i of every round (stamped at the round's end where the
    summary has it), and the final compute ratio and bytes at the last round.
    For the job: the training loss, the accuracy curve and the final accuracy.

    Returns:
        The run directories written.
    """
    runs = []
    for w in summary.get("workers", []):
        writer = _writer(logdir, DEVICE_RUN % w["slot"])
        ends = w.get("round_end_s") or []
        for r, k in enumerate(w.get("local_iters") or []):
            wall = start_unix + ends[r] if r < len(ends) else None
            writer.add_scalar("device/local_iters", k, r + 1, walltime=wall)
        last = max(1, int(w.get("rounds") or 0))
        for tag, key in (("device/compute_ratio", "compute_ratio"), ("device/bytes_pushed", "bytes_pushed"),
                         ("device/bytes_pulled", "bytes_pulled")):
            value = _finite(w.get(key))
            if value is not None:
                writer.add_scalar(tag, value, last)
        if w.get("state_replies") and _finite(w.get("rtt_s")) is not None:
            writer.add_scalar("device/rtt_s", w["rtt_s"], last)
        writer.close()
        runs.append(os.path.join(logdir, DEVICE_RUN % w["slot"]))
    job = JobLog(logdir, start_unix)
    for t, loss in summary.get("train_loss") or []:
        job.loss(t, loss)
    for t, acc in summary.get("curve") or []:
        job.accuracy(t, acc)
    if summary.get("final_accuracy") is not None:
        job.final(summary.get("train_time_s") or 0.0, summary["final_accuracy"])
    job.close()
    runs.append(os.path.join(logdir, JOB_RUN))
    return runs


def read_scalars(run_dir):
    """Every scalar in a run directory's event files: ``{tag: [(step, value, wall_time), ...]}``.

    Reads the TFRecord framing (length, its CRC, the record, its CRC) and
    parses each record with tensorboardX's own ``Event`` protobuf, so it needs
    no TensorBoard installation. Used by the tests, handy for scripts.
    """
    from tensorboardX.proto import event_pb2
    out = {}
    names = sorted(n for n in os.listdir(run_dir) if "tfevents" in n)
    for name in names:
        with open(os.path.join(run_dir, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            start = pos + 12
            record = data[start:start + length]
            pos = start + length + 4
            if len(record) < length:
                break  # a record still being written
            event = event_pb2.Event()
            event.ParseFromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value, event.wall_time))
    return out
