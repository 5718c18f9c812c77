"""How the suite is shared among pytest-xdist workers (``make test`` runs ``-n``).

Work goes out in groups, each run whole by one worker, in the order of
collection:

* a test module is a group by default, so its module fixtures (a Cassandra
  cluster of its own, a browser, API nodes) start once, on one worker, and
  its fixed ports are never used by two workers at once;
* tests that use an expensive session fixture named in
  :data:`SHARED_FIXTURE_GROUPS` form one group across modules, so it starts
  once per run (one Spark JVM, one pair of work-queue nodes per backend);
* ``pytest.mark.xdist_group("name")`` puts tests of several modules in one
  group (a resource they must not use at the same time).

Workers order the groups longest first (:func:`order_by_cost`), so the long
ones (the 3-node cluster, Spark) start at once and no long group starts last.
Without ``-n`` nothing here runs: tests run in their usual order.
"""

from __future__ import annotations

import pytest

#: Session fixtures worth starting once per run: every test using one of them
#: joins its group (the fixture's closure counts, so a test using ``sc`` is in
#: the Spark group too).
SHARED_FIXTURE_GROUPS = {
    "spark": "spark",
    "work_queue_nodes": "work-queue-nodes",
}

#: Seconds the longest groups took in a run on four workers (2-core machine,
#: busy): only their ranking matters. Other groups count
#: :data:`SLOW_TEST_SECONDS` per test marked ``slow`` and :data:`TEST_SECONDS`
#: per other test.
MEASURED_SECONDS: dict[str, float] = {
    "spark": 592,
    "tests/faults/test_cassandra_cluster.py": 341,
    "work-queue-nodes": 218,
    "tests/faults/test_owned_failover.py": 150,
    "tests/sqs/test_cli.py": 133,
    "tests/faults/test_limits_hold.py": 130,
    "tests/sqs/test_messages.py": 125,
    "tests/sqs/test_celery.py": 75,
    "tests/faults/test_schedules_fairness_nodes.py": 101,
    "tests/faults/test_api_node_crash.py": 100,
    "tests/sqs/test_queues.py": 96,
    "tests/web/test_schemathesis.py": 89,
    "tests/sqs/test_fidelity.py": 84,
    "tests/sqs/test_permissions.py": 79,
    "tests/faults/test_cassandra_crash.py": 78,
    "tests/faults/test_flow_nodes.py": 75,
    "tests/faults/test_zookeeper_faults.py": 74,
    "tests/storage/test_cassandra_work.py": 70,
    "tests/faults/test_spool_kill.py": 70,
    "tests/faults/test_sqs_node_crash.py": 69,
    "tests/client/test_worker.py": 68,
    "tests/faults/test_server_workers.py": 62,
    "tests/faults/test_storage_unreachable.py": 57,
    "tests/sqs/test_state.py": 50,
    "tests/client/test_worker_reserve.py": 45,
    "tests/faults/test_schedules_nodes.py": 44,
    "tests/client/test_aio_client.py": 32,
    "tests/faults/test_autoscaling_live.py": 30,
}
SLOW_TEST_SECONDS = 30.0
TEST_SECONDS = 0.3


def group_of(item: pytest.Item) -> str:
    """The group ``item`` runs in: its ``xdist_group`` mark, a shared fixture's
    group, or its module."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    for fixture, group in SHARED_FIXTURE_GROUPS.items():
        if fixture in item.fixturenames:
            return group
    return item.nodeid.split("::", 1)[0]


def assign_groups(items: list[pytest.Item]) -> None:
    """Mark the tests of shared fixtures with their group (xdist adds a marked
    test's group to its node id, which is how the controller sees it)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = group_of(item)
            if group in SHARED_FIXTURE_GROUPS.values():
                item.add_marker(pytest.mark.xdist_group(group))


def order_by_cost(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: groups longest first, tests within a group
    in their collected order (which keeps parametrized session fixtures'
    tests together)."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(group_of(item), []).append(item)

    def cost(group: str) -> float:
        if group in MEASURED_SECONDS:
            return MEASURED_SECONDS[group]
        members = groups[group]
        slow = sum(1 for item in members if item.get_closest_marker("slow") is not None)
        return slow * SLOW_TEST_SECONDS + (len(members) - slow) * TEST_SECONDS

    ordered = sorted(groups, key=lambda group: -cost(group))  # stable: ties keep their order
    items[:] = [item for group in ordered for item in groups[group]]


def make_scheduler(config: pytest.Config, log):
    """xdist's ``loadgroup`` scheduling, with a module as the default group and
    the workers' collection order kept (not xdist's most-tests-first)."""
    from xdist.scheduler import LoadGroupScheduling

    class GroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.rsplit("@", 1)[-1]
            return nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)
