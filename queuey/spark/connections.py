"""Connections: plain values saying how an executor reaches a store.

An executor never receives a live connection. It builds its own
(:mod:`queuey.spark.sources`) from a :class:`StorageConnection` (a dotted
backend module plus a plain settings dict, the same as the ini) or an
:class:`HttpConnection` (API URLs and the application's credentials). Both are
frozen and hashable, so they pickle as plain strings inside the work
descriptors and key the per-process cache of live sources.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import plaster

from queuey.settings import merged


@dataclass(frozen=True)
class StorageConnection:
    """Read and write through a storage backend built on the executor.

    ``settings`` holds the ini keys the backend reads (for example
    ``queuey.cassandra.contact_points``), plus ``queuey.read_delay`` and
    ``queuey.max_clock_skew``. It is stored as sorted pairs so the connection is
    hashable (the per-process cache key) and pickles as plain strings.
    """

    backend: str
    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> StorageConnection:
        """From ini-style settings: ``queuey.storage.backend`` names the backend."""
        raw = merged(settings)
        backend = str(raw.pop("queuey.storage.backend"))
        pairs = tuple(sorted((str(k), str(v)) for k, v in raw.items() if k.startswith("queuey.")))
        return cls(backend=backend, settings=pairs)

    @classmethod
    def from_ini(cls, path: str, section: str = "app:main") -> StorageConnection:
        """From the app section of an ini file such as ``development.ini``."""
        return cls.from_settings(plaster.get_settings(os.path.abspath(path), section))

    def settings_dict(self) -> dict[str, str]:
        return dict(self.settings)

    def describe(self) -> str:
        return self.backend


@dataclass(frozen=True)
class HttpConnection:
    """Read and write through the HTTP API (``queuey.client.QueueyClient``)."""

    urls: tuple[str, ...]
    application: str
    key: str | None = field(default=None, repr=False)
    timeout: float = 30.0

    def describe(self) -> str:
        return ",".join(self.urls)


Connection = StorageConnection | HttpConnection
