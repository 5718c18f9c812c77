"""The admin pages' failures as HTML pages, and the headers every admin answer carries.

The API's error views answer JSON; on admin routes one exception view per
route takes precedence (Pyramid looks for exception views by the route's
request type first), so whatever goes wrong under ``/admin`` is a page in the
admin's look: signed out -> the sign-in page, a missing or wrong CSRF token
-> 400 saying nothing was changed, any refusal of the core's catalogue
(:data:`queuey.errors.CATALOGUE`: a body over its limit, storage down, a
queue limit...) -> its status with the words of :data:`PAGES` (and
``Retry-After`` where the entry says), anything unexpected -> 500, logged,
never a traceback.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlencode

from pyramid.events import NewResponse
from pyramid.exceptions import BadCSRFToken
from pyramid.httpexceptions import HTTPException, HTTPForbidden, HTTPNotFound, HTTPSeeOther
from pyramid.renderers import render_to_response

from queuey.core.refusals import FlowRefused
from queuey.errors import Catalogued, StorageUnavailable
from queuey.web.errors import log_unhandled
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


@dataclass(frozen=True)
class Page:
    """A catalogue entry as an admin page: its title and its message, formed
    by ``message.format(exc=exc)``."""

    title: str
    message: str = "{exc}"


_BAD_REQUEST = Page("Bad request")
_FLOW = Page("Refused by flow control", "{exc}.")

#: Every entry of :data:`queuey.errors.CATALOGUE`, by name, as a page (each
#: flow-control refusal's, a :class:`~queuey.core.refusals.FlowRefused`, alike).
PAGES: dict[str, Page] = {
    "invalid_parameters": _BAD_REQUEST,
    "invalid_json": _BAD_REQUEST,
    "not_json": _BAD_REQUEST,
    "payload_too_large": Page(
        "Form too large", "Nothing was changed: {exc}. Go back and send less."
    ),
    "queue_not_found": Page("No such queue", "There is no queue named {exc}."),
    "queue_exists": Page("Queue exists", "A queue named {exc} exists already."),
    "invalid_update": Page("Change refused", "Nothing was changed: {exc}."),
    "message_not_found": Page("No such message", "{exc}."),
    "schedule_not_found": Page("No such schedule", "There is no schedule named {exc}."),
    "schedule_exists": Page("Schedule exists", "A schedule named {exc} exists already."),
    "schedule_conflict": Page("Schedule busy", "{exc}; try again."),
    "too_many_schedules": Page("Schedule limit reached"),
    "throttled": Page(
        "Too many requests",
        "This application is over its request rate; try again in {exc.retry_after} s.",
    ),
    "too_many_queues": Page("Queue limit reached"),
    **dict.fromkeys((refusal.entry.name for refusal in FlowRefused.__subclasses__()), _FLOW),
    "storage_unavailable": Page(
        "Storage unavailable",
        "The message store did not answer. Nothing more was changed; try again shortly.",
    ),
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


def refusal_page(request, exc: Catalogued):
    """A refusal of the catalogue as a page: its status, its :data:`PAGES`
    words and, where its entry says, ``Retry-After``."""
    if isinstance(exc, StorageUnavailable):
        log.warning("storage unavailable: %s", exc)
    page = PAGES[exc.entry.name]
    wait = exc.wait()
    return error_page(
        request,
        exc.status,
        page.title,
        page.message.format(exc=exc),
        headers=None if wait is None else {"Retry-After": str(wait)},
    )


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
    if isinstance(exc, Catalogued):
        return refusal_page(request, exc)
    if isinstance(exc, HTTPNotFound):
        return error_page(request, 404, "Not found", "There is no admin page at this address.")
    if isinstance(exc, HTTPException):
        if exc.code < 400:
            return exc
        return error_page(request, exc.code, exc.title, exc.explanation or exc.title)
    log_unhandled(log, exc, request, "admin ")
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
