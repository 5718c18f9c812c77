"""/openapi.json describes exactly the routes the app serves."""

import pytest

from queuey.web import ROUTES


@pytest.fixture
def sqlite_app(make_app, sqlite_storage, wrap_app):
    return wrap_app(make_app(sqlite_storage))


def served(wsgi_app) -> set[tuple[str, str]]:
    """(path pattern, method) for every view the app registered on a route."""
    patterns = {name: pattern for name, pattern, _ in ROUTES}
    found = set()
    for item in wsgi_app.registry.introspector.get_category("views"):
        view = item["introspectable"]
        route = view["route_name"]
        if route not in patterns:
            continue
        methods = view["request_methods"] or ("GET",)
        methods = (methods,) if isinstance(methods, str) else methods
        for method in methods:
            if method != "HEAD":
                found.add((patterns[route], method.lower()))
    return found


def test_every_route_is_documented_and_everything_documented_exists(sqlite_app):
    doc = sqlite_app.get("/openapi.json").json
    assert doc["openapi"].startswith("3.")
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    actual = served(sqlite_app.app)
    assert actual - documented == set(), "served but not documented"
    assert documented - actual == set(), "documented but not served"
