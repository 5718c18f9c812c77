"""Health and build information for load balancers and operators."""

from __future__ import annotations

import logging
from functools import cache
from importlib.metadata import PackageNotFoundError, version

from queuey.errors import StorageUnavailable
from queuey.web.responses import json_response, ok

log = logging.getLogger(__name__)


@cache
def release() -> str | None:
    """The installed version of queuey; ``None`` when running from a source tree
    without install. Looked up once: it cannot change while the process runs."""
    try:
        return version("queuey")
    except PackageNotFoundError:
        return None


def lbheartbeat(request):
    """Liveness only: the process answers."""
    return ok()


def heartbeat(request):
    """Readiness: storage (and ZooKeeper when configured) answer."""
    checks = {}
    try:
        request.storage.ping()
        checks["storage"] = "ok"
    except StorageUnavailable as exc:
        # The detail (hosts, driver messages) is for operators, not for anyone asking.
        log.warning("heartbeat: storage unavailable: %s", exc)
        checks["storage"] = "unavailable"
    coordination = request.web.coordination
    if coordination is not None:
        state = coordination.check()
        if state != "ok":
            log.warning("heartbeat: zookeeper %s", state)
        checks["zookeeper"] = "ok" if state == "ok" else "unavailable"
    healthy = all(value == "ok" for value in checks.values())
    response = json_response(
        {"status": "ok" if healthy else "error", "checks": checks}, status=200 if healthy else 503
    )
    if not healthy:
        response.headers["Retry-After"] = str(request.services.settings.retry_after)
    return response


def version_info(request):
    storage = request.services.settings.storage_backend
    return ok(name="queuey", version=release() or "unknown", storage=storage)
