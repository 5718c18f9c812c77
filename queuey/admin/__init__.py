"""The admin pages at ``/admin/``: HTML for operators, on the same app as the API.

Operators sign in with an application name and key (:mod:`queuey.admin.session`)
and see that application's queues, messages, dead letters and consumer groups.
Every page is a Jinja2 template (``templates/``, autoescaped) rendered by
``pyramid_jinja2``; the little JavaScript there is lives in ``static/admin.js``
(the Content-Security-Policy refuses inline scripts). Every form posts a CSRF
token checked by Pyramid (``require_csrf=True`` on each admin POST view only:
the header-authenticated API takes no cookies and needs none).

Modules: :mod:`~queuey.admin.session` (sign-in and the session cookie),
:mod:`~queuey.admin.resources` (route contexts), :mod:`~queuey.admin.errors`
(HTML error pages and security headers), :mod:`~queuey.admin.helpers`
(formatting for templates), :mod:`~queuey.admin.chart` (the depth and rate
charts), and one module of views per page family: :mod:`~queuey.admin.auth`,
:mod:`~queuey.admin.queues`, :mod:`~queuey.admin.messages`,
:mod:`~queuey.admin.dead_letters`, :mod:`~queuey.admin.consumergroups`,
:mod:`~queuey.admin.schedules`, :mod:`~queuey.admin.flow` (the queue page's
flow control).
"""

from __future__ import annotations

from pyramid.csrf import SessionCSRFStoragePolicy

from queuey.admin.session import SignIns, session_factory, session_secret
from queuey.core.services import services_of
from queuey.server import maybe_one_of_several, shared_session_secret
from queuey.web.bodies import add_body_limit
from queuey.web.security import use_session_sign_ins

#: name, pattern, context factory. Every admin route starts with ``admin.``.
ROUTES = [
    ("admin.signin", "/admin/signin", "queuey.admin.resources.SignInContext"),
    ("admin.signout", "/admin/signout", "queuey.admin.resources.AdminContext"),
    ("admin.queues", "/admin/", "queuey.admin.resources.AdminContext"),
    ("admin.new_queue", "/admin/new", "queuey.admin.resources.AdminContext"),
    ("admin.groups", "/admin/groups", "queuey.admin.resources.AdminContext"),
    ("admin.queue", "/admin/queue/{name}", "queuey.admin.resources.AdminQueueContext"),
    ("admin.measure", "/admin/queue/{name}/measure", "queuey.admin.resources.AdminQueueContext"),
    ("admin.messages", "/admin/queue/{name}/messages", "queuey.admin.resources.AdminQueueContext"),
    ("admin.post", "/admin/queue/{name}/post", "queuey.admin.resources.AdminQueueContext"),
    ("admin.purge", "/admin/queue/{name}/purge", "queuey.admin.resources.AdminQueueContext"),
    ("admin.delete", "/admin/queue/{name}/delete", "queuey.admin.resources.AdminQueueContext"),
    ("admin.dead", "/admin/queue/{name}/dead", "queuey.admin.resources.AdminQueueContext"),
    ("admin.redrive", "/admin/queue/{name}/redrive", "queuey.admin.resources.AdminQueueContext"),
    ("admin.flow", "/admin/queue/{name}/flow", "queuey.admin.resources.AdminQueueContext"),
    ("admin.pause", "/admin/queue/{name}/pause", "queuey.admin.resources.AdminQueueContext"),
    ("admin.resume", "/admin/queue/{name}/resume", "queuey.admin.resources.AdminQueueContext"),
    ("admin.schedules", "/admin/schedules", "queuey.admin.resources.AdminContext"),
    (
        "admin.schedule_pause",
        "/admin/schedules/{schedule}/pause",
        "queuey.admin.resources.AdminContext",
    ),
    (
        "admin.schedule_resume",
        "/admin/schedules/{schedule}/resume",
        "queuey.admin.resources.AdminContext",
    ),
    (
        "admin.schedule_delete",
        "/admin/schedules/{schedule}/delete",
        "queuey.admin.resources.AdminContext",
    ),
    # Last: any other path under /admin gets the HTML 404 page, not the API's JSON.
    ("admin.unknown", "/admin/*rest", "queuey.admin.resources.AdminContext"),
]


def includeme(config) -> None:
    settings = services_of(config.registry).settings
    secret = session_secret(
        settings.admin_secret, shared=shared_session_secret(), alone=not maybe_one_of_several()
    )
    config.set_session_factory(
        session_factory(
            secret, secure=settings.admin_secure_cookie, seconds=settings.admin_session_seconds
        )
    )
    config.set_csrf_storage_policy(SessionCSRFStoragePolicy())
    use_session_sign_ins(config, SignIns(secret))
    # request.admin_form: a POSTed form's fields (queuey.app.QueueyRequest),
    # at most queuey.max_form_size, but the message form's, which carries a
    # message (percent-encoding takes up to 3 bytes a byte).
    add_body_limit(config, "admin.post", 3 * settings.max_message_size + settings.max_form_size)
    # The new-schedule form carries its message's body too.
    add_body_limit(
        config, "admin.schedules", 3 * settings.max_message_size + settings.max_form_size
    )

    config.include("pyramid_jinja2")
    config.add_static_view("admin/static", "queuey.admin:static", cache_max_age=3600)
    config.add_route("admin.bare", "/admin")
    for name, pattern, factory in ROUTES:
        config.add_route(name, pattern, factory=factory)
    config.include("queuey.admin.errors")
    config.include("queuey.admin.helpers")
    config.scan("queuey.admin")
