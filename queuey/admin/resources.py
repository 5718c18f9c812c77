"""Contexts of the admin routes: each says ``session_identity = True``, so the
security policy (:mod:`queuey.web.security`) takes the caller from the signed-in
session, never from API headers."""

from __future__ import annotations

from queuey.web.resources import QueueContext


class SignInContext:
    """``/admin/signin``: open to everyone (the sign-in form itself)."""

    session_identity = True

    def __init__(self, request) -> None:
        self.request = request


class AdminContext(SignInContext):
    """The signed-in application's pages."""


class AdminQueueContext(QueueContext):
    """``/admin/queue/{name}...``: one queue of the signed-in application
    (the name checked and the queue loaded as the API does)."""

    session_identity = True
