"""G-CADA and CADA take a worker back (``mxhet-launch --elastic --max-restarts 1``, the simulator's
``--events SLOT:join@T``): a rank that died or left and registers again is taken back into its slot's
group at its first GROUP_BEGIN and selected with it from the next iteration; a retired group -- every
member gone -- is reopened and selected at that iteration; nothing of the iteration in progress changes."""
from mxhet.control import messages as m
from mxhet.control.gcada import GroupCoordinator
from mxhet.control.server import StateService

RULE = dict(groups=2, max_delay=1, c=0.3)


def _step(coord, k, uploaders, trigger_rank=None):
    """Iteration ``k``: each (rank, group) in ``uploaders`` claims and uploads; the last upload triggers."""
    last = None
    for rank, group in uploaders:
        assert coord.done(rank, 10 * k + 1, k, group).upload
        last = (rank, coord.uploaded(rank, 10 * k + 2, k, group))
    rank, reply = last
    assert reply.step_servers
    coord.stepped(rank, 10 * k + 3, k, 1.0, [1.0] * coord.rule.groups, now=0.0)
    return reply


def test_a_dead_rank_registered_again_waits_for_the_next_iteration_and_is_selected_with_its_group():
    coord = GroupCoordinator(4, groups=2, max_delay=1, c=0.3)
    for r in range(4):
        assert coord.begin(r, 1, 0, r // 2, False).download
    coord.depart(1)                                   # its teammate rank 0 lives: group 0 stays
    assert not coord.rule.retired
    _step(coord, 0, [(0, 0), (2, 1)])
    coord.rejoin(1, 0)
    assert 1 not in coord.dead and coord.departed[0] == set()
    # iteration 1 is under way and group 0 open: the rank taken back still waits for iteration 2
    assert coord.begin(1, 2, 0, 0, False) is None
    assert coord.joins == [{"rank": 1, "k": 2, "group": 0, "reopened_group": False}]
    assert coord.begin(0, 2, 1, 0, False).download and coord.begin(2, 2, 1, 1, False).download
    _step(coord, 1, [(0, 0), (2, 1)])
    [(rank, reply)] = coord.released
    assert rank == 1 and reply.iteration == 2 and reply.download   # selected like any member from then on
    assert coord.stats()["joins"][0]["k"] == 2


def test_a_retired_group_is_reopened_and_selected_at_the_next_iteration_whatever_its_age():
    coord = GroupCoordinator(3, groups=3, max_delay=50, c=1e9)   # CADA; AoI alone would not select it
    for r in range(3):
        assert coord.begin(r, 1, 0, r, False).download          # every group selected at k = 0 (τ = D)
    coord.depart(1)                                             # group 1 has nobody left: retired
    assert coord.rule.retired == {1}
    assert _step(coord, 0, [(0, 0), (2, 2)]).zero_groups == (1,)   # its last gradient zeroed
    assert coord.rule.selected == []                            # c huge, τ < D: nobody at k = 1
    coord.rejoin(1, 1)
    assert coord.rule.retired == {1}                            # not before its first request
    reply = coord.begin(1, 2, 0, 1, False)                      # k = 1 has no group: it triggers that step
    assert reply.iteration == 1 and reply.step_servers and reply.zero_groups == ()
    assert coord.rule.retired == set()
    coord.stepped(1, 3, 1, 0.0, [0.0] * 3, now=0.0)
    assert coord.rule.selected == [1]                           # reopened: selected at k = 2
    assert coord.begin(1, 4, 2, 1, False).download
    assert coord.joins == [{"rank": 1, "k": 2, "group": 1, "reopened_group": True}]


def test_a_rank_taken_back_is_not_handed_a_dead_teammates_reopened_claim_of_the_iteration_under_way():
    coord = GroupCoordinator(6, groups=2, max_delay=1, c=0.3)   # groups of 3
    for r in range(6):
        assert coord.begin(r, 1, 0, r // 3, False).download
    coord.depart(2)
    coord.rejoin(2, 0)
    assert coord.begin(2, 2, 0, 0, False) is None               # waits for iteration 1
    assert coord.done(0, 3, 0, 0).upload                        # rank 0 claims group 0 and dies
    coord.depart(0)
    assert coord.released == []                                 # the claim is reopened, not for rank 2
    assert coord.begin(1, 3, 1, 0, False).download              # the live teammate takes it


def test_a_rank_that_died_twice_is_gone_again_and_retires_its_group():
    coord = GroupCoordinator(2, groups=2, max_delay=1, c=0.3)
    for r in range(2):
        assert coord.begin(r, 1, 0, r, False).download
    coord.depart(1)
    coord.rejoin(1, 1)
    coord.depart(1)                                             # before its first request
    assert coord.rule.retired == {1} and coord.returning == {} and 1 in coord.dead


def test_two_ranks_that_swapped_slots_swap_groups_in_the_count_of_who_is_gone():
    coord = GroupCoordinator(4, groups=2, max_delay=1, c=0.3)
    for r in range(4):
        assert coord.begin(r, 1, 0, r // 2, False).download
    coord.depart(1)                                             # slot 1, group 0
    coord.depart(2)                                             # slot 2, group 1
    coord.rejoin(2, 0, in_place_of=1)                           # slot 1's process was given rank 2's id
    assert coord.departed == {0: set(), 1: {1}} and coord.group_of[1] == 1
    coord.depart(3)                                             # group 1's last live member dies: retired
    assert coord.rule.retired == {1}


def _service():
    service, seqs = StateService(4, rules=("gcada", "membership"), min_workers=1), {}

    def send(rank, cls, incarnation=1, **fields):
        seqs[rank] = seqs.get(rank, 0) + 1
        return service.handle(cls(rank=rank, seq=seqs[rank], incarnation=incarnation, **fields), 0.0, sender=rank)

    for r in range(4):
        assert send(r, m.Register, slot=r).ok
        assert send(r, m.GroupBegin, iteration=0, group=r // 2, want_stop=False, **RULE).download
    return service, send


def test_the_state_server_takes_a_dead_rank_back_at_registration_and_records_the_join():
    service, send = _service()
    service.depart(3, "died (silent for over 5 s)")
    reply = send(3, m.Register, incarnation=2, slot=3)
    assert reply.ok and reply.rejoined and not reply.over
    rule = service.rule("gcada")
    assert 3 not in rule.dead and rule.coordinator.returning == {3: 1}
    assert send(3, m.GroupBegin, incarnation=2, iteration=0, group=1, want_stop=False, **RULE) is None
    record = service.stats()
    assert record["gcada"]["joins"] == [{"rank": 3, "k": 1, "group": 1, "reopened_group": False}]
    events = [(e["event"], e["rank"], e["round"]) for e in record["membership"]["events"]]
    assert events == [("leave", 3, None), ("join", 3, None)]   # no rounds in G-CADA: none named


def test_the_launcher_takes_restarts_in_gcada_and_cada():
    from mxhet import launcher
    for mode in ("gcada", "cada"):
        plan = launcher.plan(["-n", "4", "-s", "1", "--sync", mode, "--elastic", "--max-restarts", "1",
                              "--", "python", "train.py"])
        [state] = [p for p in plan.processes if p.role == "state-server"]
        assert "--until-stopped" in state.argv and plan.worker_restarts == 1


def _worker(monkeypatch, rejoined=False, job_over=False, replies=()):
    """A gcada worker of slot 1 (of 4, 2 groups) with fakes of the State Server client and the channel."""
    import types
    from mxhet.config import WorkerConfig
    from mxhet.modes import get_mode
    mode = get_mode("gcada")(trainer=None, config=WorkerConfig(sync="gcada", elastic=True, state_server="tcp://x:1",
                                                               slot=1, num_slots=4, num_servers=1), groups=2)
    mode.channel = types.SimpleNamespace(rank=1, num_workers=4, kv=object())
    answers = list(replies)
    client = types.SimpleNamespace(rejoined=rejoined, job_over=job_over, ask=lambda cls, **fields: answers.pop(0))
    monkeypatch.setattr(mode, "join_state_server", lambda: client)
    return mode


def test_a_restarted_gcada_worker_ships_no_updater_and_counts_its_first_iteration_back(monkeypatch):
    from kvstore_ext.gcada import GroupAMSGrad
    from mxhet.control.gcada import GroupSelection
    from mxhet.protocol.effects import BeginIteration
    first = _worker(monkeypatch)
    first.on_connect()
    assert isinstance(first.server_updater(16), GroupAMSGrad)
    back = _worker(monkeypatch, rejoined=True, replies=[GroupSelection(seq=1, iteration=7, download=True)])
    back.on_connect()
    # the servers keep GroupAMSGrad and its state (a second set_optimizer would replace it)
    assert back.server_updater(16) is None and back.stats.rejoined_at_round is None
    selection = back.carry_out(BeginIteration(0, False))
    assert selection.ready and back.stats.rejoined_at_round == 7


def test_a_restarted_gcada_worker_after_the_jobs_end_leaves_at_once(monkeypatch):
    from mxhet.modes import gcada
    left = []
    monkeypatch.setattr(gcada, "leave_too_late", left.append)
    late = _worker(monkeypatch, job_over=True)
    late.on_connect()
    assert left == [late]


def test_the_state_server_names_the_dead_rank_whose_slot_a_swapped_rank_takes():
    # two dead at once (slots 1 and 2, groups 0 and 1); PS-LITE gives slot 1's replacement rank 2's id
    service, send = _service()
    service.depart(1, "died (silent for over 5 s)")
    service.depart(2, "died (silent for over 5 s)")
    assert send(2, m.Register, incarnation=2, slot=1).rejoined
    coord = service.rule("gcada").coordinator
    assert coord.returning == {2: 0} and coord.departed == {0: set(), 1: {1}} and coord.group_of[1] == 1
