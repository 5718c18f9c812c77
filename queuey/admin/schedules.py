"""The schedules page: the application's schedules, a create form, pause,
resume and delete (after typing the name).

A door only: the form's fields become the body ``POST /schedules`` takes
(:func:`create_fields`) and go to :meth:`queuey.core.schedules.Schedules.create`,
whose :class:`~queuey.core.messages.InvalidFields` are shown next to the
fields they name. Times are shown in the schedule's own time zone, the one
its cron fields are read in, with the distance from now.
"""

from __future__ import annotations

import functools
import re

from queuey import jsonio
from queuey.admin.errors import refusal_page
from queuey.admin.helpers import admin_view, application_name, done
from queuey.core import cron
from queuey.core.messages import InvalidFields
from queuey.core.schedules import ScheduleConflict, TooManySchedules
from queuey.errors import ScheduleExists, ScheduleNotFound
from queuey.ids import MICROS
from queuey.model.schedules import MISSED_POLICIES, NAME
from queuey.web.params import PayloadTooLarge

#: The create form's fields about the schedule, in the API's names.
SCHEDULE_FIELDS = ("name", "queue", "cron", "interval", "timezone", "start", "end", "missed")
#: The template's fields (``message`` of the API's body), as the form names them.
MESSAGE_FIELDS = ("body", "partition", "partition_key", "ttl", "priority", "delay", "attributes")
#: Fields that hold numbers: sent as numbers when the text is a plain integer
#: (the core refuses anything else, naming the field).
NUMBER_FIELDS = {"interval", "start", "end", "partition", "ttl", "priority", "delay"}
#: Fields that hold a time: seconds since the epoch or an ISO 8601 time.
TIME_FIELDS = {"start", "end"}
#: Fields that hold JSON text in the form.
JSON_FIELDS = {"body", "attributes"}
_INTEGER = re.compile(r"-?[0-9]{1,18}")
#: Queue names offered as suggestions in the form (the field takes any name).
SUGGESTED_QUEUES = 100


def create_fields(form: dict[str, str], max_size: int) -> tuple[dict, dict[str, str]]:
    """The ``POST /schedules`` body a create form means, and the form's own errors.

    Empty fields are left out (the API's defaults apply); a plain integer
    becomes a number; ``start`` and ``end`` may also be ISO 8601 times;
    ``body`` and ``attributes`` are JSON text, parsed with the API's limits
    (``max_size`` bytes, depth, number sizes).
    """
    fields: dict = {}
    message: dict = {}
    errors: dict[str, str] = {}
    zone = form.get("timezone", "").strip() or "UTC"
    for name in (*SCHEDULE_FIELDS, *MESSAGE_FIELDS):
        text = form.get(name, "").strip()
        if not text:
            continue
        value: object = text
        if name in JSON_FIELDS:
            raw = text.encode("utf-8")
            try:
                if len(raw) > max_size:
                    raise PayloadTooLarge(name, f"larger than {max_size} bytes")
                value = jsonio.loads(raw)
            except (PayloadTooLarge, jsonio.InvalidJSON, jsonio.NotJSON) as exc:
                errors[name] = str(exc)
                continue
        elif name in NUMBER_FIELDS and _INTEGER.fullmatch(text):
            value = int(text)
        elif name in TIME_FIELDS:
            try:
                value = cron.instant(text, zone)
            except ValueError as exc:
                errors[name] = str(exc)
                continue
        (message if name in MESSAGE_FIELDS else fields)[name] = value
    if "body" not in message and "body" not in errors:
        errors["body"] = "give the message's body, as JSON"
    fields["message"] = message
    return fields, errors


def form_field(key: str) -> str:
    """The form field an error of the core names (``message.body`` -> ``body``)."""
    return key.removeprefix("message.").removeprefix("message").lstrip(".") or "body"


@admin_view("admin.schedules", template="schedules")
def page(request, values=None, errors=None, status: int = 200):
    """The page's values: every schedule, and the create form (kept when refused)."""
    app = application_name(request)
    request.response.status = status
    queues = request.storage.list_queues(app, SUGGESTED_QUEUES, None)
    return {
        "schedules": sorted(request.services.schedules.list(app), key=lambda s: s.name),
        "queues": [meta.name for meta in queues],
        "values": {"timezone": "UTC", "missed": "latest", "body": "{}", **(values or {})},
        "errors": errors or {},
        "missed_policies": MISSED_POLICIES,
        "now": request.clock.now_micros() / MICROS,
        "confirm": None,
    }


def missing(request, name: str):
    """The 404 page for a schedule name (any text: the page escapes it)."""
    return refusal_page(request, ScheduleNotFound(name if len(name) <= 64 else name[:64] + "..."))


@admin_view("admin.schedules", "POST", "schedules")
def create_schedule(request):
    form = {name: request.admin_form.get(name, "") for name in (*SCHEDULE_FIELDS, *MESSAGE_FIELDS)}
    fields, errors = create_fields(form, request.services.settings.max_message_size)
    if errors:
        return page(request, form, errors, status=400)
    try:
        schedule = request.services.schedules.create(application_name(request), fields)
    except (InvalidFields, ScheduleExists) as exc:  # 400, 409
        errors = {form_field(k): v for k, v in exc.errors_by_field().items()}
        return page(request, form, errors, status=exc.status)
    except TooManySchedules as exc:
        return page(request, form, {"name": str(exc)}, status=exc.status)
    return done(request, f"Created schedule {schedule.name}.", "admin.schedules")


def one_schedule(view):
    """A view of the schedule the path names, called as ``view(request, name,
    **given)``: a name no schedule can have, or no schedule of that name, is
    the 404 page."""

    @functools.wraps(view)
    def named(request, **given):
        name = request.matchdict["schedule"]
        if not NAME.match(name):
            return missing(request, name)
        try:
            return view(request, name, **given)
        except ScheduleNotFound:
            return missing(request, name)

    return named


@admin_view("admin.schedule_pause", "POST")
@admin_view("admin.schedule_resume", "POST")
@one_schedule
def pause_or_resume(request, name: str):
    schedules = request.services.schedules
    pausing = request.matched_route.name == "admin.schedule_pause"
    try:
        (schedules.pause if pausing else schedules.resume)(application_name(request), name)
    except InvalidFields as exc:  # resuming a schedule whose queue is gone
        return done(request, f"Schedule {name} was not resumed: {exc}", "admin.schedules", "error")
    except ScheduleConflict as exc:
        return done(request, f"Schedule {name} was not changed: {exc}", "admin.schedules", "error")
    said = f"{'Paused' if pausing else 'Resumed'} schedule {name}."
    return done(request, said, "admin.schedules")


@admin_view("admin.schedule_delete", template="schedules")
@one_schedule
def confirm_delete(request, name: str, error: str | None = None, status: int = 200):
    schedule = request.services.schedules.get(application_name(request), name)
    request.response.status = status
    return {"confirm": schedule, "error": error}


@admin_view("admin.schedule_delete", "POST", "schedules")
@one_schedule
def delete_schedule(request, name: str):
    if request.admin_form.get("confirm", "") != name:
        return confirm_delete(request, error="Type the schedule's name to confirm.", status=400)
    request.services.schedules.delete(application_name(request), name)
    return done(request, f"Deleted schedule {name}.", "admin.schedules")
