"""The queue page's flow control: pause and resume posting or a subscription,
and the queue's and each subscription's limits.

A door only: every change goes through
:class:`queuey.core.flowsettings.FlowSettings`, whose
:class:`~queuey.core.messages.InvalidFields` are shown next to the fields
they name. A form sends only the fields the operator changed (each field
carries the value the page showed, ``shown.<field>``), so two operators
changing different limits of one queue at once lose neither change.
An empty number field means no limit. The forms' fields are those of
:data:`queuey.model.flow.FIELDS` (a pause has its own button).
"""

from __future__ import annotations

import re
from typing import Any

from queuey.admin.helpers import admin_view, done
from queuey.admin.queues import queue_page
from queuey.core.messages import InvalidFields
from queuey.model.flow import limits_of
from queuey.model.flowfield import FlowField
from queuey.web.params import PATTERN_WORDS, SUBSCRIPTION_PATTERN

_SUBSCRIPTION = re.compile(SUBSCRIPTION_PATTERN)


def form_value(field: FlowField, text: str) -> Any:
    """A form field's text as the value :class:`FlowSettings` takes
    (``ValueError`` saying what the field wants)."""
    if field.kind == "flag":
        return text == "on"
    if field.kind == "choice":
        return text or field.default
    if not text:
        return 0
    try:
        return field.from_text(text)
    except ValueError:
        if field.kind == "rate":
            raise ValueError(
                "must be messages per second, e.g. 50 or 0.5 (empty: no limit)"
            ) from None
        raise ValueError("must be a whole number (empty: no limit)") from None


def changed_fields(form, fields: tuple[FlowField, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields among ``fields`` the form gives and whose text differs from
    what the page showed, as values; and the errors of those that do not parse."""
    given: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in fields:
        name = field.name
        text = form.get(name, "").strip()
        shown = form.get(f"shown.{name}")
        if shown is None and name not in form:
            continue  # not on the form (an unchecked box has its shown value)
        if shown is not None and text == shown.strip():
            continue
        try:
            given[name] = form_value(field, text)
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


def _back(request, message: str, queue: str = ""):
    name = request.context.meta.name
    return done(request, message, "admin.queue", queue, name=name, _anchor="flow")


@admin_view("admin.flow", "POST", "queue")
def change_limits(request):
    meta = request.context.meta
    form = request.admin_form
    settings = request.services.flow_settings
    subscription = None
    try:
        subscription = subscription_of(request)
        fields = limits_of("queue" if subscription is None else "subscription")
        given, errors = changed_fields(form, fields)
        if errors:
            raise InvalidFields(errors)
        if subscription is None:
            settings.change_queue(meta, given)
        elif given:
            settings.change_subscription(meta, subscription, given)
    except InvalidFields as exc:
        request.response.status = 400
        resource = "subscription" if form.get("subscription", "").strip() else "queue"
        shown = {key: form.get(key, "") for key in form if key.startswith("shown.")}
        values = {f.name: form.get(f.name, "").strip() for f in limits_of(resource)}
        values["subscription"] = form.get("subscription", "").strip()
        return queue_page(request, flow_form={**shown, **values}, flow_errors=exc.errors)
    whose = f"subscription {subscription}" if subscription else f"queue {meta.name}"
    if given:
        return _back(request, f"Changed the flow limits of {whose}: {', '.join(sorted(given))}.")
    return _back(request, f"Nothing changed in the flow limits of {whose}.")


@admin_view("admin.pause", "POST")
@admin_view("admin.resume", "POST")
def pause_or_resume(request):
    meta = request.context.meta
    pausing = request.matched_route.name == "admin.pause"
    try:
        subscription = subscription_of(request)
    except InvalidFields as exc:
        return _back(request, "; ".join(exc.errors.values()), "error")
    settings = request.services.flow_settings
    (settings.pause if pausing else settings.resume)(meta, subscription)
    if subscription is None and pausing:
        said = f"Paused posting to queue {meta.name}: posts are refused until resumed."
    elif subscription is None:
        said = f"Resumed posting to queue {meta.name}."
    elif pausing:
        said = f"Paused subscription {subscription}: it hands out nothing until resumed."
    else:
        said = f"Resumed subscription {subscription}."
    return _back(request, said)
