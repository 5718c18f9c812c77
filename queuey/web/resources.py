"""Route contexts: what a request is about, loaded lazily."""

from __future__ import annotations

from pyramid.decorator import reify

from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.web.params import path_param


class QueueContext:
    """``/queue/{name}...``: one queue of the calling application."""

    def __init__(self, request) -> None:
        self.request = request
        self.name = path_param(request, "name", "queue_name")

    @reify
    def meta(self) -> QueueMeta:
        """The queue's metadata, through this node's cache (:mod:`queuey.core.queues`)."""
        request = self.request
        return request.services.queues.get(request.identity.application.name, self.name)

    def is_public(self) -> bool:
        """Whether a caller without the key may read it.

        A missing queue is not public: a caller who may not read private
        queues gets the same 401 for a private queue and for a missing one, so
        it cannot learn which private queues exist (``docs/api.rst``).
        """
        try:
            return self.meta.type == "public"
        except QueueNotFound:
            return False
