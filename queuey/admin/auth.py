"""Signing in and out of the admin pages (see :mod:`queuey.admin.session`)."""

from __future__ import annotations

from pyramid.httpexceptions import HTTPNotFound, HTTPSeeOther
from pyramid.view import view_config

from queuey.admin.session import Refusal, sign_ins_of
from queuey.web.params import query

TEMPLATE = "queuey.admin:templates/signin.jinja2"


def _next(request, value: str | None) -> str:
    """Where to go after signing in: an admin page, never another site."""
    if value and value.startswith("/admin/") and not value.startswith("/admin//"):
        return value
    return request.route_path("admin.queues")


@view_config(route_name="admin.signin", request_method="GET", renderer=TEMPLATE)
def sign_in_form(request):
    return {"name": "", "next": _next(request, query(request).get("next")), "refusal": None}


@view_config(route_name="admin.signin", request_method="POST", renderer=TEMPLATE, require_csrf=True)
def sign_in(request):
    name = request.admin_form.get("application", "").strip()[:200]
    key = request.admin_form.get("key", "")[:1000]
    target = _next(request, request.admin_form.get("next"))
    outcome = sign_ins_of(request).sign_in(request, name, key)
    if isinstance(outcome, Refusal):
        request.response.status = outcome.status
        return {"name": name, "next": target, "refusal": outcome.message}
    return HTTPSeeOther(location=target)


@view_config(route_name="admin.signout", request_method="POST", require_csrf=True)
def sign_out(request):
    sign_ins_of(request).sign_out(request)
    return HTTPSeeOther(location=request.route_path("admin.signin"))


@view_config(route_name="admin.bare")
def bare(request):
    return HTTPSeeOther(location=request.route_path("admin.queues"))


@view_config(route_name="admin.unknown")
def unknown(request):
    raise HTTPNotFound()
