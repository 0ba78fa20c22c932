"""G-CADA: the selection rule, first-finisher arbitration, and the servers' AMSGrad step."""
import mxnet as mx
import numpy as np
import pytest

from kvstore_ext import keys
from kvstore_ext.gcada import GroupAMSGrad
from mxhet.control import messages as m
from mxhet.control.gcada import GroupCoordinator, GroupRule, group_of, lazy_selection
from mxhet.control.server import StateService


def numpy_amsgrad(theta, h, v_hat, g, alpha, beta1, beta2, eps):
    """Eqs. (8a-c): no bias correction, v from v̂."""
    h = beta1 * h + (1 - beta1) * g
    v = beta2 * v_hat + (1 - beta2) * g * g
    v_hat = np.maximum(v_hat, v)
    return theta - alpha * h / np.sqrt(eps + v_hat), h, v_hat


def test_server_update_equals_numpy_amsgrad_on_the_summed_gradient():
    rng = np.random.RandomState(0)
    groups, params, batch = 3, 2, 4
    upd = GroupAMSGrad(6, groups=groups, alpha=0.01, beta1=0.9, beta2=0.999,
                       epsilon=1e-8, rescale=1.0 / batch)
    layout = upd.layout
    apply = mx.optimizer.get_updater(upd)
    shapes = [(5, 3), (7,)]
    theta = [rng.randn(*s).astype(np.float32) for s in shapes]
    stored = [mx.nd.array(t) for t in theta]
    grads = {}
    norm_bufs = [mx.nd.zeros((groups + 1,)) for _ in shapes]
    group_bufs = {(i, g): mx.nd.zeros(s) for i, s in enumerate(shapes) for g in range(groups)}
    h = [np.zeros(s, np.float32) for s in shapes]
    v_hat = [np.zeros(s, np.float32) for s in shapes]
    models = {}
    for k, uploading in enumerate([[0, 1, 2], [1], [], [0, 2]]):
        for g in uploading:
            for i, s in enumerate(shapes):
                grads[(i, g)] = (rng.randn(*s) * (k + 1)).astype(np.float32)
                apply(keys.group_grad_key(i, g, layout), mx.nd.array(grads[(i, g)]), group_bufs[(i, g)])
                models[(i, g)] = theta[i].copy()
        for i, s in enumerate(shapes):
            apply(i, mx.nd.zeros(s), stored[i])  # the trigger
            apply(keys.group_norm_key(i, layout), mx.nd.zeros((groups + 1,)), norm_bufs[i])
            summed = sum(grads[(i, g)] for g in range(groups)) / batch
            before = theta[i]
            theta[i], h[i], v_hat[i] = numpy_amsgrad(theta[i], h[i], v_hat[i], summed, 0.01, 0.9, 0.999, 1e-8)
            np.testing.assert_allclose(stored[i].asnumpy(), theta[i], rtol=1e-5, atol=1e-6)
            expect = [np.sum((theta[i] - before) ** 2)] + [np.sum((theta[i] - models[(i, g)]) ** 2)
                                                          for g in range(groups)]
            np.testing.assert_allclose(norm_bufs[i].asnumpy(), expect, rtol=1e-4, atol=1e-9)
    # the stored last gradient of a group is its raw upload
    np.testing.assert_allclose(group_bufs[(0, 1)].asnumpy(), grads[(0, 1)])


def test_group_keys_share_their_parameter_server_and_stay_in_range():
    for servers in (1, 2, 3, 5, 8):
        layout = keys.group_key_layout(4, servers, num_params=40)
        for i in range(40):
            for g in range(4):
                key = keys.group_grad_key(i, g, layout)
                assert keys.is_group_key(key) and not keys.is_param_key(key)
                assert keys.server_of(key, servers) == keys.server_of(i, servers)
                assert keys.split_group_key(key, layout) == (g + 1, i)
            assert keys.server_of(keys.group_norm_key(i, layout), servers) == keys.server_of(i, servers)
    with pytest.raises(ValueError, match="at most 21 groups"):
        keys.group_key_layout(22)
    with pytest.raises(ValueError, match="parameter keys"):
        keys.group_key_layout(3, num_params=6000)
    with pytest.raises(ValueError, match="server count"):
        keys.group_key_layout(3, num_servers=11)


