"""The chief (PS-LITE rank 0) dies under ``mxhet-launch --elastic``, on real processes: the survivors
finish with one model and the lowest rank still in the job, named by the State Server's last barrier,
takes over the chief's end-of-job duties (the final evaluation, ``summary.json``)."""
import json
import os
import re
import sys

import pytest

from .jobs import assert_one_model, elastic_args, launch, run_job, train_command, wait_for, wait_for_ranks, worker_pid

pytestmark = pytest.mark.timeout(400)


# mode -> (trainer arguments, rounds): the round modes share one end (RoundMembers' barrier,
# localsgd here), async has its own (gradient.Async's barrier on the same rendezvous). --base-iter pins an
# iteration to at least 0.05 s: 40 rounds of 2 steps, or 150 async steps, outlast the kill (>= 4 s).
CHIEF_JOBS = {
    "localsgd": (["--local-steps", "2"], 40),
    "async": ([], 150),
}


@pytest.mark.parametrize("mode", sorted(CHIEF_JOBS))
def test_kill_9_of_the_chief_a_survivor_writes_the_summary_with_the_chiefs_death(tmp_path, child_pids, mode):
    out = tmp_path / "out"
    trainer_args, rounds = CHIEF_JOBS[mode]

    def kill_the_chief(proc, job_file):
        # once every worker is set up, and the chief indexed a snapshot taken in training (--eval-interval 0.5)
        [chief] = [slot for slot, rank in wait_for_ranks(tmp_path / "launcher.err", proc, 3) if rank == 0]
        wait_for(out / "snapshots" / "000001.params", proc)
        index = out / "snapshots" / "index.json"
        wait_for(index, proc)
        indexed = len(json.loads(index.read_text())["snapshots"])
        os.kill(worker_pid(job_file, chief), 9)
        return chief, indexed

    job = run_job(tmp_path, child_pids, elastic_args(mode, 3, 0.05, 300),
                  train_command(out, "--max-rounds", str(rounds), "--eval-interval", "0.5", *trainer_args),
                  timeout=300, during=kill_the_chief)
    chief, indexed = job.during
    stderr = job.stderr
    assert job.code == 0, stderr[-4000:]
    survivors = sorted(set(range(3)) - {chief})
    workers = list(job.reports(survivors).values())
    assert not job.has_report(chief)
    assert_one_model(workers)
    assert [w["rounds"] for w in workers] == [rounds, rounds]
    summary = job.summary
    # written by the lowest rank left, one of the survivors, which says it took over
    by = summary["written_by"]
    writer = min(workers, key=lambda w: w["rank"])
    assert by["took_over"] and by["rank"] == writer["rank"] != 0 and by["slot"] == writer["slot"], by
    assert "writes the summary in place of the chief" in stderr
    # the chief's death in the record, with the launcher's cause
    leaves = [e for e in summary["elastic"]["events"] if e["event"] == "leave"]
    assert [(e["slot"], e["rank"], e["cause"]) for e in leaves] == [(chief, 0, "killed by signal 9 (SIGKILL)")]
    assert summary["departed_slots"] == [chief]
    if mode == "async":
        assert leaves[0]["round"] is None   # no rounds to name
    else:   # the survivors took part in every round, the chief in those before its death
        assert 0 < leaves[0]["round"] < rounds
        assert all(summary["elastic"]["rounds_by_slot"][str(s)] == [[0, rounds - 1]] for s in survivors)
        assert summary["round_members"][0] == 3 and summary["round_members"][-1] == 2
    # the curve: the chief's snapshots up to its death (at least those indexed before the kill), then the
    # final model, scored as any run's last point
    curve = summary["curve"]
    assert len(curve) >= indexed + 1 and curve[0][0] == 0.0, curve
    assert by["chief_curve_until_s"] == curve[-2][0] and curve[-1][0] > curve[-2][0], (by, curve)
    assert summary["final_accuracy"] == curve[-1][1] and summary["final_accuracy"] > 0.3, summary["final_accuracy"]
    assert not child_pids.alive()


# Each worker trains `steps` steps (localsgd, τ = 2), takes the final model (trainer.finish()) and, unless it is
# the victim, stays `linger` s more: the launcher starts the victim again only while another worker process
# runs. The victim (PS-LITE rank 2, never the chief) kills itself at step 2 -- so would its replacement, had it
# been let into the job's rounds: the State Server must tell it at registration that the job is over.
LATE_SCRIPT = '''
import os, signal, sys, time
import mxnet as mx
from mxnet import autograd, gluon
import mxhet
from mxhet.models import get_model

steps, linger = int(sys.argv[1]), float(sys.argv[2])
mx.random.seed(0)
net = get_model("smallcnn")
net.initialize(mx.init.Xavier())
trainer = mxhet.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05}, local_steps=2)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
for step in range(steps):
    if step == 2 and trainer.rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    x = mx.nd.random.uniform(shape=(16, 1, 28, 28))
    y = mx.nd.array([i % 10 for i in range(16)])
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(16)
trainer.finish()
print("final model", trainer.stats.final_model_sha256, flush=True)
time.sleep(linger)
'''


