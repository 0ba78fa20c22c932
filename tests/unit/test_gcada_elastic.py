"""G-CADA under ``mxhet-launch --elastic``: a death re-selects its group's uploader and re-triggers the
servers' step at once; the servers step a parameter once per iteration; below --min-workers every waiting
worker is refused."""
import mxnet as mx
import numpy as np

from kvstore_ext import keys
from kvstore_ext.gcada import GroupAMSGrad
from mxhet.control import messages as m
from mxhet.control.gcada import GroupCoordinator
from mxhet.control.server import StateService

RULE = dict(groups=2, max_delay=1, c=0.3)


def _started(n=4, groups=2):
    """Every rank downloaded iteration 0 (group = rank // (n / groups))."""
    coord = GroupCoordinator(n, groups=groups, max_delay=1, c=0.3)
    for r in range(n):
        assert coord.begin(r, 1, 0, r // (n // groups), False).download
    return coord


def test_a_claimant_that_dies_before_its_upload_reopens_the_claim_and_a_waiting_teammate_downloads():
    coord = _started()
    assert coord.watch(1, 2, 0, 0) is None
    assert coord.done(0, 2, 0, 0).upload                     # rank 0 claims group 0 ...
    [(rank, watch)] = coord.released
    assert rank == 1 and not watch.keep                       # ... rank 1 drops its work
    coord.released = []
    assert coord.begin(1, 3, 1, 0, False) is None             # and waits for iteration 1
    event = coord.depart(0)                                   # rank 0 dies before GroupUploaded
    assert event["reopened"] and not event["retrigger"] and not coord.rule.retired
    [(rank, reply)] = coord.released
    assert rank == 1 and reply.iteration == 0 and reply.download and not reply.step_servers
    coord.released = []
    assert coord.done(1, 4, 0, 0).upload                      # the teammate uploads group 0 of iteration 0
    assert not coord.uploaded(1, 5, 0, 0).step_servers        # group 1 is not in yet
    assert coord.done(2, 2, 0, 1).upload
    assert coord.uploaded(2, 3, 0, 1).step_servers
    coord.stepped(2, 4, 0, 1.0, [1.0, 1.0], now=0.0)
    assert coord.rule.log[0]["uploads"] == 2                  # one upload per group, none twice
    assert coord.stats()["deaths"] == [{"rank": 0, "k": 0, "group": 0, "reopened": True, "retrigger": False}]


def test_a_teammate_that_asks_after_the_death_gets_the_reopened_iteration_at_once():
    coord = _started()
    assert coord.done(0, 2, 0, 0).upload
    coord.depart(0)
    assert coord.released == []                               # nobody of group 0 waits yet
    reply = coord.begin(1, 3, 1, 0, False)                    # rank 1 asks for iteration 1
    assert reply.iteration == 0 and reply.download


def test_a_death_after_the_upload_is_in_changes_nothing_for_the_iteration():
    coord = _started()
    assert coord.done(0, 2, 0, 0).upload
    assert not coord.uploaded(0, 3, 0, 0).step_servers
    event = coord.depart(0)
    assert not event["reopened"] and coord.rule.uploaded == {0} and coord.released == []


def test_a_trigger_that_dies_before_its_step_is_reported_hands_the_step_to_a_waiting_worker():
    coord = _started()
    for r, g in ((0, 0), (2, 1)):
        assert coord.done(r, 2, 0, g).upload
    assert not coord.uploaded(0, 3, 0, 0).step_servers
    assert coord.begin(0, 4, 1, 0, False) is None
    assert coord.uploaded(2, 3, 0, 1).step_servers            # rank 2 triggers the step ...
    event = coord.depart(2)                                   # ... and dies mid-step
    assert event["retrigger"]
    [(rank, reply)] = coord.released
    assert rank == 0 and reply.iteration == 0 and reply.step_servers
    coord.released = []
    coord.stepped(0, 5, 0, 1.0, [1.0, 1.0], now=0.0)          # the new trigger's report is taken
    assert coord.rule.iteration == 1


def test_a_dead_trigger_with_nobody_waiting_hands_the_step_to_the_next_asker():
    coord = _started()
    for r, g in ((0, 0), (2, 1)):
        assert coord.done(r, 2, 0, g).upload
        coord.uploaded(r, 3, 0, g)
    coord.depart(2)                                           # rank 2 was told to trigger
    reply = coord.begin(3, 4, 1, 1, False)
    assert reply.iteration == 0 and reply.step_servers


def test_the_servers_step_a_parameter_once_per_iteration_whoever_triggers_it():
    groups, shape = 2, (3, 2)
    upd = GroupAMSGrad(4, groups=groups, alpha=0.1, once_per_iteration=True)
    apply = mx.optimizer.get_updater(upd)
    weight = mx.nd.ones(shape)
    apply(keys.group_grad_key(0, 0, upd.layout), mx.nd.ones(shape), mx.nd.zeros(shape))
    apply(0, mx.nd.full(shape, 1), weight)                    # iteration 0's trigger (k + 1 = 1)
    once = weight.asnumpy().copy()
    assert not np.allclose(once, 1.0)
    apply(0, mx.nd.full(shape, 1), weight)                    # a second trigger of iteration 0: skipped
    np.testing.assert_array_equal(weight.asnumpy(), once)
    apply(0, mx.nd.full(shape, 2), weight)                    # iteration 1: stepped
    assert not np.allclose(weight.asnumpy(), once)
    assert upd.steps[0] == 2
    plain = GroupAMSGrad(4, groups=groups, alpha=0.1)         # outside --elastic the value is not read
    apply = mx.optimizer.get_updater(plain)
    weight = mx.nd.ones(shape)
    apply(0, mx.nd.full(shape, 1), weight)
    apply(0, mx.nd.full(shape, 1), weight)
    assert plain.steps[0] == 2


def _service(min_workers=1):
    service, seqs = StateService(4, rules=("gcada", "membership"), min_workers=min_workers), {}

    def send(rank, cls, **fields):
        seqs[rank] = seqs.get(rank, 0) + 1
        return service.handle(cls(rank=rank, seq=seqs[rank], incarnation=1, **fields), 0.0, sender=rank)

    for r in range(4):
        assert send(r, m.Register, slot=r).ok
        assert send(r, m.GroupBegin, iteration=0, group=r // 2, want_stop=False, **RULE).download
    return service, send


def test_the_state_server_departs_a_dead_claimant_and_answers_its_teammate():
    service, send = _service()
    assert send(1, m.GroupDone, iteration=0, group=0).upload
    assert send(0, m.GroupBegin, iteration=1, group=0, want_stop=False, **RULE) is None
    service.depart(1, "died (silent for over 5 s)")
    [(rank, reply)] = service.take_released()
    assert rank == 0 and reply.iteration == 0 and reply.download
    assert service.stats()["gcada"]["deaths"][0]["reopened"]


def test_a_death_below_min_workers_refuses_the_waiting_and_every_later_request():
    service, send = _service(min_workers=4)
    assert send(0, m.GroupBegin, iteration=1, group=0, want_stop=False, **RULE) is None
    service.depart(3, "died (silent for over 5 s)")
    [(rank, answer)] = [(r, a) for r, a in service.take_released() if not a.ok]
    assert rank == 0 and answer.code == "too_few_workers"
    assert "fewer than the job's minimum of 4" in answer.error
    later = send(1, m.GroupDone, iteration=0, group=0)
    assert not later.ok and later.code == "too_few_workers"


def test_the_launcher_takes_gcada_elastic_with_the_rendezvous():
    from mxhet import launcher
    for mode in ("gcada", "cada"):
        plan = launcher.plan(["-n", "4", "-s", "1", "--sync", mode, "--elastic", "--", "python", "train.py"])
        [state] = [p for p in plan.processes if p.role == "state-server"]
        rules = state.argv[state.argv.index("--rules") + 1].split(",")
        assert "gcada" in rules and "membership" in rules


def test_under_elastic_a_worker_that_finishes_early_leaves_the_groups_on_the_finish_barrier():
    service, send = _service()
    assert send(2, m.GroupDone, iteration=0, group=1).upload
    assert not send(2, m.GroupUploaded, iteration=0, group=1).step_servers   # group 0's upload is missing
    assert send(2, m.GroupBegin, iteration=1, group=1, want_stop=False, **RULE) is None
    for r in (0, 1):                                  # group 0's members leave their loop
        assert send(r, m.RoundFinish) is None         # the barrier waits for ranks 2, 3
    released = [(r, a) for r, a in service.take_released() if isinstance(a, m.GroupSelection)]
    assert released == [(2, released[0][1])] and released[0][1].step_servers    # group 0 retired: rank 2 steps


def test_a_group_whose_members_all_died_is_zeroed_by_the_next_trigger_once():
    coord = GroupCoordinator(3, groups=3, max_delay=1, c=0.3)   # CADA: groups of one
    for r in range(3):
        assert coord.begin(r, 1, 0, r, False).download
    assert coord.done(1, 2, 0, 1).upload and not coord.uploaded(1, 3, 0, 1).step_servers
    assert coord.done(0, 2, 0, 0).upload                        # rank 0 claims, then dies mid-upload
    coord.depart(0)                                             # its group has nobody left: retired
    assert coord.rule.retired == {0} and coord.rule.selected == [1, 2]
    assert coord.done(2, 2, 0, 2).upload
    reply = coord.uploaded(2, 3, 0, 2)
    assert reply.step_servers and reply.zero_groups == (0,)     # the trigger zeroes group 0's keys first
    coord.stepped(2, 4, 0, 1.0, [1.0, 1.0, 1.0], now=0.0)
    assert coord.begin(1, 4, 1, 1, False).download
    assert coord.done(1, 5, 1, 1).upload and coord.uploaded(1, 6, 1, 1).step_servers is False
    assert coord.done(2, 5, 1, 2).upload
    assert coord.uploaded(2, 6, 1, 2).zero_groups == ()         # zeroed once


def test_zero_groups_travel_on_the_wire():
    from mxhet.control import wire
    from mxhet.control.gcada import UploadedReply
    reply = UploadedReply(seq=3, iteration=2, step_servers=True, zero_groups=(0, 4))
    assert wire.decode(wire.encode(reply), {UploadedReply.TYPE: UploadedReply}) == reply
