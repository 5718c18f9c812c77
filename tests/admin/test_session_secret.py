"""Which secret signs admin sessions, process by process.

Processes of one production server (``egg:queuey#granian``) share the one
their runner drew; a process that may be one of several workers with nothing
shared (``queuey.wsgi`` under another server) refuses to start without
``queuey.admin.secret``; a process alone keeps a random one of its own. The
real server with 2 workers: ``tests/faults/test_admin_workers.py``.
"""

from __future__ import annotations

import os
import stat

import pytest

from queuey.errors import ConfigurationError
from queuey.server import IMPORTED_ENV, SESSION_SECRET_FILE, SHARED_DIR_ENV, draw_session_secret
from tests.admin.conftest import csrf_of
from tests.support import KEY

pytestmark = pytest.mark.unit

#: As ADMIN_SETTINGS, without a configured secret.
NO_SECRET = {"queuey.stats.interval": "0"}


def test_two_processes_of_one_server_sign_alike(
    make_app, sqlite_storage, wrap_app, tmp_path, monkeypatch
):
    """A form from one worker posts to the other; pages load on either."""
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(IMPORTED_ENV, "1")
    draw_session_secret(str(tmp_path))
    workers = [make_app(sqlite_storage, **NO_SECRET) for _ in range(2)]
    client = wrap_app(workers[0])
    form = client.get("/admin/signin").forms[0]
    form["application"], form["key"] = client.apps.app, KEY
    client.app = workers[1]
    form.submit(status=303)
    for n in range(6):
        client.app = workers[n % 2]
        page = client.get("/admin/", status=200)
    client.app = workers[0]
    client.post("/admin/signout", {"csrf_token": csrf_of(page)}, status=303)


def test_the_drawn_secret_is_for_this_user_only(tmp_path):
    draw_session_secret(str(tmp_path))
    path = tmp_path / SESSION_SECRET_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(path.read_text()) >= 40


def test_maybe_one_of_several_workers_refuses_a_random_secret(
    make_app, sqlite_storage, monkeypatch
):
    monkeypatch.delenv(SHARED_DIR_ENV, raising=False)
    monkeypatch.setenv(IMPORTED_ENV, "1")  # as queuey.wsgi sets it
    with pytest.raises(ConfigurationError) as refused:
        make_app(sqlite_storage, **NO_SECRET)
    assert refused.value.key == "queuey.admin.secret"
    make_app(sqlite_storage, **NO_SECRET, **{"queuey.admin.secret": "configured"})
    make_app(sqlite_storage, **NO_SECRET, **{"queuey.admin.enabled": "false"})


def test_a_process_alone_keeps_a_random_secret(make_app, sqlite_storage, wrap_app, monkeypatch):
    monkeypatch.delenv(SHARED_DIR_ENV, raising=False)
    monkeypatch.delenv(IMPORTED_ENV, raising=False)
    client = wrap_app(make_app(sqlite_storage, **NO_SECRET))
    form = client.get("/admin/signin").forms[0]
    form["application"], form["key"] = client.apps.app, KEY
    form.submit(status=303)
    client.get("/admin/", status=200)
