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
