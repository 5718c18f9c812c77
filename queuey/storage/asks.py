"""What a work-queue call asks of a backend, as one value.

:meth:`queuey.storage.Storage.reserve` (and ``release``, ``extend``) keeps
the interface's keyword arguments; it bundles them here and hands the bundle
to the backend's ``reserve_ask`` (``release_ask``, ``extend_ask``) and down
its layers, so the long argument lists are written in the interface only and
a new argument reaches every layer by one field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReserveAsk:
    """The arguments of :meth:`queuey.storage.Storage.reserve` after the queue
    and subscription (their meaning is documented there)."""

    partitions: Sequence[int]
    limit: int
    visibility_timeout: int
    now_micros: int
    settled_micros: int
    max_in_flight: int = 0


@dataclass(frozen=True)
class ReleaseAsk:
    """The arguments of :meth:`queuey.storage.Storage.release` after the queue
    and subscription."""

    receipts: Sequence[str]
    now_micros: int
    delay: int = 0
    error: str | None = None


@dataclass(frozen=True)
class ExtendAsk:
    """The arguments of :meth:`queuey.storage.Storage.extend` after the queue
    and subscription."""

    receipts: Sequence[str]
    now_micros: int
    visibility_timeout: int
