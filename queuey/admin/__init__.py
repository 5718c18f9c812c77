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

#: The routes' contexts (:mod:`queuey.admin.resources`).
_ADMIN = "queuey.admin.resources.AdminContext"
_QUEUE = "queuey.admin.resources.AdminQueueContext"
#: name, pattern, context factory. Every admin route starts with ``admin.``.
ROUTES = [
    ("admin.signin", "/admin/signin", "queuey.admin.resources.SignInContext"),
    ("admin.signout", "/admin/signout", _ADMIN),
    ("admin.queues", "/admin/", _ADMIN),
    ("admin.new_queue", "/admin/new", _ADMIN),
    ("admin.groups", "/admin/groups", _ADMIN),
    ("admin.queue", "/admin/queue/{name}", _QUEUE),
    *(
        (f"admin.{page}", f"/admin/queue/{{name}}/{page}", _QUEUE)
        for page in "measure messages post purge delete dead redrive flow pause resume".split()
    ),
    ("admin.message", "/admin/queue/{name}/messages/{message}", _QUEUE),
    ("admin.schedules", "/admin/schedules", _ADMIN),
    *(
        (f"admin.schedule_{action}", f"/admin/schedules/{{schedule}}/{action}", _ADMIN)
        for action in ("pause", "resume", "delete")
    ),
    # Last: any other path under /admin gets the HTML 404 page, not the API's JSON.
    ("admin.unknown", "/admin/*rest", _ADMIN),
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
    # message (percent-encoding takes up to 3 bytes a byte), and the
    # new-schedule form's, which carries its message's body too.
    for route in ("admin.post", "admin.schedules"):
        add_body_limit(config, route, 3 * settings.max_message_size + settings.max_form_size)

    config.include("pyramid_jinja2")
    config.add_static_view("admin/static", "queuey.admin:static", cache_max_age=3600)
    config.add_route("admin.bare", "/admin")
    for name, pattern, factory in ROUTES:
        config.add_route(name, pattern, factory=factory)
    config.include("queuey.admin.errors")
    config.include("queuey.admin.helpers")
    config.scan("queuey.admin")
