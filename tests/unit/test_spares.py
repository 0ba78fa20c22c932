"""Spare workers for ``mxhet-launch --elastic --max-restarts K``, K > 1: the plan (how many, where, their
PS-LITE ranks and the job's), the launcher's rule that hands a dead worker's slot to an idle spare, and
the worker side's pure parts (rank mapping, orders, configuration)."""
import pytest

from mxhet.launcher.watch import Observation, JobWatch

SERVICES = [Observation(name="scheduler", role="scheduler"), Observation(name="server 0", role="server"),
            Observation(name="state-server", role="state-server")]


def _plan(*args):
    from mxhet import launcher
    return launcher.plan(["-n", "3", "-s", "1", "--sync", "localsgd", "--elastic", *args, "--", "python", "t.py"])


# -- the plan -----------------------------------------------------------------------------------------------

def test_max_restarts_above_one_plans_one_spare_per_restart_counted_by_pslite_and_above_every_worker_port():
    plan = _plan("--max-restarts", "2")
    spares = plan.by_role("spare")
    workers = plan.by_role("worker")
    assert [s.slot for s in spares] == [0, 1] and [s.name for s in spares] == ["spare 0", "spare 1"]
    assert all(p.env["DMLC_NUM_WORKER"] == "5" for p in plan.processes if "DMLC_NUM_WORKER" in p.env)
    assert {p.role for p in plan.processes if "DMLC_NUM_WORKER" in p.env} == {"scheduler", "server", "worker",
                                                                             "spare"}
    assert max(int(w.env["PORT"]) for w in workers) < min(int(s.env["PORT"]) for s in spares)
    assert all(p.env["MXHET_SPARE_RANKS"] == "3,4" for p in workers + spares)
    assert plan.slot_ranks == (0, 1, 2)
    assert all(s.env["DMLC_ROLE"] == "worker" and s.argv == workers[0].argv for s in spares)
    # the State Server counts the job's workers, not the spares
    state = plan.by_role("state-server")[0].argv
    assert state[state.index("--num-workers") + 1] == "3"


@pytest.mark.parametrize("restarts", [[], ["--max-restarts", "1"]], ids=["none", "one"])
def test_without_more_than_one_restart_there_are_no_spares(restarts):
    plan = _plan(*restarts)
    assert not plan.by_role("spare") and plan.slot_ranks == ()
    assert all(p.env.get("DMLC_NUM_WORKER", "3") == "3" and "MXHET_SPARE_RANKS" not in p.env
               for p in plan.processes)


def test_pslite_ranks_sort_hosts_in_decreasing_order_then_ports_and_the_job_rank_skips_the_spares():
    from mxhet.launcher.jobplan import ps_worker_ranks
    from mxhet.spares import job_rank
    nodes = [("a", 5), ("b", 3), ("a", 2), ("b", 9)]   # workers a:2, b:3 ... spares last in the list
    assert ps_worker_ranks(nodes) == [3, 0, 2, 1]
    spare_ranks = (1, 3)   # e.g. spare ("b", 9) is PS-LITE rank 1: worker ("a", 2) is the job's rank 1
    assert [job_rank(r, spare_ranks) for r in (0, 2)] == [0, 1]


# -- the launcher's rule --------------------------------------------------------------------------------------

def _job(workers, spares, hosts=None):
    hosts = hosts or {}
    obs = [Observation(name="worker %d" % i, role="worker", returncode=c, host=hosts.get(("worker", i), "h"))
           for i, c in enumerate(workers)]
    # a spare entry: (role, code) or, taken over, ("worker", code, slot) -- the supervisor renames it
    obs += [Observation(name="spare %d" % j if len(e) == 2 else "worker %d" % e[2], role=e[0], returncode=e[1],
                        host=hosts.get(("spare", j), "h"))
            for j, e in enumerate(spares)]
    return SERVICES + obs


