"""A queue's dead letters and their redrive.

The page of queue ``jobs`` shows the messages of its dead-letter queue
(``jobs-dead`` unless the queue names another), newest first, each with where
it came from, its attempts and last error; redrive moves the oldest back
through :meth:`queuey.core.workqueues.WorkQueues.redrive`, as the API's
``POST /queue/{name}/redrive`` on the dead-letter queue would.
"""

from __future__ import annotations

from pyramid.httpexceptions import HTTPSeeOther
from pyramid.view import view_config

from queuey.admin.messages import PAGE, read_page
from queuey.core.access import Permission
from queuey.errors import QueueNotFound
from queuey.model.work import own_attributes
from queuey.web.params import InvalidParameters, query, validate
from queuey.web.responses import timestamp_json


def _dead_queue(request, meta):
    try:
        return request.services.queues.get(meta.application, meta.dead_letter_name)
    except QueueNotFound:
        return None


@view_config(
    route_name="admin.dead",
    request_method="GET",
    permission=Permission.MANAGE,
    renderer="queuey.admin:templates/dead_letters.jinja2",
)
def dead_letters(request):
    meta = request.context.meta
    dead = _dead_queue(request, meta)
    before = query(request).get("before") or None
    letters = read_page(request, dead, before) if dead is not None else []
    figures = None
    if dead is not None:
        overview = request.services.overview
        figures = overview.figures(dead.application, dead.name) or overview.refresh(dead)
    return {
        "meta": meta,
        "dead": dead,
        "dead_figures": figures,
        "letters": [(letter, own_attributes(letter)) for letter in letters],
        "before": before,
        "older": timestamp_json(letters[-1].timestamp) if len(letters) == PAGE else None,
        "limit_error": None,
    }


@view_config(
    route_name="admin.redrive",
    request_method="POST",
    permission=Permission.MANAGE,
    require_csrf=True,
)
def redrive(request):
    meta = request.context.meta
    target = request.route_path("admin.dead", name=meta.name)
    given = request.admin_form.get("limit", "").strip()
    try:
        params = validate(request.models.redrive, {"limit": given} if given else {})
    except InvalidParameters as exc:
        request.session.flash(f"Nothing moved: limit {exc.errors.get('limit', exc)}.", "error")
        return HTTPSeeOther(location=target)
    dead = _dead_queue(request, meta)
    if dead is None:
        request.session.flash("There are no dead letters to move.", "error")
        return HTTPSeeOther(location=target)
    result = request.services.workqueues.redrive(dead, params.limit)
    overview = request.services.overview
    overview.refresh(dead)
    overview.refresh(meta)
    request.session.flash(
        f"Redrive: {result.moved} moved back, {result.reposted} posted anew, "
        f"{len(result.skipped)} left in place."
    )
    for message_id, reason in list(result.skipped.items())[:10]:
        request.session.flash(f"Kept {message_id}: {reason}.", "error")
    return HTTPSeeOther(location=target)
