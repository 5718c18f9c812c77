"""Queue pages: the list with figures, creating, one queue's page, purge and delete.

Forms go through the API's own models (``request.models``) and the core's
queue rules and lifecycle (:mod:`queuey.core.queues`), so a queue the admin
page creates is one the API would have created from the same fields.
"""

from __future__ import annotations

from typing import get_args

from pyramid.httpexceptions import HTTPSeeOther

from queuey.admin.chart import charts
from queuey.admin.helpers import admin_view, application_name, done, filled, flow_limit
from queuey.core.queues import InvalidQueue, queue_from
from queuey.errors import QueueExists, QueueNotFound
from queuey.model import UPDATABLE_QUEUE_FIELDS, QueueMeta
from queuey.model.flow import NO_SUBSCRIPTION_FLOW, limits_of, queue_flow, subscription_flows
from queuey.model.flowfield import FlowRecord
from queuey.web.params import InvalidParameters, query, validate

#: Queues per page of the list.
PAGE = 50
#: Most queues measured while rendering one list page (the others show "-"
#: until the overview's refresher reaches them).
MEASURE_ON_PAGE = 20
#: The create form's fields, in the API's names: the name and every setting
#: but the SQS attributes.
QUEUE_FIELDS = ("queue_name", *(f for f in UPDATABLE_QUEUE_FIELDS if f != "attributes"))
#: The create form's fields whose options the model lists.
CHOICE_FIELDS = ("type", "consistency")
#: Seconds since this process last throttled a queue for the list to say "throttled".
THROTTLED_SECONDS = 60


def figures_of(request, meta: QueueMeta):
    """The queue's cached figures, measured now if it has none yet."""
    overview = request.services.overview
    return overview.figures(meta.application, meta.name) or overview.refresh(meta)


def _limits_set(flow: FlowRecord) -> list[str]:
    """The limits a record has on (a burst sizes its rate's; a choice or a
    pause is not a limit)."""
    return [
        field.name
        for field, value in flow.settings()
        if value and not (field.switch or field.bucket_of or field.kind == "choice")
    ]


def form_text(flow: FlowRecord) -> dict[str, str]:
    """Each setting's value as its flow form field shows it (and
    :mod:`queuey.admin.flow` reads it back)."""
    return {
        field.name: ("on" if value else "")
        if field.kind == "flag"
        else (value if field.kind == "choice" else flow_limit(value))
        for field, value in flow.settings()
    }


def flow_state(request, meta: QueueMeta) -> dict[str, list[str]]:
    """What the list says of a queue's flow control, from its metadata and
    this process's counters (no storage call): what is ``paused`` (posting,
    subscriptions), which limits are set, whether it was ``throttled`` lately."""
    flow = queue_flow(meta)
    subscriptions = subscription_flows(meta)
    paused = ["posting"] if flow.paused else []
    paused += [f"subscription {name}" for name, sub in subscriptions.items() if sub.paused]
    limits = _limits_set(flow)
    limits += [
        f"{name}: {field}" for name, sub in subscriptions.items() for field in _limits_set(sub)
    ]
    throttled = request.services.metrics.throttled_within(
        meta.application, meta.name, THROTTLED_SECONDS
    )
    return {"paused": paused, "limits": limits, "throttled": ["throttled"] if throttled else []}


@admin_view("admin.queues", template="queues")
def queue_list(request):
    app = application_name(request)
    after = query(request).get("after") or None
    params = validate(
        request.models.list_queues, {"limit": PAGE, **({"offset": after} if after else {})}
    )
    metas = request.storage.list_queues(app, params.limit, params.offset)
    overview = request.services.overview
    rows, measured = [], 0
    for meta in metas:
        figures = overview.figures(app, meta.name)
        if figures is None and measured < MEASURE_ON_PAGE:
            measured += 1
            try:
                figures = overview.refresh(meta)
            except QueueNotFound:  # deleted since it was listed
                continue
        rows.append((meta, figures, flow_state(request, meta)))
    return {
        "rows": rows,
        "after": after,
        "next_after": metas[-1].name if len(metas) == PAGE else None,
        "now": request.clock.now_micros(),
    }