def _watch(restarts=2, delay=7.0):
    return JobWatch(server_grace=10, worker_grace=5, elastic=True, worker_restarts=restarts,
                    worker_restart_delay=delay)


def test_a_death_is_served_by_an_idle_spare_after_the_delay_and_a_second_by_the_next():
    w = _watch()
    idle = [("spare", None), ("spare", None)]
    assert w.decide(_job([None, -9, None], idle), 0).action == "continue"
    assert w.decide(_job([None, -9, None], idle), 6.9).action == "continue"
    d = w.decide(_job([None, -9, None], idle), 7.0)
    assert (d.action, d.index, d.spare) == ("activate", 4, 6)
    assert "spare 0 takes over its slot (1 worker restart(s) left)" in d.note
    # spare 0 now runs as worker 1 (the supervisor relabels it); the dead worker 1 is never served again
    taken = [("worker", None, 1), ("spare", None)]
    for t in (8.0, 20.0):
        assert w.decide(_job([None, -9, None], taken), t).action == "continue"
    # the same slot dies again: spare 1 takes it over
    taken_dead = [("worker", -9, 1), ("spare", None)]
    assert w.decide(_job([None, -9, None], taken_dead), 30.0).action == "continue"
    d = w.decide(_job([None, -9, None], taken_dead), 37.0)
    assert (d.action, d.index, d.spare) == ("activate", 6, 7)
    assert w.spares_used == [(4, 6), (6, 7)] and w.departures == [(4, 0), (6, 30.0)]
    # no restart left: a third death is a departure; all done -> draining, exit 0
    both = [("worker", -9, 1), ("worker", None, 1)]
    d = w.decide(_job([None, -9, -9], both), 40.0)
    assert d.action == "continue" and "others train on" in d.note
    assert w.decide(_job([None, -9, -9], both), 60.0).action == "continue"
    d = w.decide(_job([0, -9, -9], [("worker", -9, 1), ("worker", 0, 1)]), 61.0)
    assert w.phase == "draining" and d.note == "all 3 workers finished"   # slots, not processes


def test_the_spare_on_the_dead_workers_host_is_taken_first_else_any():
    hosts = {("worker", 1): "b", ("spare", 0): "a", ("spare", 1): "b", ("spare", 2): "a"}
    w = _watch(restarts=3, delay=0)
    d = w.decide(_job([None, -9, None], [("spare", None)] * 3, hosts), 0)
    assert (d.action, d.spare) == ("activate", 7)   # spare 1, on host b
    hosts[("worker", 2)] = "c"
    d = w.decide(_job([None, -9, -9], [("spare", None), ("worker", None), ("spare", None)], hosts), 1)
    assert (d.action, d.index, d.spare) == ("activate", 5, 6)   # none on c: the first idle one


def test_with_no_idle_spare_left_the_worker_is_started_again_itself():
    w = _watch(restarts=2, delay=0)
    d = w.decide(_job([None, -9, None], [("worker", None)]), 0)
    assert (d.action, d.index) == ("restart", 4)


def test_a_spare_that_fails_fails_the_job_and_idle_spares_hold_the_drain():
    w = _watch()
    d = w.decide(_job([None, None, None], [("spare", 1), ("spare", None)]), 0)
    assert d.action == "finish" and d.exit_code == 1 and d.failures == ((6, "exited with code 1"),)
    w = _watch()
    d = w.decide(_job([0, 0, 0], [("spare", None), ("spare", None)]), 0)
    assert d.action == "continue" and w.phase == "draining"   # the supervisor now releases the spares
    services_done = [Observation(name=o.name, role=o.role, returncode=0) for o in SERVICES]
    rest = _job([0, 0, 0], [("spare", None), ("spare", 0)])[3:]
    assert w.decide(services_done + rest, 1).action == "continue"   # spare 0 still running
    rest = _job([0, 0, 0], [("spare", 0), ("spare", 0)])[3:]
    d = w.decide(services_done + rest, 2)
    assert (d.action, d.exit_code) == ("finish", 0)


