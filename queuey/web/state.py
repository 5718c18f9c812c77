"""What the HTTP doors keep beside the core's services, typed and in one place.

The REST API, the admin pages and the SQS endpoint share Pyramid's plumbing:
the request models, each route's body limit, the request recorder, the admin
session's sign-ins. The app factory builds one :class:`WebState` next to
:class:`~queuey.core.services.Services`, before any door is included; doors
read and fill its fields through :func:`web_state_of`, never attributes of
their own on the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from queuey.applications import Application
from queuey.web.coordination import Coordination
from queuey.web.schemas import Models

#: Counts, times and logs one answered request: ``(request, response, seconds)``
#: (:class:`queuey.web.metrics.RequestRecorder`).
Recorder = Callable[[Any, Any, float], None]


class SessionSignIns(Protocol):
    """Who a signed-in session is (:class:`queuey.admin.session.SignIns`)."""

    def application(self, request) -> Application | None:
        """The session's application while the key it signed in with is still
        configured, else ``None``."""


@dataclass
class WebState:
    #: The request and response models, their bounds this app's settings.
    models: Models
    recorder: Recorder
    #: The heartbeat's ZooKeeper check (``None`` without ZooKeeper).
    coordination: Coordination | None = None
    #: Route name -> largest body it accepts (:mod:`queuey.web.bodies`).
    body_limits: dict[str, int] = field(default_factory=dict)
    #: Set by the admin pages when they are enabled (:mod:`queuey.admin`).
    session_sign_ins: SessionSignIns | None = None
    #: ``/openapi.json``, made on first use (:mod:`queuey.web.openapi`).
    openapi: dict | None = None
    #: Route name -> the methods it answers, made on first use (:mod:`queuey.web.errors`).
    allowed_methods: dict[str, frozenset[str]] | None = None


def web_state_of(registry: Any) -> WebState:
    """The HTTP doors' state, from the app's Pyramid registry."""
    return registry.queuey_web
