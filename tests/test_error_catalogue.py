"""The error catalogue (:data:`queuey.errors.CATALOGUE`): every refusal the
core makes is one entry, declared once by its exception class, and every
door maps every entry (REST, SQS, admin pages, command line), in its own words.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

import queuey
from queuey.admin.errors import PAGES
from queuey.cli import errors as cli_errors
from queuey.cli.errors import EXIT_LINES
from queuey.core import refusals
from queuey.core.quotas import Throttled, TooManyQueues
from queuey.errors import CATALOGUE, NAMED_BY_ERROR, Catalogued, QueueNotFound, StorageUnavailable
from queuey.sqs import protocol
from queuey.sqs.errors import KINDS, REFUSALS, SQSError, refusal
from queuey.web.errors import refused
from queuey.web.params import InvalidParameters, PayloadTooLarge
from tests.sqs.signing import sqs_json_call
from tests.support import SQS_SECRET

ROOT = Path(queuey.__file__).parent
DOORS = ("web", "sqs", "admin", "cli")

#: Exception classes of queuey/ that a door catches but that are no refusal of
#: the core, each with why.
NOT_CATALOGUED = {
    "SQSError": "the SQS door's own answer (its words for every entry)",
    "CommandError": "the command line's own failure, one line already",
    "ConfigurationError": "a bad setting at start-up, not a refusal of a request",
    "ClientError": "an answer a remote Queuey gave the client (its status says the entry)",
    "InvalidMessage": "the core's message rules: each door words it with its own field names",
    "BadLine": "a line of an import file (the command line's input)",
    "BadSpoolFile": "a producer's spool file read by the command line",
    "GroupsUnavailable": "the admin's consumer-group page without ZooKeeper: a page notice",
    "_Invalid": "an SQS policy's parser, answered as InvalidAttributeValue by the SQS door",
}


#: Modules with side effects on import (a worker's entry point, the WSGI
#: module that marks its process as one of several workers).
UNIMPORTED = re.compile(r"__main__$|^queuey\.wsgi$")


def _catalogued_classes() -> list[type[Catalogued]]:
    for info in pkgutil.walk_packages([str(ROOT)], "queuey."):
        if UNIMPORTED.search(info.name):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional driver (Spark, ZooKeeper) not installed
            continue
    found, todo = [], [Catalogued]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("queuey."):
            found.append(cls)
    return found


def sample(name: str) -> Catalogued:
    """An exception of entry ``name``, as the core raises it."""
    flow = {cls.entry.name: cls for cls in vars(refusals).values() if _is_entry_class(cls)}
    if name in flow:
        return flow[name]("max_length", f"refused by {name}", retry_after=3)
    if name == "throttled":
        return Throttled("app", 5, 2)
    if name == "too_many_queues":
        return TooManyQueues("app", 10)
    if name == "invalid_parameters":
        return InvalidParameters({"ttl": "must be an integer", "delay": "too long"})
    if name == "payload_too_large":
        return PayloadTooLarge("body", "the body is over 1024 bytes")
    if name == "storage_unavailable":
        return StorageUnavailable("test: down", retry_after=7)
    classes = {cls.entry.name: cls for cls in _catalogued_classes() if _is_entry_class(cls)}
    return classes[name]("jobs")


def _is_entry_class(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, Catalogued) and "entry" in vars(cls)


# -- every entry in every door -------------------------------------------------------
def test_every_entry_has_a_mapping_in_every_door():
    names = set(CATALOGUE)
    assert set(REFUSALS) == names, "SQS: queuey.sqs.errors.REFUSALS"
    assert set(PAGES) == names, "admin: queuey.admin.errors.PAGES"
    assert set(EXIT_LINES) == names, "command line: queuey.cli.errors.EXIT_LINES"
    # REST: the one view renders every entry from the catalogue itself.
    assert all(entry.name == name for name, entry in CATALOGUE.items())
    assert all(words.code in KINDS for words in REFUSALS.values())


def test_every_entry_is_declared_by_an_exception_class_and_every_class_has_one():
    classes = _catalogued_classes()
    declared = {cls.entry.name for cls in classes if _is_entry_class(cls)}
    assert declared == set(CATALOGUE)
    abstract = {"Catalogued", "ServiceError", "FlowRefused"}
    missing = [cls.__qualname__ for cls in classes if not hasattr(cls, "entry")]
    assert set(missing) <= abstract, missing


def _caught_names(tree: ast.AST) -> set[str]:
    """Names of exception classes a module catches, views or checks for."""
    names: set[str] = set()

    def add(node):
        if isinstance(node, ast.Tuple):
            for element in node.elts:
                add(element)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)

    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            add(node.type)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called == "isinstance" and len(node.args) == 2:
                add(node.args[1])
            if called == "exception_view_config" and node.args:
                add(node.args[0])
            for keyword in node.keywords:
                if called == "add_exception_view" and keyword.arg == "context":
                    add(keyword.value)
    return names


def _queuey_exceptions() -> dict[str, type[BaseException]]:
    _catalogued_classes()  # imports every module
    found, todo = {}, [Exception]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("queuey."):
            found.setdefault(cls.__name__, cls)
    return found


def test_every_exception_class_a_door_catches_is_catalogued():
    ours = _queuey_exceptions()
    caught: set[str] = set()
    for door in DOORS:
        for path in (ROOT / door).rglob("*.py"):
            caught |= _caught_names(ast.parse(path.read_text()))
    uncatalogued = {
        name
        for name in caught & set(ours)
        if not issubclass(ours[name], Catalogued)
        and not any(base.__name__ in NOT_CATALOGUED for base in ours[name].__mro__)
    }
    assert not uncatalogued, f"catalogue these or say why not: {sorted(uncatalogued)}"
    assert set(NOT_CATALOGUED) <= caught, "the list names only what a door catches"


# -- REST ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_rest_answers_every_entry_with_its_status_and_the_error_shape(name):
    exc = sample(name)
    response = refused(exc, None)
    entry = CATALOGUE[name]
    assert response.status_int == entry.status
    body = json.loads(response.body)
    assert body["status"] == "error" and body["error_msg"]
    if entry.field != NAMED_BY_ERROR:
        assert list(body["error_msg"]) == [entry.field]
    assert all(isinstance(text, str) and text for text in body["error_msg"].values())
    if entry.retry:
        assert response.headers["Retry-After"] == str(exc.retry_after)
    else:
        assert "Retry-After" not in response.headers


def test_rest_through_the_app(app):
    missing = app.get("/queue/nope", headers=app.auth, status=404).json
    assert missing == {"status": "error", "error_msg": {"queue_name": "no queue named nope"}}
    app.post("/queue", {"queue_name": "jobs"}, headers=app.auth, status=201)
    again = app.post("/queue", {"queue_name": "jobs"}, headers=app.auth, status=409)
    assert again.json["error_msg"] == {"queue_name": "a queue named jobs exists already"}
    gone = app.get("/schedules/nope", headers=app.auth, status=404).json
    assert gone["error_msg"] == {"schedule": "no schedule named nope"}


# -- SQS -----------------------------------------------------------------------------
#: What the SQS door answered before the catalogue, pinned: code, status, Retry-After.
SQS_BEFORE = {
    "throttled": ("RequestThrottled", 403, True),
    "too_many_queues": ("OverLimit", 403, False),
    "storage_unavailable": ("ServiceUnavailable", 503, True),
    "queue_paused": ("RequestThrottled", 403, True),
    "rate_limited": ("RequestThrottled", 403, True),
    "queue_full": ("RequestThrottled", 403, True),
    "quota_exceeded": ("RequestThrottled", 403, True),
    "table_full": ("RequestThrottled", 403, True),
    "priority_on_fair_queue": ("InvalidParameterValue", 400, False),
    "batch_over_burst": ("TooManyEntriesInBatchRequest", 400, False),
    "too_many_subscriptions": ("OverLimit", 403, False),
}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
@pytest.mark.parametrize("json_protocol", [True, False])
def test_sqs_answers_every_entry_in_its_own_codes(name, json_protocol):
    exc = sample(name)
    answer = refusal(exc)
    status, headers, body = protocol.error(json_protocol, answer, "request-id")
    words = REFUSALS[name]
    assert answer.name == words.code and status == words.kind.status
    assert answer.message == words.text.format(exc=exc)
    if name in SQS_BEFORE:
        assert SQS_BEFORE[name] == (answer.name, status, "Retry-After" in headers)
    if json_protocol:
        fault = "Sender" if words.kind.sender else "Receiver"
        assert headers["x-amzn-query-error"] == f"{words.kind.query_code};{fault}"
        assert json.loads(body)["message"] == answer.message
    else:
        assert f"<Code>{words.kind.query_code}</Code>".encode() in body


def test_sqs_texts_kept():
    assert refusal(Throttled("app", 5, 2)).message.startswith("Rate exceeded. application app")
    assert refusal(TooManyQueues("app", 1)).message.startswith("Too many queues. application")
    unavailable = refusal(StorageUnavailable("x"))
    assert unavailable.message == "The service is unavailable, retry."
    missing = refusal(QueueNotFound("jobs"))
    assert missing.query_message.endswith("for this wsdl version.")
    own = SQSError("InvalidAction", "no")
    assert refusal(own) is own


def test_sqs_through_the_app(monkeypatch, make_app, sqlite_storage, wrap_app, test_apps, clock):
    app = wrap_app(make_app(sqlite_storage))
    when = datetime.datetime.fromtimestamp(clock.now_micros() / 1e6, datetime.UTC)

    def sqs(action: str, **params):
        return sqs_json_call(app, when, test_apps.app, SQS_SECRET, action, **params)

    def down(*args, **kwargs):
        raise StorageUnavailable("test: down", retry_after=7)

    monkeypatch.setattr(app.app.registry.queuey.storage, "list_queues", down)
    answer = sqs("ListQueues")
    assert answer.status_int == 503 and answer.headers["Retry-After"] == "7"
    assert answer.headers["x-amzn-query-error"] == "ServiceUnavailable;Receiver"
    assert json.loads(answer.body)["__type"] == "com.amazonaws.sqs#ServiceUnavailable"


# -- admin pages ---------------------------------------------------------------------
def test_admin_pages_word_every_entry():
    for name, page in PAGES.items():
        exc = sample(name)
        assert page.title and page.message.format(exc=exc), name


def test_admin_through_the_app(make_app, sqlite_storage, wrap_app, monkeypatch):
    from tests.admin.conftest import ADMIN_SETTINGS, sign_in

    admin = wrap_app(make_app(sqlite_storage, **ADMIN_SETTINGS))
    sign_in(admin)
    missing = admin.get("/admin/queue/nope", status=404)
    assert "There is no queue named nope." in missing.text

    def throttled(*args, **kwargs):
        raise Throttled("app", 5, 3)

    monkeypatch.setattr(admin.app.registry.queuey.storage, "list_queues", throttled)
    page = admin.get("/admin/", status=429)
    assert page.content_type == "text/html" and page.headers["Retry-After"] == "3"
    assert "Too many requests" in page.text and "try again in 3 s" in page.text


# -- command line --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_command_line_prints_one_line_per_entry(name, monkeypatch, capsys):
    import queuey.cli

    exc = sample(name)

    def fails(args):
        raise exc

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(command="stats", func=fails)

    monkeypatch.setattr(queuey.cli, "build_parser", Parser)
    assert queuey.cli.main([]) == cli_errors.REFUSED
    err = capsys.readouterr().err
    assert err == cli_errors.exit_line(exc) + "\n" and err.startswith("error: ")


# -- docs ----------------------------------------------------------------------------
def test_docs_list_every_entry_as_the_catalogue_says():
    text = (ROOT.parent / "docs" / "api.rst").read_text()
    section = text[text.index("Error catalogue") :]
    rows = {
        m.group(1): (int(m.group(2)), m.group(3).strip("`"))
        for m in re.finditer(r"^\s*\* - ``(\w+)``\n\s*- (\d{3})\n\s*- (.*)$", section, re.M)
    }
    expected = {
        name: (entry.status, entry.field or "(named by the error)")
        for name, entry in CATALOGUE.items()
    }
    assert rows == expected
