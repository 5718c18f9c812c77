"""Who is calling, whatever the door: the rules every door authenticates by.

The REST API's security policy (:mod:`queuey.web.security`), the admin pages'
sign-in (:mod:`queuey.admin.session`) and the SQS endpoint
(:mod:`queuey.sqs.views`) each read credentials their own way, then apply
these: which address the caller has (``X-Forwarded-For`` counts only behind a
trusted proxy), what refusing an unknown application costs (as much as
checking a known one's key, so timing tells no names), and what a caller is
allowed (:class:`Permission`).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from queuey import applications
from queuey.applications import Application
from queuey.settings import address_in


class Permission(enum.Enum):
    """``READ``: reading a queue (a public one needs only a known application
    name). ``MANAGE``: everything else, with the application's key from an
    allowed address."""

    READ = "read"
    MANAGE = "manage"


@dataclass(frozen=True)
class Identity:
    application: Application
    key_valid: bool
    client_addr: str | None
    #: True when a signed-in session named the application (the admin pages).
    from_session: bool = False

    @property
    def address_allowed(self) -> bool:
        return self.application.address_allowed(self.client_addr)


#: What the key offered for an unknown application is compared with, so that
#: refusing it costs what checking a known application's key does.
_NO_SUCH_KEY = hashlib.sha256(b"queuey: no application has this key").digest()


def key_of_unknown_application(key: str | None) -> bool:
    """Check ``key`` as :meth:`Application.key_matches` would, against a
    digest no key has: ``False``, at the cost of a key check."""
    if key:
        hmac.compare_digest(applications.digest(key), _NO_SUCH_KEY)
    return False


class Peer(Protocol):
    """What :func:`client_address` reads of a request (a WebOb request has it)."""

    @property
    def remote_addr(self) -> str | None: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def client_address(request: Peer, trusted_proxies) -> str | None:
    """The caller's address; ``X-Forwarded-For`` counts only behind trusted proxies."""
    peer = request.remote_addr
    if not address_in(peer, trusted_proxies):
        return peer
    forwarded = request.headers.get("X-Forwarded-For", "")
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not address_in(hop, trusted_proxies):
            return hop
    return hops[0] if hops else peer
