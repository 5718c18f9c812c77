"""Fixtures of the admin pages' tests: the real app through ``main()`` on the
embedded store, a webtest client that signs in through the form."""

from __future__ import annotations

import re

import pytest

from tests.support import KEY

#: No refresher thread: the pages measure what they show themselves.
ADMIN_SETTINGS = {"queuey.stats.interval": "0", "queuey.admin.secret": "test-admin-secret"}


def csrf_of(page) -> str:
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', page.text).group(1)


def sign_in(client, application=None, key=KEY, status=303):
    """Sign in through the form; returns the answer to the form's POST."""
    form = client.get("/admin/signin").forms[0]
    form["application"] = application or client.apps.app
    form["key"] = key
    return form.submit(status=status)


@pytest.fixture
def admin_app(make_app, sqlite_storage, wrap_app):
    """The app (admin pages on), through webtest from 127.0.0.1, not signed in."""
    return wrap_app(make_app(sqlite_storage, **ADMIN_SETTINGS))


@pytest.fixture
def admin(admin_app):
    """``admin_app`` signed in as the test application."""
    sign_in(admin_app)
    return admin_app


@pytest.fixture
def settle(clock):
    """Move the frozen clock past the microseconds fresh ids step ahead of it."""
    return lambda: clock.advance(0.01)
