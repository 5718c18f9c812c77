"""Fixtures of the HTTP API tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def settle(app, clock):
    """Move the app's clock past the read delay, so fresh posts become readable."""
    delay = app.app.registry.queuey_settings.read_delay

    def run():
        # A batch minted on a frozen clock spans a few microseconds past "now".
        clock.advance(delay + 0.01)

    return run


@pytest.fixture
def sqlite_app(make_app, sqlite_storage, wrap_app):
    """The app on the embedded store only, for rules that do not depend on the backend."""
    return wrap_app(make_app(sqlite_storage))


@pytest.fixture
def sqlite_settle(sqlite_app, clock):
    """``settle`` for ``sqlite_app``."""
    delay = sqlite_app.app.registry.queuey_settings.read_delay
    return lambda: clock.advance(delay + 0.01)
