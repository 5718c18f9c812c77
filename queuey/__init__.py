"""Queuey: a durable, partitioned message queue served over HTTP.

``main`` is the one app factory (the ``paste.app_factory`` entry point); it
lives in :mod:`queuey.app`, imported only when an app is built, so that
processes that use only the storage or the Spark code (Spark's Python
workers start one per task planner) do not load the web framework.
"""

from __future__ import annotations

import warnings
from typing import Any

# Pyramid 2.1 imports pkg_resources; the deprecation is not ours to act on and
# would otherwise print whenever any part of Queuey loads Pyramid.
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)


def main(global_config: dict | None = None, config: Any = None, **settings: Any):
    """Build the WSGI app (see :func:`queuey.app.main`)."""
    from queuey.app import main as build

    return build(global_config, config, **settings)
