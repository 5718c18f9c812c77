"""Route contexts: what a request is about, loaded lazily."""

from __future__ import annotations

from pyramid.decorator import reify

from queuey.storage import QueueMeta
from queuey.web.params import queue_name


class ApplicationContext:
    """``/queue``: the calling application's collection of queues."""

    def __init__(self, request) -> None:
        self.request = request

    def is_public(self) -> bool:
        return False


class QueueContext:
    """``/queue/{name}...``: one queue of the calling application."""

    def __init__(self, request) -> None:
        self.request = request
        self.name = queue_name(request.matchdict["name"])

    @reify
    def meta(self) -> QueueMeta:
        request = self.request
        return request.storage.get_queue(request.identity.application.name, self.name)

    def is_public(self) -> bool:
        return self.meta.type == "public"