# extended (MXHET_EXTENDED_TESTS=1), for make test's time: tests/unit/test_late_restart.py and
# test_launcher_watch_restart.py hold the rule's cases
@pytest.mark.extended
def test_a_worker_started_again_after_the_jobs_end_is_told_so_and_leaves_with_exit_0(tmp_path, child_pids):
    script = tmp_path / "late.py"
    script.write_text(LATE_SCRIPT)
    # the replacement starts 3 + 2 s after the death (--heartbeat-timeout 3), when the survivors have long
    # finished their 6 steps; they stay 25 s, so it registers after the job's end (the margin is for a slow
    # start-up on a loaded machine: once the others exited, the launcher ends a replacement idle for 5 s)
    proc = launch(["-n", "3", "-s", "1", "--sync", "localsgd", "--timeout", "200", "--elastic",
                   "--heartbeat-timeout", "3", "--max-restarts", "1"],
                  [sys.executable, str(script), "6", "25"], tmp_path, child_pids, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "starting it again in its slot" in proc.stderr, proc.stderr[-3000:]
    assert "started again after the job's end" in proc.stderr, proc.stderr[-3000:]
    record = json.loads((tmp_path / "job.json").read_text())
    restarts = record["worker_restarts"]
    assert len(restarts) == 1 and restarts[0]["too_late"] and restarts[0]["ended"] == "exit code 0", restarts
    slot = restarts[0]["slot"]
    replacement = [p for p in record["processes"] if p["role"] == "worker" and p["slot"] == slot]
    assert [p["exit_code"] for p in replacement] == [0], replacement
    assert [x["slot"] for x in record["worker_exits"]] == [slot]
    # the survivors' final models agree (the replacement changed nothing)
    digests = set(re.findall(r"final model (\w+)", proc.stderr + proc.stdout))
    assert len(digests) == 1, digests
    assert not child_pids.alive()


EVENT_FACTS = """(() => {
  const rows = [...document.querySelectorAll('#devices tbody tr')];
  const events = [...document.querySelectorAll('#event-list tbody tr')];
  return {present: rows.map((r) => r.dataset.present === 'true'),
          left: rows.map((r) => r.classList.contains('left')),
          membership: rows.map((r) => r.querySelector('td.membership').textContent),
          events: events.map((r) => [...r.children].map((td) => td.textContent)),
          kinds: events.map((r) => r.dataset.event),
          list_hidden: document.getElementById('event-list').hidden,
          none_hidden: document.getElementById('no-events').hidden,
          header: document.getElementById('present').textContent,
          updates: +document.getElementById('updates').dataset.count};
})()"""


def test_the_page_lists_leaves_and_joins_and_shows_a_device_that_left(tmp_path, child_pids):
    # The page over a live directory as an elastic job leaves it (the launcher's events, the workers' feeds):
    # no training needed, the page and /api/state are the same code as under mxhet-launch --dashboard.
    from mxhet.observe.dashboard import Dashboard, JobView
    from mxhet.observe.live import FEED_FORMAT, feed_path, write_events
    from .headless import HeadlessChromium
    live = tmp_path / "live"
    live.mkdir()
    for slot, rank in ((0, 0), (1, 1), (2, 2)):
        with open(feed_path(str(live), slot), "w") as f:
            json.dump({"format": FEED_FORMAT, "slot": slot, "rank": rank, "phase": "training", "rounds": 20,
                       "local_iters": [[20, 2]], "rejoined_at_round": 17 if slot == 1 else None}, f)
    devices = [{"slot": s, "host": "127.0.0.1", "context": "cpu", "slowdown": 1.0} for s in range(3)]
    dashboard = Dashboard(JobView(devices, str(live), mode="localsgd"), port=0).start()
    try:
        with HeadlessChromium(tmp_path / "chromium-profile", child_pids) as browser:
            browser.navigate(dashboard.url)
            browser.wait_until("+document.getElementById('updates').dataset.count >= 1", "the first update")
            before = browser.evaluate(EVENT_FACTS)
            assert before["events"] == [] and before["list_hidden"] and not before["none_hidden"]
            assert before["present"] == [True, True, True] and before["membership"] == ["yes", "yes", "yes"]
            # slot 1 is killed and started again, slot 2 dies for good
            write_events(str(live), [
                {"t_s": 3.2, "event": "leave", "slot": 1, "cause": "killed by signal 9 (SIGKILL)", "round": 9},
                {"t_s": 5.0, "event": "leave", "slot": 2, "cause": "exit code 1", "round": 12},
                {"t_s": 9.5, "event": "join", "slot": 1, "cause": "restarted", "round": None}])
            browser.wait_until("document.querySelectorAll('#event-list tbody tr').length === 3", "the events")
            after = browser.evaluate(EVENT_FACTS)
    finally:
        dashboard.stop()
    assert after["kinds"] == ["leave", "leave", "join"] and not after["list_hidden"] and after["none_hidden"]
    assert after["events"] == [["3.2 s", "left", "1", "9", "killed by signal 9 (SIGKILL)"],
                               ["5.0 s", "left", "2", "12", "exit code 1"],
                               ["9.5 s", "joined", "1", "17", "restarted"]]   # its first round, from its feed
    assert after["present"] == [True, True, False] and after["left"] == [False, False, True]
    assert after["membership"] == ["yes", "rejoined", "left"] and after["header"] == "2 of 3"
