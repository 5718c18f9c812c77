"""What every admin template may use: the signed-in application, flash
messages, and formatting of counts, ages, times and message bodies; and what
every admin view uses: its declaration, its form's fields and its answer."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

from pyramid.events import BeforeRender
from pyramid.httpexceptions import HTTPSeeOther
from pyramid.view import view_config

from queuey.core.access import Permission
from queuey.ids import MICROS

#: Longest body shown pretty-printed in full; longer ones are cut with a note.
MAX_SHOWN_BODY = 20_000


def age(seconds: float | None) -> str:
    """``42 s``, ``3 min``, ``5 h``, ``2 d`` (``-`` for none)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def when(micros: int | None) -> str:
    """A timestamp in UTC to the second, ISO-like (``-`` for none)."""
    return "-" if micros is None else zoned(micros / MICROS, "UTC")


def epoch(seconds: float | None) -> str:
    return "-" if seconds is None else when(int(seconds * MICROS))


def pretty(body: str) -> str:
    """A stored JSON body indented for reading (autoescaped by the template)."""
    try:
        text = json.dumps(json.loads(body), indent=2, ensure_ascii=False, sort_keys=False)
    except ValueError:
        text = body
    if len(text) > MAX_SHOWN_BODY:
        return text[:MAX_SHOWN_BODY] + f"\n... ({len(text) - MAX_SHOWN_BODY} more characters)"
    return text


def count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def flow_limit(value: float | int) -> str:
    """A flow limit as a form shows it: empty for none, a plain decimal else
    (what the form reads back: at most 6 decimals, no exponent)."""
    if not value:
        return ""
    if isinstance(value, int):
        return str(value)
    return f"{value:.6f}".rstrip("0").rstrip(".")


def zoned(epoch: int | None, zone: str) -> str:
    """A tick's wall-clock time in ``zone`` (``-`` for none)."""
    if epoch is None:
        return "-"
    try:
        tz = ZoneInfo(zone)
    except (KeyError, ValueError):  # stored before a tzdata change removed the zone
        tz = ZoneInfo("UTC")
    return datetime.fromtimestamp(epoch, tz).strftime("%Y-%m-%d %H:%M:%S %Z")


def relative(epoch: int | None, now: float) -> str:
    """``in 3 min``, ``42 s ago``, ``now`` (empty for none)."""
    if epoch is None:
        return ""
    seconds = epoch - now
    if abs(seconds) < 1:
        return "now"
    return f"in {age(seconds)}" if seconds > 0 else f"{age(-seconds)} ago"


#: What every admin template may call to format a value, by its name.
FORMATS = (age, when, epoch, zoned, relative, pretty, count)


def admin_view(route: str, method: str = "GET", template: str | None = None) -> view_config:
    """A signed-in page's view (the application's ``MANAGE`` permission),
    rendered with ``templates/<template>.jinja2``; a POST needs the form's
    CSRF token."""
    return view_config(
        route_name=route,
        request_method=method,
        permission=Permission.MANAGE,
        renderer=template and f"queuey.admin:templates/{template}.jinja2",
        require_csrf=True if method == "POST" else None,
    )


def application_name(request) -> str:
    return request.identity.application.name


def filled(request, names) -> dict[str, str]:
    """The form's non-empty fields among ``names`` (empty means "the default")."""
    fields = request.admin_form
    return {name: fields[name].strip() for name in names if fields.get(name, "").strip()}


def done(request, message: str, route: str, queue: str = "", **params) -> HTTPSeeOther:
    """Flash ``message`` (in the flash ``queue``) and send the browser to
    ``route`` (``params``: its path's, and ``request.route_path``'s own)."""
    request.session.flash(message, queue)
    return HTTPSeeOther(location=request.route_path(route, **params))


def add_globals(event: BeforeRender) -> None:
    renderer = event.get("renderer_name") or ""
    if not renderer.startswith("queuey.admin:"):
        return
    request = event["request"]
    identity = request.identity if request is not None else None
    # Only a session names the signed-in application (a page for a request that
    # failed before its route's context existed may have a header identity).
    signed_in = identity is not None and identity.from_session
    application = identity.application.name if signed_in else None
    if application is not None:
        request.environ["queuey.application"] = application
    event.update(
        application=application,
        flashes=request.session.pop_flash() if application is not None else [],
        flash_errors=request.session.pop_flash("error") if application is not None else [],
        **{format.__name__: format for format in FORMATS},
    )


def includeme(config) -> None:
    config.add_subscriber(add_globals, BeforeRender)
