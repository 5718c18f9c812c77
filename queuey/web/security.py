"""Who is calling, and may they do this: a Pyramid 2 security policy.

Identity comes from ``X-Application-Name`` (must name a configured
application) and ``ApplicationKey`` (checked in constant time). An unknown
name is refused exactly as a wrong or missing key is (same status, field and
words), after a key check against a dummy digest, so neither the answer nor
its time tells which application names exist. The client
address is the socket peer, or, when the peer is a trusted proxy, the last
untrusted address in ``X-Forwarded-For``. Those rules are every door's
(:mod:`queuey.core.access`); this module is the REST API's and the admin
pages' Pyramid side of them.

Routes whose context says ``session_identity = True`` (the admin pages,
:mod:`queuey.admin`) take the application from a signed-in session instead:
the sign-ins the admin pages keep (:attr:`queuey.web.state.WebState.session_sign_ins`)
say which application, if any, the session's key still opens. Headers count for nothing
there and the session for nothing elsewhere; the address allowlist applies to
both on every request.

Permissions:

* :attr:`Permission.READ` - reading a queue. Public queues need only a known
  application name; private queues need what MANAGE needs.
* :attr:`Permission.MANAGE` - every internal-app call: a right key (else 401)
  from an allowed address (else 403).
"""

from __future__ import annotations

from pyramid.interfaces import ISecurityPolicy
from pyramid.security import Allowed, Denied
from zope.interface import implementer

from queuey.core.access import (
    Identity,
    Permission,
    client_address,
    key_of_unknown_application,
)
from queuey.core.services import services_of
from queuey.web.state import SessionSignIns, web_state_of

_UNSET = object()


class Refused(Denied):
    """A denial that knows its HTTP status (401 or 403) and which field is wrong."""

    def __new__(cls, status: int, field: str, message: str):
        inst = Denied.__new__(cls, message)
        inst.status = status
        inst.field = field
        return inst


def key_refusal(request) -> Refused:
    """The one answer to a missing or wrong key, whether or not the
    application named exists (an unknown name is refused the same way)."""
    if not request.headers.get("ApplicationKey"):
        return Refused(401, "ApplicationKey", "this call needs the ApplicationKey header")
    return Refused(401, "ApplicationKey", "wrong application key")


def uses_session(request) -> bool:
    """Whether this request's route identifies callers by their session."""
    return getattr(getattr(request, "context", None), "session_identity", False)


@implementer(ISecurityPolicy)
class QueueySecurityPolicy:
    def identity(self, request) -> Identity | None:
        """The caller, worked out once per request (Pyramid asks more than once)."""
        cached = request.__dict__.get("_queuey_identity", _UNSET)
        if cached is _UNSET:
            cached = request.__dict__["_queuey_identity"] = self._identity(request)
        return cached

    def _identity(self, request) -> Identity | None:
        services = services_of(request.registry)
        trusted = services.settings.trusted_proxies
        session = uses_session(request)
        key = request.headers.get("ApplicationKey")
        if session:
            sign_ins = web_state_of(request.registry).session_sign_ins
            app = sign_ins.application(request) if sign_ins is not None else None
        else:
            name = request.headers.get("X-Application-Name")
            app = services.applications.get(name) if name else None
            if app is None:
                key_of_unknown_application(key)
        if app is None:
            return None
        return Identity(
            application=app,
            key_valid=session or app.key_matches(key),
            client_addr=client_address(request, trusted),
            from_session=session,
        )

    def authenticated_userid(self, request) -> str | None:
        identity = request.identity
        return identity.application.name if identity else None

    def permits(self, request, context, permission):
        identity = request.identity
        if identity is None:
            if uses_session(request):
                return Refused(401, "session", "sign in first")
            if not request.headers.get("X-Application-Name"):
                return Refused(
                    401, "X-Application-Name", "the X-Application-Name header is missing"
                )
            return key_refusal(request)  # as for a known name: which names exist stays unsaid
        if permission is Permission.READ and getattr(context, "is_public", lambda: False)():
            return self._charged(request, identity, Allowed("public queue"))
        if not identity.key_valid:
            return key_refusal(request)
        if not identity.address_allowed:
            return Refused(403, "client_address", "this address may not use the application's key")
        return self._charged(request, identity, Allowed("application key"))

    def _charged(self, request, identity: Identity, allowed: Allowed) -> Allowed:
        """Charge an allowed, authenticated request to its application's rate,
        once per request (:mod:`queuey.core.quotas`; raises ``Throttled``). A caller
        without a valid key costs the application nothing."""
        if identity.key_valid and identity.address_allowed:
            if not request.__dict__.get("_queuey_charged"):
                request.__dict__["_queuey_charged"] = True
                services_of(request.registry).quotas.admit(identity.application.name)
        return allowed

    def remember(self, request, userid, **kw):
        return []

    def forget(self, request, **kw):
        return []


def use_session_sign_ins(config, sign_ins: SessionSignIns) -> None:
    """Let routes whose context says ``session_identity`` take their caller
    from ``sign_ins`` (the admin pages' sessions)."""
    web_state_of(config.registry).session_sign_ins = sign_ins


def includeme(config) -> None:
    config.set_security_policy(QueueySecurityPolicy())
