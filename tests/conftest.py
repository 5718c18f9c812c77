"""Session-wide fixtures: the real services, apps built through ``main()``,
and per-test isolation (a fresh SQLite file, a fresh application name on the
shared Cassandra keyspace, a fresh ZooKeeper chroot).

Parallel runs: ``make test`` runs the suite on pytest-xdist workers (``-n``;
tests/parallel.py says how work is shared). A test is safe there when it
takes what it shares from these fixtures: ``tmp_path`` for files (never the
checkout's ``var/``), ``cassandra_settings`` / ``cassandra_storage`` (the
worker's own keyspace), ``zookeeper_chroot``, ``test_apps``, and
``free_port()`` or the live-server fixtures for ports (a worker's ports come
from a block of its own); environment variables through ``monkeypatch``.
Anything fixed (a port, a directory, a service of the test's own) is safe
within one module, which one worker runs whole; tests of several modules
that must not use a fixed resource at the same time share a mark,
``pytest.mark.xdist_group("name")``; an expensive session fixture that
several modules use belongs in ``tests.parallel.SHARED_FIXTURE_GROUPS``.
"""

from __future__ import annotations

import uuid

import pytest
import webtest

import queuey
from queuey.clock import ManualClock
from tests import parallel
from tests.support import (
    CASSANDRA_KEYSPACE,
    NO_REFRESHER,
    XDIST_WORKER,
    TestApps,
    cassandra_settings_for,
    server_settings,
    start_live_server,
    write_applications,
)

#: What passing tests printed (fault figures: sent, acknowledged, lost...), by test id.
_PRINTED: dict[str, str] = {}


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" and report.passed and report.capstdout.strip():
        _PRINTED[report.nodeid] = report.capstdout.strip()


def pytest_terminal_summary(terminalreporter) -> None:
    """Show the figures tests printed, so a plain ``make test`` log carries them."""
    if not _PRINTED:
        return
    terminalreporter.section("figures printed by passing tests")
    for nodeid, text in _PRINTED.items():
        terminalreporter.write_line(nodeid)
        for line in text.splitlines():
            terminalreporter.write_line("    " + line)


# -- parallel runs (pytest-xdist; see the module docstring) ----------------------------
def pytest_configure(config) -> None:
    if XDIST_WORKER:
        config.option.loadgroup = True  # xdist adds a marked test's group to its node id


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    if XDIST_WORKER:
        parallel.assign_groups(items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session) -> None:
    if XDIST_WORKER:  # after pytest's own reordering, before xdist reports the order
        parallel.order_by_cost(session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return None if config.getvalue("dist") == "each" else parallel.make_scheduler(config, log)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


# -- Cassandra ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def cassandra_cluster():
    """The project's single real Cassandra node (started if not running)."""
    from harness import cassandra

    return cassandra.ensure_running(1)


@pytest.fixture(scope="session")
def cassandra_settings(cassandra_cluster) -> dict[str, str]:
    """Settings for the test keyspace, dropped once per session so each run
    starts from the schema the code creates (under xdist: each worker's own)."""
    from cassandra.cluster import Cluster

    from harness.cassandra import PROTOCOL_VERSION, connection_class

    cluster = Cluster(
        cassandra_cluster.contact_points,
        port=cassandra_cluster.port,
        protocol_version=PROTOCOL_VERSION,
        connection_class=connection_class(),
    )
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {CASSANDRA_KEYSPACE}", timeout=60)
    finally:
        cluster.shutdown()
    return cassandra_settings_for(cassandra_cluster.contact_points, cassandra_cluster.port)


@pytest.fixture
def cassandra_storage(cassandra_settings, clock):
    """A Cassandra storage of this test's own (its id generator follows this test's clock)."""
    from queuey.storage.cassandra import load_from_config

    storage = load_from_config(cassandra_settings, clock)
    yield storage
    storage.close()


# -- SQLite -------------------------------------------------------------------------
@pytest.fixture
def sqlite_storage(tmp_path, clock):
    from queuey.storage.sqlite import SQLiteStorage

    storage = SQLiteStorage(tmp_path / "queuey.sqlite3", clock)
    yield storage
    storage.close()


# -- the app --------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def storage(request):
    """Each backend in turn (Cassandra runs on the real node)."""
    return request.getfixturevalue(f"{request.param}_storage")


@pytest.fixture
def test_apps() -> TestApps:
    suffix = uuid.uuid4().hex[:10]
    return TestApps(app=f"testapp-{suffix}", remote_app=f"remoteapp-{suffix}")


@pytest.fixture
def applications_file(tmp_path, test_apps):
    return write_applications(tmp_path / "applications.ini", test_apps)


@pytest.fixture
def wrap_app(test_apps):
    """Wrap a WSGI app in webtest, calling from 127.0.0.1, with this test's headers
    at hand as ``.auth`` (name + key), ``.reader`` (name only) and ``.apps``."""

    def wrap(wsgi_app, remote_addr: str = "127.0.0.1") -> webtest.TestApp:
        test_app = webtest.TestApp(wsgi_app, extra_environ={"REMOTE_ADDR": remote_addr})
        test_app.apps = test_apps
        test_app.auth = test_apps.auth
        test_app.reader = test_apps.reader
        return test_app

    return wrap


@pytest.fixture
def make_app(applications_file, clock):
    """Build the real WSGI app through ``main()`` around a given storage."""

    def make(storage, **settings):
        settings = {
            "queuey.applications": str(applications_file),
            "queuey.clock": clock,
            "queuey.storage.instance": storage,
            **NO_REFRESHER,
            **settings,
        }
        if storage.write_timeout_seconds and "queuey.read_delay" not in settings:
            settings["queuey.read_delay"] = str(storage.write_timeout_seconds)
        return queuey.main({}, **settings)

    return make


@pytest.fixture
def app(make_app, storage, wrap_app):
    """The app on each storage backend, through webtest (see ``client``)."""
    return wrap_app(make_app(storage))


# -- live servers ---------------------------------------------------------------------
@pytest.fixture
def make_live_server(request, tmp_path, applications_file, test_apps):
    """Start waitress on an ephemeral loopback port with the real clock.

    ``make_live_server(backend="sqlite"|"cassandra", **settings)``; every server
    is stopped when the test ends.
    """
    servers = []

    def make(backend: str = "sqlite", **settings):
        sqlite_path = tmp_path / f"live-{len(servers)}.sqlite3"
        base = server_settings(request, applications_file, backend, sqlite_path)
        base.update(settings)
        server = start_live_server(queuey.main({}, **base), test_apps.app)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
        server.app.registry.queuey.storage.close()


@pytest.fixture
def live_server(make_live_server):
    return make_live_server("sqlite")


# -- ZooKeeper --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def zookeeper_hosts() -> str:
    """The project's real ZooKeeper ("host:port"), started if not running."""
    from harness import zookeeper

    return zookeeper.ensure_running().hosts


@pytest.fixture
def zookeeper_chroot(zookeeper_hosts) -> str:
    """A connection string with a fresh chroot for this test."""
    from kazoo.client import KazooClient

    chroot = f"/queuey-test-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=zookeeper_hosts)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    yield zookeeper_hosts + chroot
    admin.delete(chroot, recursive=True)
    admin.stop()
    admin.close()


# -- tracing ----------------------------------------------------------------------------
@pytest.fixture
def spans():
    """Every span this process records while the test runs (OpenTelemetry's SDK,
    its in-memory exporter), through a provider of the test's own
    (:func:`queuey.tracing.use_provider`), not the process-wide one."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from queuey import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()