# -- the worker side ------------------------------------------------------------------------------------------

def test_orders_are_written_atomically_and_waited_for(tmp_path):
    from mxhet.spares import read_order, wait_for_order, write_order
    path = str(tmp_path / "spare-0")
    assert read_order(path) is None
    naps = []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 3:
            write_order(path, {"slot": 1, "rank": 1, "env": {"MXHET_SLOT": "1"}})
    assert wait_for_order(path, poll_s=0.5, sleep=sleep) == {"slot": 1, "rank": 1, "env": {"MXHET_SLOT": "1"}}
    assert naps == [0.5, 0.5, 0.5]
    write_order(path, {"over": True})
    assert read_order(path) == {"over": True}


def test_the_spare_setup_is_read_from_the_environment():
    from mxhet.config import spare_setup
    from mxhet.errors import ConfigError
    assert spare_setup({"DMLC_ROLE": "worker"}) is None
    assert spare_setup({"DMLC_ROLE": "server", "MXHET_SPARE_RANKS": "3"}) is None
    got = spare_setup({"DMLC_ROLE": "worker", "MXHET_SPARE_RANKS": "4,3", "MXHET_NUM_SLOTS": "3",
                       "MXHET_SPARE_FILE": "/x/spare-0"})
    assert (got.spare_ranks, got.num_workers, got.spare_file) == ((3, 4), 3, "/x/spare-0")
    with pytest.raises(ConfigError, match="MXHET_SPARE_RANKS"):
        spare_setup({"DMLC_ROLE": "worker", "MXHET_SPARE_RANKS": "x"})


def test_every_restart_mode_runs_the_spares_kvstore_type_under_elastic():
    # a spare creates its kvstore knowing only the mode: the type must be the one the mode's elastic executor
    # checks (nodelay's class says dist_sync and its elastic instance switches: test_elastic_spares.py[nodelay])
    from mxhet.control.membership import RESTART_MODES
    from mxhet.kvstore_alias import ELASTIC_KVSTORE
    from mxhet.modes import get_mode
    types = {mode: get_mode(mode, elastic=True).kvstore_type for mode in RESTART_MODES if mode != "nodelay"}
    assert set(types.values()) == {ELASTIC_KVSTORE}, types


def test_a_worker_config_counts_the_spares_for_preduces_spare_slots():
    from mxhet.config import worker_config
    assert worker_config({"MXHET_SPARE_RANKS": "3,4"}).spare_workers == 2
    assert worker_config({}).spare_workers == 0


def test_the_summarys_joins_name_the_spare_that_took_the_slot_over():
    from mxhet.control.membership import job_events
    record = {"slots": {"0": 0, "1": 1},
              "events": [{"event": "leave", "rank": 1, "cause": "died", "round": 3, "t": 1004.0},
                         {"event": "join", "rank": 1, "cause": "restarted", "round": 6, "t": 1009.0},
                         {"event": "leave", "rank": 1, "cause": "died", "round": 9, "t": 1014.0},
                         {"event": "join", "rank": 1, "cause": "restarted", "round": 12, "t": 1019.0}],
              "rounds_by_rank": {"0": list(range(20)), "1": list(range(3)) + list(range(6, 9)) + list(range(12, 20))}}
    takeovers = [{"slot": 1, "spare": 1, "unix": 1017.5}, {"slot": 1, "spare": 0, "unix": 1007.5}]
    got = job_events(record, [], origin=1000.0, takeovers=takeovers)["events"]
    assert [(e["event"], e.get("spare")) for e in got] == [("leave", None), ("join", 0), ("leave", None),
                                                           ("join", 1)]
    assert all("spare" not in e for e in job_events(record, [], origin=1000.0)["events"])


# -- the supervisor: an activation and the release, on fake processes ------------------------------------------

