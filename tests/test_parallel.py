"""How the suite is shared among xdist workers (tests/parallel.py) and the
per-worker ports of ``free_port``: pure logic, no worker started."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from tests import parallel, support

pytestmark = pytest.mark.unit


@dataclass
class FakeItem:
    """What the grouping reads of a collected test."""

    nodeid: str
    fixturenames: list[str] = field(default_factory=list)
    marks: dict[str, pytest.MarkDecorator] = field(default_factory=dict)

    def get_closest_marker(self, name: str):
        decorator = self.marks.get(name)
        return None if decorator is None else decorator.mark

    def add_marker(self, decorator: pytest.MarkDecorator) -> None:
        self.marks[decorator.mark.name] = decorator


def test_a_test_runs_in_its_mark_s_group_else_its_shared_fixture_s_else_its_module_s():
    marked = FakeItem("tests/a.py::t", ["spark"], {"xdist_group": pytest.mark.xdist_group("own")})
    spark = FakeItem("tests/spark/test_x.py::t[sqlite]", ["tmp_path", "spark"])
    plain = FakeItem("tests/web/test_y.py::Class::t", ["tmp_path"])
    assert [parallel.group_of(i) for i in (marked, spark, plain)] == [
        "own",
        "spark",
        "tests/web/test_y.py",
    ]
    parallel.assign_groups([marked, spark, plain])
    assert spark.get_closest_marker("xdist_group").args == ("spark",)
    assert plain.get_closest_marker("xdist_group") is None  # its module is its group


def test_groups_are_ordered_longest_first_and_keep_their_tests_order(monkeypatch):
    monkeypatch.setattr(parallel, "MEASURED_SECONDS", {"tests/b.py": 100.0})
    slow = pytest.mark.slow
    items = [
        FakeItem("tests/a.py::t1"),
        FakeItem("tests/b.py::t1"),
        FakeItem("tests/c.py::t1", marks={"slow": slow}),
        FakeItem("tests/a.py::t2"),
        FakeItem("tests/b.py::t2"),
    ]
    parallel.order_by_cost(items)  # b: measured 100 s; c: one slow test, 30 s; a: 0.6 s
    assert [i.nodeid for i in items] == [
        "tests/b.py::t1",
        "tests/b.py::t2",
        "tests/c.py::t1",
        "tests/a.py::t1",
        "tests/a.py::t2",
    ]


def test_the_scheduler_s_unit_is_the_group_or_the_module():
    pytest.importorskip("xdist")
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True), getvalue={"tx": ["popen"] * 2}.get
    )
    scheduler = parallel.make_scheduler(config, None)
    assert config.option.loadscopereorder is False  # the workers' order is kept
    assert scheduler._split_scope("tests/web/test_y.py::C::t[a@b]") == "tests/web/test_y.py"
    assert scheduler._split_scope("tests/spark/test_x.py::t[sqlite]@spark") == "spark"


def test_a_worker_s_ports_come_from_its_own_block_below_the_ephemeral_range(monkeypatch):
    monkeypatch.setattr(support, "XDIST_WORKER", "gw2")
    monkeypatch.setattr(support, "WORKER_INDEX", 2)
    first = support.WORKER_PORTS_START + 2 * support.WORKER_PORTS_SPAN
    ports = [support.free_port() for _ in range(5)]
    assert all(first <= p < first + support.WORKER_PORTS_SPAN for p in ports)
    assert len(set(ports)) == 5  # handed out in turn, not the same one again
    assert first + support.WORKER_PORTS_SPAN <= 32768
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # free, as promised


def test_a_busy_port_of_the_block_is_skipped(monkeypatch):
    monkeypatch.setattr(support, "XDIST_WORKER", "gw0")
    monkeypatch.setattr(support, "WORKER_INDEX", 0)
    busy, free = support.free_port(), support.free_port()
    offsets = [p - support.WORKER_PORTS_START for p in (busy, free)]
    monkeypatch.setattr(support, "_worker_ports", iter(offsets))
    with socket.create_server(("127.0.0.1", busy)):
        assert support.free_port() == free