def test_aoi_at_least_d_forces_selection_and_a_lazy_group_is_skipped():
    history = [1.0, 1.0, 1.0, 1.0]   # c * sum = 0.3 * 4 = 1.2
    assert lazy_selection([1, 1], [1.0, 1.3], history, 0.3, 4) == [1]      # group 0 satisfies (9)
    assert lazy_selection([4, 1], [0.0, 1.0], history, 0.3, 4) == [0]      # AoI >= D forces group 0
    assert lazy_selection([1, 2], [0.0, 0.0], [], 0.3, 4) == []           # nothing changed, nothing due


def test_aoi_starts_at_d_resets_and_increments():
    rule = GroupRule(3, max_delay=4, c=0.3)
    assert rule.selected == [0, 1, 2] and rule.aoi == [4, 4, 4]
    for g in range(3):
        assert rule.claim(g, g, 0)
        rule.upload_done(g, g, 0)
    # group 2 far from its last model: selected; groups 0 and 1 satisfy (9)
    assert rule.stepped(0, 1.0, [1.0, 1.0, 1.0]) == [0, 1, 2]   # lhs 1.0 > 0.3 * 1.0
    assert rule.aoi == [1, 1, 1]
    for g in range(3):
        rule.claim(g, g, 1)
        rule.upload_done(g, g, 1)
    selected = rule.stepped(1, 1.0, [0.1, 0.1, 5.0])             # rhs = 0.3 * 2 = 0.6
    assert selected == [2] and rule.aoi == [1, 1, 1]
    rule.claim(2, 2, 2)
    rule.upload_done(2, 2, 2)
    assert rule.stepped(2, 1.0, [0.1, 0.1, 0.0]) == []          # rhs 0.9
    assert rule.aoi == [2, 2, 1]
    assert rule.step_due  # an empty selection: the step is due at once
    assert rule.stepped(3, 1.0, [0.1, 0.1, 0.0]) == []
    assert rule.aoi == [3, 3, 2]
    assert rule.stepped(4, 1.0, [0.1, 0.1, 0.0]) == [0, 1]      # AoI reached D = 4
    assert rule.aoi == [4, 4, 3]


def test_d_one_selects_every_group_every_iteration():
    rule = GroupRule(4, max_delay=1, c=1e6)
    for k in range(20):
        assert rule.selected == [0, 1, 2, 3]
        for g in range(4):
            rule.claim(g, g, k)
            rule.upload_done(g, g, k)
        rule.stepped(k, 0.0, [0.0] * 4)
    assert rule.totals()["uploads"] == 80


def test_first_finisher_arbitration_exactly_one_upload_per_group():
    coord = GroupCoordinator(6, groups=3, max_delay=5, c=0.3)
    members = {r: group_of(r, 6, 3) for r in range(6)}
    assert members == {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}
    for r, g in members.items():
        assert coord.begin(r, 1, 0, g, False).download
    # rank 1 watches its group; rank 0 finishes first: rank 1 is told to drop at once
    assert coord.watch(1, 2, 0, 0) is None
    assert coord.done(0, 2, 0, 0).upload
    assert [(r, type(rep).__name__, rep.keep) for r, rep in coord.released] == [(1, "WatchReply", False)]
    assert not coord.done(1, 3, 0, 0).upload   # the late member never uploads
    assert coord.watch(1, 4, 0, 0).keep is False
    assert not coord.uploaded(0, 3, 0, 0).step_servers
    assert coord.done(3, 2, 0, 1).upload and coord.done(4, 2, 0, 2).upload
    assert not coord.done(2, 2, 0, 1).upload and not coord.done(5, 2, 0, 2).upload
    assert not coord.uploaded(3, 3, 0, 1).step_servers
    assert coord.uploaded(4, 3, 0, 2).step_servers        # the last upload triggers the step
    with pytest.raises(ValueError):
        coord.uploaded(5, 4, 0, 2)                 # a member that did not claim cannot upload
    coord.released = []
    assert coord.begin(0, 5, 1, 0, False) is None  # waits for iteration 1
    coord.stepped(4, 4, 0, 1.0, [1.0, 1.0, 1.0], now=0.5)
    assert [(r, rep.iteration, rep.download) for r, rep in coord.released] == [(0, 1, True)]
    log = coord.rule.log[0]
    assert log["downloads"] == 6 and log["uploads"] == 3 and log["selected"] == [0, 1, 2]


