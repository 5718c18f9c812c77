"""Fixtures of the HTTP API tests."""

from __future__ import annotations

import pytest


def _settler(app, clock):
    """Move ``app``'s clock past the read delay, so fresh posts become readable."""
    delay = app.app.registry.queuey.settings.read_delay
    # A batch minted on a frozen clock spans a few microseconds past "now".
    return lambda: clock.advance(delay + 0.01)


@pytest.fixture
def settle(app, clock):
    """Move the app's clock past the read delay, so fresh posts become readable."""
    return _settler(app, clock)


@pytest.fixture
def sqlite_app(make_app, sqlite_storage, wrap_app):
    """The app on the embedded store only, for rules that do not depend on the backend."""
    return wrap_app(make_app(sqlite_storage))


@pytest.fixture
def sqlite_settle(sqlite_app, clock):
    """``settle`` for ``sqlite_app``."""
    return _settler(sqlite_app, clock)
