"""The queue page's flow control: pause and resume posting or a subscription,
and the queue's and each subscription's limits.

A door only: every change goes through
:class:`queuey.core.flowsettings.FlowSettings`, whose
:class:`~queuey.core.messages.InvalidFields` are shown next to the fields
they name. A form sends only the fields the operator changed (each field
carries the value the page showed, ``shown.<field>``), so two operators
changing different limits of one queue at once lose neither change.
An empty number field means no limit.
"""

from __future__ import annotations

import re
from typing import Any

from pyramid.httpexceptions import HTTPSeeOther
from pyramid.view import view_config

from queuey.admin.queues import queue_page
from queuey.core.access import Permission
from queuey.core.messages import InvalidFields
from queuey.web.params import PATTERN_WORDS, SUBSCRIPTION_PATTERN

#: The queue form's fields and a subscription form's, in the API's names.
QUEUE_FORM = ("post_rate", "post_burst", "max_length", "overflow", "fair")
SUBSCRIPTION_FORM = ("rate", "burst", "max_in_flight")
RATES = frozenset({"post_rate", "rate"})
FLAGS = frozenset({"fair"})
#: A rate or a count as the form may give it: bounded before conversion.
_RATE = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
_COUNT = re.compile(r"[0-9]{1,12}")
_SUBSCRIPTION = re.compile(SUBSCRIPTION_PATTERN)


def form_value(name: str, text: str) -> Any:
    """A form field's text as the value :class:`FlowSettings` takes
    (``ValueError`` saying what the field wants)."""
    if name in FLAGS:
        return text == "on"
    if name == "overflow":
        return text or "reject"
    if not text:
        return 0
    if name in RATES:
        if not _RATE.fullmatch(text):
            raise ValueError("must be messages per second, e.g. 50 or 0.5 (empty: no limit)")
        return float(text)
    if not _COUNT.fullmatch(text):
        raise ValueError("must be a whole number (empty: no limit)")
    return int(text)


def changed_fields(form, names: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields among ``names`` the form gives and whose text differs from
    what the page showed, as values; and the errors of those that do not parse."""
    given: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in names:
        text = form.get(name, "").strip()
        shown = form.get(f"shown.{name}")
        if shown is None and name not in form:
            continue  # not on the form (an unchecked box has its shown value)
        if shown is not None and text == shown.strip():
            continue
        try:
            given[name] = form_value(name, text)
        except ValueError as exc:
            errors[name] = str(exc)
    return given, errors


def subscription_of(request) -> str | None:
    """The form's ``subscription`` (None: the queue's own settings), checked."""
    name = request.admin_form.get("subscription", "").strip()
    if not name:
        return None
    if not _SUBSCRIPTION.fullmatch(name):
        raise InvalidFields({"subscription": PATTERN_WORDS[SUBSCRIPTION_PATTERN]})
    return name


def _back(request):
    meta = request.context.meta
    return HTTPSeeOther(location=request.route_path("admin.queue", name=meta.name) + "#flow")


@view_config(
    route_name="admin.flow",
    request_method="POST",
    permission=Permission.MANAGE,
    renderer="queuey.admin:templates/queue.jinja2",
    require_csrf=True,
)
def change_limits(request):
    meta = request.context.meta
    form = request.admin_form
    settings = request.services.flow_settings
    subscription = None
    try:
        subscription = subscription_of(request)
        names = QUEUE_FORM if subscription is None else SUBSCRIPTION_FORM
        given, errors = changed_fields(form, names)
        if errors:
            raise InvalidFields(errors)
        if subscription is None:
            settings.change_queue(meta, given)
        elif given:
            settings.change_subscription(meta, subscription, given)
    except InvalidFields as exc:
        request.response.status = 400
        names = SUBSCRIPTION_FORM if form.get("subscription", "").strip() else QUEUE_FORM
        shown = {key: form.get(key, "") for key in form if key.startswith("shown.")}
        values = {name: form.get(name, "").strip() for name in names}
        values["subscription"] = form.get("subscription", "").strip()
        return queue_page(request, meta, flow_form={**shown, **values}, flow_errors=exc.errors)
    whose = f"subscription {subscription}" if subscription else f"queue {meta.name}"
    if given:
        request.session.flash(f"Changed the flow limits of {whose}: {', '.join(sorted(given))}.")
    else:
        request.session.flash(f"Nothing changed in the flow limits of {whose}.")
    return _back(request)


@view_config(
    route_name="admin.pause",
    request_method="POST",
    permission=Permission.MANAGE,
    require_csrf=True,
)
@view_config(
    route_name="admin.resume",
    request_method="POST",
    permission=Permission.MANAGE,
    require_csrf=True,
)
def pause_or_resume(request):
    meta = request.context.meta
    pausing = request.matched_route.name == "admin.pause"
    try:
        subscription = subscription_of(request)
    except InvalidFields as exc:
        request.session.flash("; ".join(exc.errors.values()), "error")
        return _back(request)
    settings = request.services.flow_settings
    (settings.pause if pausing else settings.resume)(meta, subscription)
    if subscription is None and pausing:
        done = f"Paused posting to queue {meta.name}: posts are refused until resumed."
    elif subscription is None:
        done = f"Resumed posting to queue {meta.name}."
    elif pausing:
        done = f"Paused subscription {subscription}: it hands out nothing until resumed."
    else:
        done = f"Resumed subscription {subscription}."
    request.session.flash(done)
    return _back(request)