def test_state_service_runs_the_protocol_and_stops_every_worker_at_the_same_iteration():
    svc = StateService(4)
    for r in range(4):
        svc.handle(m.Register(rank=r, seq=1, slot=r), 0.0, sender=r)
    rule = dict(groups=2, max_delay=1, c=0.3)

    def ask(cls, r, seq, **fields):
        return svc.handle(cls(rank=r, seq=seq, **fields), 0.0, sender=r)

    replies = [ask(m.GroupBegin, r, 2, iteration=0, group=r // 2, want_stop=False, **rule) for r in range(4)]
    assert all(rep.download and rep.iteration == 0 for rep in replies)
    bad = ask(m.GroupBegin, 0, 3, iteration=0, group=0, want_stop=False, groups=2, max_delay=2, c=0.3)
    assert not bad.ok and "mismatch" in bad.error
    assert ask(m.GroupDone, 1, 4, iteration=0, group=0).upload
    assert ask(m.GroupDone, 2, 3, iteration=0, group=1).upload
    assert not ask(m.GroupDone, 0, 5, iteration=0, group=0).upload
    assert not ask(m.GroupUploaded, 1, 5, iteration=0, group=0).step_servers
    assert ask(m.GroupUploaded, 2, 4, iteration=0, group=1).step_servers
    assert ask(m.GroupBegin, 3, 4, iteration=1, group=1, want_stop=True, **rule) is None
    ask(m.GroupStepped, 2, 5, iteration=0, group=1, delta_sq=1.0, group_sq=[1.0, 1.0])
    released = svc.take_released()
    # the stop wish came during iteration 0: it completed, every worker stops at iteration 1
    assert [(r, rep.iteration, rep.download, rep.stop) for r, rep in released] == [(3, 1, False, True)]
    for r in range(3):
        stop = ask(m.GroupBegin, r, 7, iteration=1 + r, group=r // 2, want_stop=False, **rule)
        assert stop.stop and stop.iteration == 1
    assert svc.stats()["gcada"]["totals"]["uploads"] == 2


def test_a_group_whose_members_all_left_is_never_selected_and_its_step_is_triggered_without_it():
    # CADA: groups of one, D = 1 (every live group selected every iteration)
    coord = GroupCoordinator(3, groups=3, max_delay=1, c=0.3)
    for r in range(3):
        assert coord.begin(r, 1, 0, r, False).download         # all download iteration 0
    for r in (1, 2):
        assert coord.done(r, 2, 0, r).upload
        coord.uploaded(r, 3, 0, r)
    assert coord.begin(1, 4, 1, 1, False) is None            # waits: rank 0's upload is missing
    assert coord.leave(0) is True                             # rank 0 left its loop mid-iteration
    assert coord.rule.selected == [1, 2] and coord.rule.step_due
    (rank, reply), = coord.released                          # a waiting worker steps the servers
    assert rank == 1 and reply.iteration == 0 and reply.step_servers
    coord.released = []
    coord.stepped(1, 5, 0, 1.0, [1.0, 1.0, 1.0], now=0.0)
    assert coord.rule.selected == [1, 2]                      # never group 0 again
    assert coord.begin(2, 4, 1, 2, False).download


def test_a_member_that_leaves_a_group_with_teammates_changes_nothing_for_them():
    coord = GroupCoordinator(4, groups=2, max_delay=5, c=0.3)
    for r in range(4):
        assert coord.begin(r, 1, 0, r // 2, False).download
    assert coord.watch(1, 2, 0, 0) is None
    assert coord.leave(1) is False                           # rank 0 still computes for group 0
    assert coord.rule.selected == [0, 1] and not coord.rule.retired
    assert coord.done(0, 2, 0, 0).upload and coord.released == []   # no answer to the departed's watch


def test_the_goodbye_of_a_groups_last_member_says_so_and_a_waiting_worker_steps_the_servers():
    service, seqs = StateService(4), {}

    def send(rank, cls, **fields):
        seqs[rank] = seqs.get(rank, 0) + 1
        return service.handle(cls(rank=rank, seq=seqs[rank], incarnation=1, **fields), 0.0, sender=rank)

    rule = dict(groups=2, max_delay=1, c=0.3)
    for r in range(4):
        assert send(r, m.Register, slot=r).ok
        assert send(r, m.GroupBegin, iteration=0, group=r // 2, want_stop=False, **rule).download
    assert send(2, m.GroupDone, iteration=0, group=1).upload
    assert not send(2, m.GroupUploaded, iteration=0, group=1).step_servers        # group 0's upload is missing
    assert send(2, m.GroupBegin, iteration=1, group=1, want_stop=False, **rule) is None
    assert not send(0, m.Bye).retired                                       # rank 1 still computes for group 0
    assert send(1, m.Bye).retired                                           # group 0 has nobody left
    (rank, reply), = service.take_released()
    assert rank == 2 and reply.iteration == 0 and reply.step_servers          # rank 2 has the servers step
