"""A queue's dead letters and their redrive.

The page of queue ``jobs`` shows the messages of its dead-letter queue
(``jobs-dead`` unless the queue names another), newest first, each with where
it came from, its attempts and last error; redrive moves the oldest back
through :meth:`queuey.core.workqueues.WorkQueues.redrive`, as the API's
``POST /queue/{name}/redrive`` on the dead-letter queue would.
"""

from __future__ import annotations

from queuey.admin.helpers import admin_view, done, filled
from queuey.admin.messages import browsed
from queuey.admin.queues import figures_of
from queuey.errors import QueueNotFound
from queuey.model.work import own_attributes
from queuey.web.params import InvalidParameters, validate


def _dead_queue(request, meta):
    try:
        return request.services.queues.get(meta.application, meta.dead_letter_name)
    except QueueNotFound:
        return None


@admin_view("admin.dead", template="dead_letters")
def dead_letters(request):
    meta = request.context.meta
    dead = _dead_queue(request, meta)
    letters, before, older = browsed(request, dead)
    return {
        "meta": meta,
        "dead": dead,
        "dead_figures": figures_of(request, dead) if dead is not None else None,
        "letters": [(letter, own_attributes(letter)) for letter in letters],
        "before": before,
        "older": older,
    }


@admin_view("admin.redrive", "POST")
def redrive(request):
    meta = request.context.meta
    try:
        params = validate(request.models.redrive, filled(request, ("limit",)))
    except InvalidParameters as exc:
        said = f"Nothing moved: limit {exc.errors.get('limit', exc)}."
        return done(request, said, "admin.dead", "error", name=meta.name)
    dead = _dead_queue(request, meta)
    if dead is None:
        said = "There are no dead letters to move."
        return done(request, said, "admin.dead", "error", name=meta.name)
    result = request.services.workqueues.redrive(dead, params.limit)
    overview = request.services.overview
    overview.refresh(dead)
    overview.refresh(meta)
    for message_id, reason in list(result.skipped.items())[:10]:
        request.session.flash(f"Kept {message_id}: {reason}.", "error")
    said = (
        f"Redrive: {result.moved} moved back, {result.reposted} posted anew, "
        f"{len(result.skipped)} left in place."
    )
    return done(request, said, "admin.dead", name=meta.name)
