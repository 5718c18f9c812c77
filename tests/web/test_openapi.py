"""/openapi.json describes exactly the routes the app serves."""

import pytest

from queuey.web import ROUTES
from queuey.web.operations import OPERATIONS


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


def test_the_operation_table_names_each_operation_once():
    named = [(operation.route, operation.method) for operation in OPERATIONS]
    assert len(named) == len(set(named))


def test_work_queue_routes_and_fields_are_described(sqlite_app):
    doc = sqlite_app.get("/openapi.json").json
    schemas = doc["components"]["schemas"]
    reserve = doc["paths"]["/queue/{name}/reserve"]["post"]
    body = reserve["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert (body["wait"]["minimum"], body["wait"]["maximum"]) == (0, 20)
    assert (body["limit"]["minimum"], body["limit"]["maximum"]) == (1, 100)
    assert body["subscription"]["pattern"] == "^[A-Za-z0-9_-]{1,50}$"
    assert set(reserve["responses"]) >= {"200", "400", "401", "403", "404", "405", "503"}
    assert reserve["responses"]["405"]["headers"]["Allow"]["required"] is True
    ack = doc["paths"]["/queue/{name}/ack"]["post"]["requestBody"]
    receipts = ack["content"]["application/json"]["schema"]["properties"]["receipts"]
    assert (receipts["minItems"], receipts["maxItems"]) == (1, 100)
    entry = schemas["BatchEntry"]["properties"]
    assert entry["attributes"]["maxProperties"] == 10
    assert entry["priority"]["maximum"] == 9 and entry["dedup_id"]["maxLength"] == 128
    assert "attributes" in schemas["Message"]["properties"]
    assert {"priority", "attempts", "receipt"} <= set(schemas["ReservedMessage"]["required"])
    create = doc["paths"]["/queue"]["post"]["requestBody"]["content"]["application/json"]
    assert {"visibility_timeout", "max_attempts", "dead_letter_queue", "delay"} <= set(
        create["schema"]["properties"]
    )
    assert "dead_letter_queue" in schemas["Queue"]["required"]