@admin_view("admin.new_queue", template="queue_new")
def new_queue_form(request, values=None, errors=None):
    """The create form (kept with its errors when refused)."""
    model_fields = request.models.create_queue.model_fields
    defaults = {
        name: ("" if model_fields[name].default is None else str(model_fields[name].default))
        for name in QUEUE_FIELDS
    }
    return {
        "values": {**defaults, **(values or {})},
        "errors": errors or {},
        "choices": {name: get_args(model_fields[name].annotation) for name in CHOICE_FIELDS},
        "max_partitions": request.services.settings.max_partitions,
    }


@admin_view("admin.new_queue", "POST", "queue_new")
def create_queue(request):
    given = filled(request, QUEUE_FIELDS)
    try:
        params = validate(request.models.create_queue, given)
        now = request.clock.now_micros()
        meta = request.services.queues.create(queue_from(params, application_name(request), now))
    except (InvalidParameters, InvalidQueue, QueueExists) as exc:  # 400, 400, 409
        request.response.status = exc.status
        return new_queue_form(request, given, exc.errors_by_field())
    request.services.overview.refresh(meta)
    return done(request, f"Created queue {meta.name}.", "admin.queue", name=meta.name)


@admin_view("admin.queue", template="queue")
def queue_page(request, **extra):
    """The values of a queue's page (``extra``: a post form's or a flow
    form's values and errors: ``post``/``post_errors``, ``flow_form``/``flow_errors``)."""
    meta = request.context.meta
    overview = request.services.overview
    figures = figures_of(request, meta)
    history = overview.history(meta.application, meta.name)
    now = request.clock.now_micros()
    filters = {
        s.subscription: s.filter.text
        for s in request.services.subscriptions.settings(meta)
        if s.filter
    }
    flows = subscription_flows(meta)
    named = {s.subscription for s in figures.subscriptions} | set(filters) | set(flows)
    return {
        "meta": meta,
        "figures": figures,
        "filters": filters,
        "queue_flow": queue_flow(meta),
        "subscription_flows": [(n, flows.get(n, NO_SUBSCRIPTION_FLOW)) for n in sorted(named)],
        "flow_form": extra.get("flow_form", {}),
        "flow_errors": extra.get("flow_errors", {}),
        "flow_fields": {resource: limits_of(resource) for resource in ("queue", "subscription")},
        "flow_text": form_text,
        "charts": charts(history, now),
        "now": now,
        "post": extra.get("post", {"body": '{\n  "hello": "world"\n}'}),
        "post_errors": extra.get("post_errors", {}),
    }


@admin_view("admin.measure", "POST")
def measure(request):
    meta = request.context.meta
    request.services.overview.refresh(meta)
    return HTTPSeeOther(location=request.route_path("admin.queue", name=meta.name))


@admin_view("admin.purge", template="confirm")
@admin_view("admin.delete", template="confirm")
def confirm_form(request, error: str | None = None):
    meta = request.context.meta
    action = request.matched_route.name.removeprefix("admin.")
    return {"meta": meta, "figures": figures_of(request, meta), "action": action, "error": error}


@admin_view("admin.purge", "POST", "confirm")
@admin_view("admin.delete", "POST", "confirm")
def purge_or_delete(request):
    meta = request.context.meta
    action = request.matched_route.name.removeprefix("admin.")
    if request.admin_form.get("confirm", "") != meta.name:
        request.response.status = 400
        return confirm_form(request, "Type the queue's name to confirm.")
    queues, overview = request.services.queues, request.services.overview
    if action == "purge":
        queues.purge(meta)
        overview.refresh(queues.get(meta.application, meta.name))
        said = f"Purged queue {meta.name}: its messages are gone."
        return done(request, said, "admin.queue", name=meta.name)
    queues.delete(meta)
    overview.forget(meta.application, meta.name)
    return done(request, f"Deleted queue {meta.name}.", "admin.queues")
