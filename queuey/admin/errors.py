"""The admin pages' failures as HTML pages, and the headers every admin answer carries.

The API's error views answer JSON; on admin routes one exception view per
route takes precedence (Pyramid looks for exception views by the route's
request type first), so whatever goes wrong under ``/admin`` is a page in the
admin's look: signed out -> the sign-in page, a missing or wrong CSRF token
-> 400 saying nothing was changed, a body over its limit -> 413, storage down
-> 503 with ``Retry-After``, anything unexpected -> 500, logged, never a traceback.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from pyramid.events import NewResponse
from pyramid.exceptions import BadCSRFToken
from pyramid.httpexceptions import HTTPException, HTTPForbidden, HTTPNotFound, HTTPSeeOther
from pyramid.renderers import render_to_response

from queuey.core.flow import FlowRefused
from queuey.core.quotas import Throttled, TooManyQueues
from queuey.errors import QueueNotFound, StorageUnavailable
from queuey.web.params import InvalidParameters, PayloadTooLarge
from queuey.web.security import Refused

log = logging.getLogger(__name__)

ERROR_TEMPLATE = "queuey.admin:templates/error.jinja2"

#: Scripts, styles and images from our own static files only; no frames, no
#: plugins, forms post back here only.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


def is_admin_path(path: str) -> bool:
    return path == "/admin" or path.startswith("/admin/")


def error_page(request, status: int, title: str, message: str, headers=None):
    """An HTML error page in the admin's layout."""
    response = render_to_response(
        ERROR_TEMPLATE, {"title": title, "message": message, "status": status}, request=request
    )
    response.status = status
    if headers:
        response.headers.update(headers)
    return response


def sign_in_redirect(request) -> HTTPSeeOther:
    target = request.route_path("admin.signin")
    if request.method == "GET" and request.path_qs.startswith("/admin/"):
        target += "?" + urlencode({"next": request.path_qs})
    return HTTPSeeOther(location=target)


def admin_error(exc, request):
    """The one exception view of every admin route."""
    if isinstance(exc, BadCSRFToken):
        return error_page(
            request,
            400,
            "Form expired or forged",
            "The form's security token was missing or wrong, so nothing was changed. "
            "Go back, reload the page and try again.",
        )
    if isinstance(exc, HTTPForbidden):
        result = getattr(exc, "result", None)
        if isinstance(result, Refused) and result.status == 401:
            return sign_in_redirect(request)
        return error_page(
            request, 403, "Not allowed", "This address may not use the application's key."
        )
    if isinstance(exc, StorageUnavailable):
        log.warning("storage unavailable: %s", exc)
        return error_page(
            request,
            503,
            "Storage unavailable",
            "The message store did not answer. Nothing more was changed; try again shortly.",
            headers={"Retry-After": str(exc.retry_after)},
        )
    if isinstance(exc, Throttled):
        return error_page(
            request,
            429,
            "Too many requests",
            f"This application is over its request rate; try again in {exc.retry_after} s.",
            headers={"Retry-After": str(exc.retry_after)},
        )
    if isinstance(exc, TooManyQueues):
        return error_page(request, 403, "Queue limit reached", str(exc))
    if isinstance(exc, FlowRefused):
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return error_page(
            request, exc.status, "Refused by flow control", f"{exc}.", headers=headers
        )
    if isinstance(exc, QueueNotFound):
        return error_page(request, 404, "No such queue", f"There is no queue named {exc}.")
    if isinstance(exc, InvalidParameters):
        return error_page(request, 400, "Bad request", str(exc))
    if isinstance(exc, PayloadTooLarge):
        return error_page(
            request, 413, "Form too large", f"Nothing was changed: {exc}. Go back and send less."
        )
    if isinstance(exc, HTTPNotFound):
        return error_page(request, 404, "Not found", "There is no admin page at this address.")
    if isinstance(exc, HTTPException):
        if exc.code < 400:
            return exc
        return error_page(request, exc.code, exc.title, exc.explanation or exc.title)
    log.error(
        "unhandled %s on admin %s %s: %s",
        type(exc).__name__,
        request.method,
        request.environ.get("PATH_INFO", ""),
        exc,
        exc_info=exc,
    )
    return error_page(request, 500, "Internal error", "Something went wrong; it has been logged.")


def security_headers(event: NewResponse) -> None:
    request, response = event.request, event.response
    # The raw WSGI path: decoding it could fail (the API answers 400 for that).
    path = request.environ.get("PATH_INFO", "")
    if not is_admin_path(path):
        return
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not path.startswith("/admin/static/"):
        # Pages hold queue data and CSRF tokens: never cached.
        response.headers["Cache-Control"] = "no-store"


def includeme(config) -> None:
    from queuey.admin import ROUTES

    for name in ["admin.bare"] + [route[0] for route in ROUTES]:
        config.add_exception_view(admin_error, context=Exception, route_name=name)
    config.add_subscriber(security_headers, NewResponse)
