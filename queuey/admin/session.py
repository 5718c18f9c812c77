"""Signing in to the admin pages: the session cookie and who it names.

The session is Pyramid's signed cookie (HttpOnly, SameSite=Strict, scoped to
``/admin``, ``Secure`` when ``queuey.admin.secure_cookie`` says so). Signing in
checks the application name and key exactly as the API does (constant-time
:meth:`~queuey.applications.Application.key_matches`, then the address
allowlist) and keeps in the session the application's name and a
*fingerprint* of the stored key digest that matched: an HMAC of it under the
session secret, so the (readable) cookie tells nothing about the key. Every
request checks the fingerprint against the keys configured now, so removing or
rotating that key ends the session; the allowlist is checked on every request
by the security policy (:mod:`queuey.web.security`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass

from pyramid.session import SignedCookieSessionFactory

from queuey.applications import Application, digest
from queuey.core.access import client_address, key_of_unknown_application
from queuey.errors import ConfigurationError

log = logging.getLogger(__name__)

COOKIE_NAME = "queuey_admin"
COOKIE_PATH = "/admin"
#: Session keys.
APPLICATION = "application"
KEY = "key"


def session_secret(configured: str, *, shared: str | None = None, alone: bool = True) -> str:
    """The secret signing admin sessions.

    ``queuey.admin.secret`` when set; else ``shared``, the one the production
    server drew for all its processes (:mod:`queuey.server`); else, in a
    process known to serve alone (``pserve`` with waitress, tests), a random
    one of its own, with a warning. A process that may be one of several
    workers with nothing shared (``queuey.wsgi`` under granian or gunicorn)
    refuses to start: each would sign with its own secret, and an operator's
    session would hold on one worker in two.
    """
    if configured:
        return configured
    if shared:
        log.info("admin sessions are signed with the secret this server drew at its start")
        return shared
    if not alone:
        raise ConfigurationError(
            "queuey.admin.secret",
            "not set, and this process may be one of several workers, which cannot share "
            "a random secret: set it (or QUEUEY_ADMIN_SECRET), serve with pserve and "
            "`use = egg:queuey#granian`, or turn the admin pages off (queuey.admin.enabled)",
        )
    log.warning(
        "queuey.admin.secret is not set: admin sessions are signed with a random secret, "
        "so they end when this process restarts and do not span nodes"
    )
    return secrets.token_urlsafe(32)


def session_factory(secret: str, *, secure: bool, seconds: int):
    """Pyramid's signed-cookie session, as the admin pages need it."""
    return SignedCookieSessionFactory(
        secret,
        cookie_name=COOKIE_NAME,
        path=COOKIE_PATH,
        secure=secure,
        httponly=True,
        samesite="Strict",
        max_age=seconds,
        timeout=seconds,
        # A session in use is re-signed now and then, so it lasts `seconds`
        # from the last request rather than from signing in.
        reissue_time=max(seconds // 10, 1),
        salt="queuey.admin.session",
    )


@dataclass(frozen=True)
class Refusal:
    """Why a sign-in failed: the HTTP status and what the page says."""

    status: int
    message: str


class SignIns:
    """Signs sessions in and out, and says whom a session names.

    Kept in :attr:`queuey.web.state.WebState.session_sign_ins`; the security policy asks
    :meth:`application` on every admin request.
    """

    def __init__(self, secret: str) -> None:
        self._secret = hashlib.sha256(("queuey.admin.key:" + secret).encode("utf-8")).digest()

    def fingerprint(self, key_digest: bytes) -> str:
        return hmac.new(self._secret, key_digest, hashlib.sha256).hexdigest()[:32]

    def sign_in(self, request, name: str, key: str) -> Application | Refusal:
        """Check ``name`` and ``key`` as the API would; on success start a fresh session.

        The answers match the API's: an unknown application and a wrong key
        are both 401, a right key from a disallowed address is 403.
        """
        application = request.services.applications.get(name) if name else None
        if application is None:
            key_of_unknown_application(key)  # costs what a key check costs
        if application is None or not application.key_matches(key):
            return Refusal(401, "Unknown application or wrong key.")
        address = client_address(request, request.services.settings.trusted_proxies)
        if not application.address_allowed(address):
            return Refusal(403, "This address may not use the application's key.")
        offered = digest(key)
        matched = next(d for d in application.key_digests if hmac.compare_digest(d, offered))
        session = request.session
        session.invalidate()  # a fresh session: nothing carried over from before signing in
        session[APPLICATION] = application.name
        session[KEY] = self.fingerprint(matched)
        session.new_csrf_token()
        return application

    def sign_out(self, request) -> None:
        request.session.invalidate()

    def application(self, request) -> Application | None:
        session = request.session
        name, fingerprint = session.get(APPLICATION), session.get(KEY)
        if not isinstance(name, str) or not isinstance(fingerprint, str):
            return None
        application = request.services.applications.get(name)
        if application is None:
            return None
        found = False
        for stored in application.key_digests:
            found |= hmac.compare_digest(self.fingerprint(stored), fingerprint)
        return application if found else None


def sign_ins_of(request) -> SignIns:
    """The app's sign-ins, which :mod:`queuey.admin` keeps with the HTTP doors' state."""
    found = request.web.session_sign_ins
    if not isinstance(found, SignIns):
        raise LookupError("the admin pages are not included")
    return found
