"""Session-wide fixtures: the real services and per-test isolation."""

from __future__ import annotations

import pytest

from queuey.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
