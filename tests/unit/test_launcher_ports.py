"""Each worker's PS-LITE port (``PORT``) increases with its slot, so that on one
host PS-LITE's rank is the launcher's slot (no process is started)."""
from mxhet import launcher
from mxhet.launcher.jobplan import slot_ports
from tests.unit.test_launcher_args import hostfile, parse  # noqa: F401  (fixture)


def plan_with_ports(ports, *options, environ=None):
    """The plan when ``free_port`` hands out ``ports`` in this order."""
    supply = iter(ports)
    return launcher.build_plan(parse(*options), free_port=lambda host: next(supply), cpu_count=8,
                               environ={} if environ is None else environ, cwd="/job")


def pslite_worker_ranks(plan):
    """Each worker slot's rank as PS-LITE's scheduler assigns it: nodes sorted
    by advertised host in decreasing string order, then by increasing port
    (``Van::ProcessAddNodeCommandAtScheduler``), workers numbered in that order."""
    workers = plan.by_role("worker")
    by_port = sorted(workers, key=lambda w: int(w.env["PORT"]))   # stable: ports first, then hosts descending
    ordered = sorted(by_port, key=lambda w: w.env["DMLC_NODE_HOST"], reverse=True)
    return {w.slot: rank for rank, w in enumerate(ordered)}


def test_slot_ports_increase_whatever_order_free_ports_come_in():
    supply = iter([9050, 9003, 9071, 9020])
    assert slot_ports(4, lambda given: next(supply)) == [9003, 9020, 9050, 9071]


def test_every_worker_port_increases_with_its_slot_on_one_host():
    # free ports come in no particular order (the kernel's ephemeral ports)
    plan = plan_with_ports([7000, 7001, 9400, 9100, 9300, 9000, 9200], "-n", "5", "-s", "2", "--sync", "esync",
                           "--slowdown", "1,4,1,2,1")
    workers = plan.by_role("worker")
    assert [w.env["PORT"] for w in workers] == ["9000", "9100", "9200", "9300", "9400"]
    assert plan.root_port == 7000 and plan.state_server == "tcp://127.0.0.1:7001"
    assert pslite_worker_ranks(plan) == {slot: slot for slot in range(5)}
    # only workers get a fixed port: the scheduler binds DMLC_PS_ROOT_PORT, servers' order does not matter
    assert all("PORT" not in p.env for p in plan.processes if p.role != "worker")


def test_a_port_already_planned_is_not_given_twice():
    # the root port (7000) and a worker's (9001) come back from free_port: drawn again
    plan = plan_with_ports([7000, 7001, 7000, 9001, 9002, 9001, 9003], "-n", "3", "-s", "1", "--sync", "sync")
    assert [w.env["PORT"] for w in plan.by_role("worker")] == ["9001", "9002", "9003"]


def test_the_launchers_port_wins_over_env_worker_and_env(monkeypatch):
    monkeypatch.setenv("PORT", "6")
    # one PORT for every worker would make all but one fall back to a random port (and a random rank)
    plan = plan_with_ports(range(9000, 9010), "-n", "2", "-s", "1", "--sync", "sync", "--env-worker", "PORT:5",
                           "--env", "PORT", environ={"PORT": "6"})
    assert [w.env["PORT"] for w in plan.by_role("worker")] == ["9002", "9003"]


def test_a_standalone_worker_gets_no_port():
    plan = plan_with_ports([], "-n", "1", "--sync", "local")
    assert [p.role for p in plan.processes] == ["worker"] and "PORT" not in plan.processes[0].env


def test_over_ssh_ports_increase_with_the_slot_on_every_host(hostfile):  # noqa: F811
    # node-a runs slots 0, 2, 4 and node-b slots 1, 3: PS-LITE numbers node-b's
    # workers first ("node-b" > "node-a"), each host's in slot order
    plan = plan_with_ports(range(9000, 9010), "-n", "5", "-s", "1", "--sync", "esync", "-H", hostfile)
    workers = plan.by_role("worker")
    assert [(w.host, w.env["PORT"]) for w in workers] == [("node-a", "9002"), ("node-b", "9003"),
                                                          ("node-a", "9004"), ("node-b", "9005"),
                                                          ("node-a", "9006")]
    assert pslite_worker_ranks(plan) == {1: 0, 3: 1, 0: 2, 2: 3, 4: 4}
