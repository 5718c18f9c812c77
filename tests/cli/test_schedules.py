"""``queuey schedules`` against a live Queuey: list (table and JSON), create,
pause, resume, delete, and the service's refusals as one line each, exit 1,
no traceback."""

from __future__ import annotations

import json
import re

import pytest


@pytest.fixture
def reports(client):
    client.create_queue("reports")
    return "reports"


def listed(queuey) -> list[dict]:
    result = queuey("schedules", "list", "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def create(queuey, name: str, *options: str, queue: str = "reports"):
    """``queuey schedules create NAME --queue QUEUE OPTIONS`` (``--body {}`` unless given)."""
    body = () if "--body" in options else ("--body", "{}")
    return queuey("schedules", "create", name, "--queue", queue, *options, *body)


def test_create_list_pause_resume_delete(queuey, reports):
    result = create(
        queuey,
        "nightly",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "Europe/Paris",
        "--body",
        '{"report": "nightly", "n": 12345678901234567890}',
        "--priority",
        "3",
        "--attributes",
        '{"source": "cli"}',
    )
    assert result.code == 0, result.err
    assert result.out.startswith("created nightly -> reports, 30 2 * * * (Europe/Paris), active")
    assert re.search(r"next tick \S+T02:30:00\+0[12]:00$", result.out.strip())  # the zone's
    result = create(queuey, "beat", "--every", "3600", "--missed", "all")
    assert result.code == 0, result.err

    result = queuey("schedules", "list")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split()[:4] == ["name", "queue", "when", "timezone"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"nightly", "beat"}
    assert "every 3600 s" in rows["beat"] and rows["beat"].split()[-1] == "active"

    (nightly,) = [s for s in listed(queuey) if s["name"] == "nightly"]
    assert nightly["cron"] == "30 2 * * *" and nightly["timezone"] == "Europe/Paris"
    assert nightly["message"]["body"] == {"report": "nightly", "n": 12345678901234567890}
    assert nightly["message"]["priority"] == 3
    assert nightly["message"]["attributes"] == {"source": "cli"}

    result = queuey("schedules", "pause", "nightly")
    assert result.code == 0, result.err
    assert result.out.startswith("paused nightly")
    assert [s["paused"] for s in listed(queuey) if s["name"] == "nightly"] == [True]
    result = queuey("schedules", "resume", "nightly")
    assert result.code == 0 and result.out.startswith("resumed nightly"), result.err
    assert [s["paused"] for s in listed(queuey) if s["name"] == "nightly"] == [False]

    result = queuey("schedules", "delete", "nightly")
    assert (result.code, result.out) == (0, "deleted schedule nightly\n"), result.err
    assert [s["name"] for s in listed(queuey)] == ["beat"]


def test_an_empty_list(queuey):
    result = queuey("schedules", "list")
    assert (result.code, result.out) == (0, "(no schedules)\n")
    assert listed(queuey) == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--cron", "61 * * * *", "--body", "{}"], "cron: "),
        (["--every", "60", "--timezone", "Mars/Olympus", "--body", "{}"], "timezone: "),
        (["--every", "31536001", "--body", "{}"], "interval: "),
        (["--every", "60", "--body", "[1]"], "body"),
        (
            ["--every", "60", "--body", "{}", "--start", "1800000000", "--end", "1700000000"],
            "end: ",
        ),
    ],
)
def test_the_service_refusal_is_printed_without_a_traceback(queuey, reports, argv, said):
    result = create(queuey, "bad", *argv)
    assert result.code == 1, result.out
    assert result.err.startswith("queuey schedules: ") and said in result.err
    assert "Traceback" not in result.err
    assert listed(queuey) == []


def test_missing_and_duplicate_names(queuey, reports):
    for verb in ("pause", "resume", "delete"):
        result = queuey("schedules", verb, "nope")
        assert result.code == 1 and "nope" in result.err, (verb, result.err)
        assert "Traceback" not in result.err
    assert create(queuey, "beat", "--every", "60").code == 0
    result = create(queuey, "beat", "--every", "60")
    assert result.code == 1 and "beat" in result.err, result.err
    result = create(queuey, "q", "--every", "60", queue="nope")
    assert result.code == 1 and "queue" in result.err, result.err


def test_command_line_mistakes_exit_2(queuey, reports, capsys):
    result = create(queuey, "x", "--every", "60", "--body", "{")
    assert result.code == 2 and "--body is not JSON" in result.err
    result = create(queuey, "x", "--every", "60", "--start", "yesterday")
    assert result.code == 2 and "--start must be an ISO time" in result.err
    with pytest.raises(SystemExit) as exited:  # argparse: neither --cron nor --every
        create(queuey, "x")
    assert exited.value.code == 2


def test_a_wrong_key_is_one_line(queuey):
    result = queuey("schedules", "list", key="wrong")
    assert result.code == 1 and "not authorized" in result.err
    assert "Traceback" not in result.err


def test_start_and_end_as_iso_times(queuey, reports):
    result = create(
        queuey,
        "hourly",
        "--every",
        "3600",
        "--timezone",
        "Europe/Paris",
        "--start",
        "2036-12-01T09:00",
        "--end",
        "2036-12-31T18:00Z",
    )
    assert result.code == 0, result.err
    assert "next tick 2036-12-01T09:00:00+01:00" in result.out
    (hourly,) = listed(queuey)
    assert (hourly["start"], hourly["end"]) == (2111731200, 2114359200)
