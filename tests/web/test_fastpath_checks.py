"""What the fast path cannot reproduce stops the app at start-up.

A ``NewRequest`` subscriber, predicates on a served route, a second view a
served method reaches, a view predicate beyond the method,
``pyramid.debug_routematch`` or another request factory than the router's:
``queuey.main`` (or :class:`~queuey.web.fastpath.FastPath`) raises
:class:`~queuey.errors.ConfigurationError` naming each. What it reproduces is
checked in ``test_fastpath.py``.
"""

from __future__ import annotations

import pytest
from pyramid.config import Configurator
from pyramid.events import NewRequest
from pyramid.response import Response
from webob import Request

from queuey.app import QueueyRequest
from queuey.errors import ConfigurationError
from queuey.web.fastpath import FastPath, served_views

pytestmark = pytest.mark.unit


def rewrite(event) -> None:
    """A NewRequest subscriber: it could send a request anywhere."""


def served_route_with_a_predicate(config: Configurator) -> None:
    config.add_route("queue_ack", "/queue/{name}/ack", request_param="via")


def second_post_view(config: Configurator) -> None:
    config.add_view(
        lambda request: Response("other"),
        route_name="queue_batch",
        request_method="POST",
        header="X-Other",
    )


@pytest.mark.parametrize(
    ("configure", "named"),
    [
        (
            lambda config: config.add_subscriber(rewrite, NewRequest),
            "NewRequest subscriber tests.web.test_fastpath_checks.rewrite",
        ),
        (served_route_with_a_predicate, "route 'queue_ack' has predicates .*request_param via"),
        (
            second_post_view,
            "POST on route 'queue_batch' must reach exactly one view, it reaches: .*post_batch",
        ),
    ],
)
def test_what_the_fast_path_cannot_reproduce_stops_the_app(
    make_app, sqlite_storage, configure, named
):
    config = Configurator()
    configure(config)
    with pytest.raises(ConfigurationError, match=named) as refused:
        make_app(sqlite_storage, config=config)
    assert refused.value.key == "fast path"


def test_debug_routematch_stops_the_app(make_app, sqlite_storage):
    with pytest.raises(ConfigurationError, match="pyramid.debug_routematch"):
        make_app(sqlite_storage, config=Configurator(settings={"pyramid.debug_routematch": "1"}))


def test_a_request_factory_other_than_the_routers_is_refused(make_app, sqlite_storage):
    wsgi = make_app(sqlite_storage)
    with pytest.raises(ConfigurationError, match="request factory webob.request.Request"):
        FastPath(wsgi.router, Request)
    assert FastPath(wsgi.router, QueueyRequest).route_of(Request.blank("/queue/q", method="POST"))


def test_a_view_predicate_beyond_the_method_is_named():
    config = Configurator()
    config.add_route("r", "/r/{name}")
    config.add_view(lambda request: Response(), route_name="r", request_method="POST", header="X-Y")
    config.add_view(lambda request: Response(), route_name="r", request_method="GET", xhr=True)
    config.commit()
    views, problems = served_views(config.registry, [("r", "POST"), ("r", "GET"), ("r", "PUT")])
    assert set(views) == {("r", "POST"), ("r", "GET")}
    assert len(problems) == 3
    assert "has predicates the fast path does not decide: header X-Y" in problems[0]
    assert "has predicates the fast path does not decide: xhr = True" in problems[1]
    assert "PUT on route 'r' must reach exactly one view, it reaches: none" in problems[2]
