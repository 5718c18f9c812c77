"""Every flow setting of :data:`queuey.model.flow.FIELDS` reaches every door:
the REST schema and answers in ``/openapi.json``, the client's records and
calls, the options of ``queuey flow set`` and the admin page's forms, each
with the table's type and bounds. Run again with two settings added to the
table alone (``tests/model/flow_extra_fields.py``), the same checks pass for
them: a new setting needs no door edited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from queuey.admin.flow import form_value
from queuey.cli import build_parser
from queuey.cli.flow import set_fields
from queuey.client.flow import FlowCalls, QueueFlow, SubscriptionFlow
from queuey.model.flow import FIELDS, FlowField, limits_of
from tests.admin.conftest import ADMIN_SETTINGS, csrf_of, sign_in
from tests.web.calls import create

ROOT = Path(__file__).resolve().parents[2]
#: kind -> (a JSON value, its form/option text)
SAMPLES = {"flag": (True, "on"), "rate": (2.5, "2.5"), "count": (7, "7")}
_IDS = [f"{f.resource}.{f.name}" for f in FIELDS]


def sample(field: FlowField) -> tuple[Any, str]:
    if field.kind == "choice":
        return field.values[-1], field.values[-1]
    return SAMPLES[field.kind]


@pytest.fixture
def admin(make_app, sqlite_storage, wrap_app):
    app = wrap_app(make_app(sqlite_storage, **ADMIN_SETTINGS))
    sign_in(app)
    return app


def _resolve(doc: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


@pytest.mark.parametrize("field", FIELDS, ids=_IDS)
def test_openapi_states_the_field_with_its_type_and_bounds(admin, field):
    doc = admin.get("/openapi.json").json
    path = (
        "/queue/{name}"
        if field.resource == "queue"
        else "/queue/{name}/subscriptions/{subscription}"
    )
    body = doc["paths"][path]["put"]["requestBody"]["content"]["application/json"]["schema"]
    given = _resolve(doc, body)["properties"][field.name]
    assert field.help in given["description"]
    types = {"flag": "boolean", "rate": "number", "count": "integer", "choice": "string"}
    assert given["type"] == types[field.kind]
    if field.kind in ("rate", "count"):
        assert (given["minimum"], given["maximum"]) == (0, field.high)
    if field.places is not None:
        assert given["multipleOf"] == 10.0**-field.places
    if field.kind == "choice":
        assert given["enum"] == list(field.values)
    answer = "QueueFlowInfo" if field.resource == "queue" else "SubscriptionFlowInfo"
    assert field.name in doc["components"]["schemas"][answer]["required"]


class _Recorded(FlowCalls):
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def _request(self, method: str, path: str, **kwargs: Any) -> dict:
        self.sent.append(kwargs.get("json") or {})
        return {"flow": {"queue": {}, "subscriptions": {}}}


@pytest.mark.parametrize("field", FIELDS, ids=_IDS)
def test_the_client_sends_and_reads_the_field(field):
    value, _ = sample(field)
    record = QueueFlow if field.resource == "queue" else SubscriptionFlow
    assert getattr(record.from_json({field.name: value}), field.name) == value
    assert getattr(record(), field.name) == field.default
    client = _Recorded()
    if field.resource == "queue":
        client.set_queue_flow("q", **{field.name: value})
    else:
        client.set_subscription_flow("q", "s", **{field.name: value})
    assert client.sent == [{field.name: value}]


@pytest.mark.parametrize("field", FIELDS, ids=_IDS)
def test_the_cli_has_an_option_of_the_fields_type(field):
    value, text = sample(field)
    where = [] if field.resource == "queue" else ["--subscription", "s"]
    option = "--" + field.name.replace("_", "-")
    if field.switch:  # changed by "queuey flow pause" and "resume"
        with pytest.raises(SystemExit):
            build_parser().parse_args(["flow", "set", "q", *where, option, text])
        args = build_parser().parse_args(["flow", "pause", "q", *where])
        assert args.action == "pause"
        return
    args = build_parser().parse_args(["flow", "set", "q", *where, option, text])
    assert set_fields(args) == {field.name: value}
    if field.kind in ("rate", "count"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["flow", "set", "q", *where, option, "-1"])


@pytest.mark.parametrize("field", FIELDS, ids=_IDS)
def test_the_admin_page_has_a_form_field_for_it(admin, field):
    create(admin, "orders")
    page = admin.get("/admin/queue/orders")
    value, text = sample(field)
    if field.switch:  # a pause has its own button
        assert field not in limits_of(field.resource)
        assert page.html.select_one("#posting-form button") is not None
        return
    assert form_value(field, text) == value
    if field.resource == "queue":
        assert field.name in page.forms["queue-flow-form"].fields
        sent = {field.name: text, f"shown.{field.name}": ""}
        answer = admin.post("/admin/queue/orders/flow", {"csrf_token": csrf_of(page), **sent})
        assert answer.status_int in (303, 400)  # the core's rules are not the form's
    else:
        other = page.html.select_one("tr.other")
        assert other.select_one(f"input[name={field.name}]") is not None


def test_a_field_added_to_the_table_alone_reaches_every_door():
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-p",
            "tests.model.flow_extra_fields",
            "-q",
            "-rA",
            "-k",
            "max_bytes or ack_rate",
            str(Path(__file__).relative_to(ROOT)),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = [line for line in done.stdout.splitlines() if line.startswith("PASSED")]
    assert len(passed) == 8, done.stdout[-4000:]
