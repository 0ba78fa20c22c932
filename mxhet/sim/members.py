"""Members against the global model, at every aggregation (``python -m mxhet.sim --score-members N``).

At each round of a delta-averaging mode (ESync, Local SGD) every member's
replica is scored just before it pushes its delta -- its local model after its
``n_i`` local iterations, before any ``--aggregation`` scaling -- and the new
global model just after the servers applied the round, all on the same first
``N`` test images. The record answers "does the average score at least the
mean of what was averaged?" round by round.

Scoring happens on the job's evaluation network
(:func:`mxhet.evaluation.evaluation_network`), never on a training replica,
with the snapshots' protocol (precise BatchNorm on the same fixed batches), so
a member's score and the global model's are comparable with each other and
with the run's curve. It takes real CPU and no virtual time, and the run
trains exactly as without it (same final digest): the batches are numpy's
seeded draws and the evaluation network is built before the replicas are
seeded. One exception: precise BatchNorm's training-mode pass draws from
MXNet's global random stream where a model has both BatchNorm and Dropout
(Inception-v3), which would shift the replicas' dropout masks (the same holds
for ``--stop-at-target``).
"""
import time

from ..errors import ConfigError


class MemberScores:
    """Collects the per-round record; ``score(arrays) -> accuracy`` scores a model
    given as arrays in key order (e.g. :func:`mxhet.sim.cli.target_check`'s scorer)."""

    def __init__(self, score, samples):
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ConfigError("--score-members must be a positive number of test images, got %r" % (samples,))
        self.score = score
        self.samples = samples
        self.rounds = {}       # round index -> record
        self._seen = {}        # slot -> the device's iterations at its last push
        self._last_round = {}  # slot -> the round of its last push (it then took that round's global model)
        self.cpu_s = 0.0       # real CPU seconds spent scoring (process time)
        self.wall_s = 0.0

    def _timed_score(self, arrays):
        c0, w0 = time.process_time(), time.monotonic()
        accuracy = self.score(arrays)
        self.cpu_s += time.process_time() - c0
        self.wall_s += time.monotonic() - w0
        return float(accuracy)

    def _record(self, index):
        return self.rounds.setdefault(index, {"round": index, "members": [], "global_accuracy": None,
                                              "t_s": None})

    def member(self, dev, index, now, share=None):
        """``dev`` is about to push its delta of round ``index`` at virtual time ``now``: score its replica.

        Under ``--round-deadline`` ``share`` is the delta's share of the round's combination; the
        record then also says the delta's ``staleness``, the rounds it missed: the replica trained
        from the global model of the round this device last took part in (the initial model before
        its first), so a device on time has 0 and a late one the rounds that closed without it.
        """
        # A replica is hybridized with static memory: its last training pass's BatchNorm writes are
        # ordered with later reads only after a full wait (see evaluation.evaluation_network).
        import mxnet as mx
        mx.nd.waitall()
        arrays = [w.copy() for w in dev.weights()]
        iterations = dev.stats.iterations
        n_i = iterations - self._seen.get(dev.slot, 0)
        self._seen[dev.slot] = iterations
        record = {"slot": dev.slot, "n": n_i, "t_s": round(now, 6), "accuracy": round(self._timed_score(arrays), 4)}
        if share is not None:
            record["share"] = round(float(share), 6)
            # (a job starts at round 0, from the initial model: "round -1"'s; --score-members cannot resume)
            record["staleness"] = index - self._last_round.get(dev.slot, -1) - 1
        self._last_round[dev.slot] = index
        self._record(index)["members"].append(record)

    def global_model(self, index, now, arrays):
        """The servers' model after round ``index``, as the first member pulled it at ``now``
        (scored once per round)."""
        rec = self._record(index)
        if rec["global_accuracy"] is None:
            rec["t_s"] = round(now, 6)
            rec["global_accuracy"] = round(self._timed_score(arrays), 4)

    def summary(self):
        """The summary's ``members`` entry: one record per completed round, in order, members by slot."""
        rounds = []
        for index in sorted(self.rounds):
            rec = self.rounds[index]
            if rec["global_accuracy"] is None:   # pushed, never applied (the run ended first)
                continue
            members = sorted(rec["members"], key=lambda m: m["slot"])
            mean = sum(m["accuracy"] for m in members) / len(members) if members else None
            entry = dict(rec, members=members, members_mean=None if mean is None else round(mean, 4))
            if any("staleness" in m for m in members):   # --round-deadline: the late members apart
                on_time = [m["accuracy"] for m in members if m["staleness"] == 0]
                entry["late"] = sum(m["staleness"] > 0 for m in members)
                entry["on_time_mean"] = round(sum(on_time) / len(on_time), 4) if on_time else None
            rounds.append(entry)
        scored = sum(len(r["members"]) + 1 for r in rounds)
        return {"samples": self.samples, "rounds": rounds,
                "cpu_s": round(self.cpu_s, 3), "wall_s": round(self.wall_s, 3),
                "cpu_s_per_round": round(self.cpu_s / len(rounds), 4) if rounds else None,
                "cpu_s_per_score": round(self.cpu_s / scored, 4) if scored else None}
