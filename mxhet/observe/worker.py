"""The one object ``python -m mxhet.train`` calls to report while it trains.

It feeds the dashboard's live file (when the launcher set ``MXHET_LIVE_DIR``)
and TensorBoard (``--tensorboard DIR``); with neither, every call returns at
once. The training loss is read (which waits for the step's computation) only
when one of them is about to write, at most about once a second for the live
feed and once per round for TensorBoard.
"""
import collections
import time

from .live import DEFAULT_INTERVAL_S, LiveWriter, worker_record

RATE_WINDOW_S = 5.0
"""Seconds over which samples/s is measured."""
TENSORBOARD_INTERVAL_S = 0.5
"""Seconds between two TensorBoard writes of one device (each writes every round since the last)."""


class WorkerObserver:
    """Reports one worker's progress to the live feed and to TensorBoard.

    Args:
        mode: the sync mode.
        slot: the worker's slot.
        live_dir: the job's live directory ("" = no live feed).
        tensorboard_dir: TensorBoard directory ("" = none).
        chief: True on PS-LITE rank 0, which also writes the job's scalars.
        live_interval: seconds between live feed rewrites.
        clock: monotonic clock in seconds.
    """

    def __init__(self, mode, slot, live_dir="", tensorboard_dir="", chief=False,
                 live_interval=DEFAULT_INTERVAL_S, clock=time.monotonic):
        self.mode, self.slot, self.chief, self.clock = mode, slot, chief, clock
        self.start = clock()
        self.start_unix = time.time()
        self.live = LiveWriter(live_dir, slot, live_interval, clock=clock) if live_dir else None
        self.device_log = self.job_log = None
        if tensorboard_dir:
            from .tensorboard import DeviceLog, JobLog
            self.device_log = DeviceLog(tensorboard_dir, slot, self.start_unix)
            if chief:
                self.job_log = JobLog(tensorboard_dir, self.start_unix)
        self.enabled = bool(self.live or self.device_log)
        self._rates = collections.deque()
        self._tb_last = None
        self._tb_round = 0
        self.losses = []      # [[seconds, loss], ...] of rank 0 (the job's loss curve)
        self.accuracy = []    # [[seconds, accuracy], ...] as snapshots are scored
        self.last_loss = None
        self.phase = "training"
        self._elapsed = 0.0

    def restart_clock(self):
        """Training starts now (after set-up and the first snapshot)."""
        self.start = self.clock()
        self.start_unix = time.time()
        for log in (self.device_log, self.job_log):
            if log is not None:
                log.start_unix = self.start_unix

    def _samples_per_s(self, now, samples):
        rates = self._rates
        rates.append((now, samples))
        while len(rates) > 2 and now - rates[1][0] >= RATE_WINDOW_S:
            rates.popleft()
        t0, s0 = rates[0]
        return (samples - s0) / (now - t0) if now > t0 else None

    def step(self, stats, read_loss):
        """After every training step; ``read_loss()`` returns the step's loss (read only when needed)."""
        if not self.enabled:
            return
        now = self.clock()
        live_due = self.live is not None and self.live.due()
        tb_due = (self.device_log is not None and stats.rounds > self._tb_round
                  and (self._tb_last is None or now - self._tb_last >= TENSORBOARD_INTERVAL_S))
        if not (live_due or tb_due):
            return
        elapsed = now - self.start
        rate = self._samples_per_s(now, stats.samples)
        self.last_loss = float(read_loss())
        if tb_due:
            self.device_log.update(stats, elapsed, samples_per_s=rate, loss=self.last_loss)
            self._tb_last, self._tb_round = now, stats.rounds
        if live_due:
            self._write_live(stats, elapsed, rate)

    def loss_point(self, seconds, loss, rounds):
        """Rank 0's loss at a snapshot of the global model (the job's loss curve)."""
        self.losses.append([round(seconds, 3), float(loss)])
        if self.job_log is not None:
            self.job_log.loss(seconds, loss, rounds)

    def set_phase(self, phase, stats, elapsed_s=None):
        """``finishing`` (the last pull), ``evaluating`` (rank 0) or ``done``; ``elapsed_s``
        is the training time, which stays fixed from then on."""
        self.phase = phase
        if elapsed_s is not None:
            self._elapsed = elapsed_s
        if self.live is not None:
            self._write_live(stats, self._elapsed, 0.0 if phase != "training" else None, force=True)

    def evaluated(self, seconds, accuracy, stats):
        """A snapshot taken ``seconds`` into training scored ``accuracy`` (rank 0, after training)."""
        self.accuracy.append([round(seconds, 3), float(accuracy)])
        if self.job_log is not None:
            self.job_log.accuracy(seconds, accuracy)
        if self.live is not None:
            self._write_live(stats, self._elapsed, 0.0, force=True)

    def finished(self, summary):
        """Rank 0's summary is written: the final accuracy goes to TensorBoard."""
        if self.job_log is not None and summary.get("final_accuracy") is not None:
            self.job_log.final(summary.get("train_time_s") or 0.0, summary["final_accuracy"])

    def _write_live(self, stats, elapsed, rate, force=False):
        self._elapsed = elapsed
        self.live.write(worker_record(stats, mode=self.mode, phase=self.phase, elapsed_s=elapsed,
                                      samples_per_s=rate, loss=self.last_loss, losses=self.losses,
                                      accuracy=self.accuracy), force=force)

    def close(self, stats=None):
        """The worker is done: a last live record, the event files flushed and closed."""
        if self.live is not None and stats is not None:
            self.phase = "done"
            self._write_live(stats, self._elapsed, 0.0, force=True)
        if self.device_log is not None and stats is not None:
            self.device_log.update(stats, self._elapsed, loss=self.last_loss)  # the rounds since the last write
        for log in (self.device_log, self.job_log):
            if log is not None:
                log.close()