def _child(role, slot, returncode, env, pid):
    import types
    from mxhet.launcher.jobplan import ProcessSpec
    spec = ProcessSpec(role=role, slot=slot, host="127.0.0.1", argv=("python", "t.py"), env=env)
    return types.SimpleNamespace(spec=spec, pid=pid, popen=types.SimpleNamespace(returncode=returncode),
                                 drain=lambda timeout: None)


def test_the_supervisor_hands_the_slot_to_the_spare_relabels_it_records_it_and_releases_the_idle_ones(tmp_path):
    import json
    import types
    from mxhet.launcher.supervisor import Supervisor
    from mxhet.launcher.watch import Decision
    from mxhet.spares import read_order
    plan = types.SimpleNamespace(elastic=True, worker_restarts=2, worker_restart_delay=0.0, live_dir="",
                                 slot_ranks=(0, 1), job_file=None)
    sup = Supervisor(plan)
    sup.progress_dir = str(tmp_path)
    sup.console = types.SimpleNamespace(say=lambda text: None, write=lambda stream, text: None)
    worker_env = {"MXHET_SLOT": "1", "MXHET_SLOWDOWN": "4.0", "PORT": "7001", "DMLC_NODE_HOST": "127.0.0.1"}
    spare_env = {"MXHET_SLOT": "0", "MXHET_SLOWDOWN": "1.0", "PORT": "7009", "DMLC_NODE_HOST": "127.0.0.1"}
    sup.children = [_child("worker", 0, None, dict(worker_env, MXHET_SLOT="0"), 10),
                    _child("worker", 1, -9, worker_env, 11),
                    _child("spare", 0, None, spare_env, 12), _child("spare", 1, None, spare_env, 13)]
    sup.watch.restarts.append((1, sup._t0 + 1.0, sup._t0 + 8.0))
    sup._activate_spare(Decision("activate", index=1, spare=2))
    order = read_order(str(tmp_path / "spare-0"))
    assert order["slot"] == 1 and order["rank"] == 1
    env = order["env"]
    assert env["MXHET_SLOT"] == "1" and env["MXHET_SLOWDOWN"] == "4.0" and "PORT" not in env
    assert env["MXHET_PROGRESS_FILE"] == str(tmp_path / "worker-1")
    assert (tmp_path / "worker-1").read_text() == "started"
    taken = sup.children[2].spec
    assert (taken.role, taken.slot, taken.env["PORT"]) == ("worker", 1, "7009")   # its own PS-LITE port
    [record] = sup.worker_restarts
    assert (record["slot"], record["spare"], record["spare_pid"], record["died_s"]) == (1, 0, 12, 1.0)
    takeovers = json.loads((tmp_path / "takeovers.json").read_text())
    assert [(t["slot"], t["spare"]) for t in takeovers] == [(1, 0)]
    assert read_order(str(tmp_path / "spare-1")) is None
    sup._release_spares()
    assert read_order(str(tmp_path / "spare-1")) == {"over": True}
    assert read_order(str(tmp_path / "spare-0"))["slot"] == 1   # the taken-over one is a worker now


def test_the_adapter_reports_the_jobs_rank_and_size_and_a_taken_over_spare_skips_init():
    import mxnet as mx
    from mxhet.spares import adapt
    from mxhet.dataplane import is_dist_kvstore
    kv = adapt(mx.kv.create("local"), 2, 3)
    assert (kv.rank, kv.num_workers) == (2, 3) and isinstance(kv, mx.kv.KVStore)
    kv.init(0, mx.nd.ones((2,)))
    out = mx.nd.zeros((2,))
    kv.pull(0, out=out)
    assert out.asnumpy().tolist() == [1.0, 1.0]
    spare = adapt(mx.kv.create("local"), 1, 3, skip_init=True)
    spare.init(0, mx.nd.ones((2,)))   # nothing: on the cluster the key is on the servers already
    with pytest.raises(mx.base.MXNetError):
        spare.pull(0, out=out)
    assert not is_dist_kvstore(spare)   # still what it was (a local store here), same handle
