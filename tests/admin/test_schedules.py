"""The schedules page through webtest: the list, the create form and its errors,
pause, resume, delete after confirmation, CSRF, and hostile input."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.admin.conftest import csrf_of
from tests.admin.test_hostile_input import FUZZ, NASTY, assert_refused_politely, raw
from tests.web.calls import create, read

#: 2026-11-26 08:30:00 UTC, a Thursday: 09:30 in Paris (CET, UTC+1).
MORNING = int(datetime(2026, 11, 26, 8, 30, tzinfo=UTC).timestamp())


@pytest.fixture
def jobs(admin, clock):
    clock.set(MORNING * 1_000_000)
    create(admin, "jobs", partitions=2)
    return admin


def schedules(app):
    return app.app.registry.queuey.schedules


def new_form(app, **fields):
    form = app.get("/admin/schedules").forms["schedule-form"]
    for name, value in fields.items():
        form[name] = value
    return form


def row(page, name: str) -> str:
    found = page.html.find("tr", id=f"schedule-{name}")
    assert found is not None, f"no row for {name}"
    return " ".join(found.get_text(" ").split())


def test_create_pause_resume_and_delete(jobs, clock):
    assert "No schedules" in jobs.get("/admin/schedules").text
    res = new_form(
        jobs,
        name="morning-report",
        queue="jobs",
        cron="0 10 * * mon-fri",
        timezone="Europe/Paris",
        body='{"report": "daily", "n": 12345678901234567890}',
        priority="3",
    ).submit(status=303)
    assert res.location.endswith("/admin/schedules")
    page = res.follow()
    assert "Created schedule morning-report." in page.text
    text = row(page, "morning-report")
    # The next tick in the zone its cron is read in: 10:00 Paris is 09:00 UTC.
    assert "0 10 * * mon-fri" in text and "Europe/Paris" in text
    assert "2026-11-26 10:00:00 CET in 30 min" in text
    assert "active" in text

    page = page.forms["pause-morning-report"].submit(status=303).follow()
    assert "Paused schedule morning-report." in page.text
    assert "paused" in row(page, "morning-report")
    assert schedules(jobs).get(jobs.apps.app, "morning-report").paused

    page = page.forms["resume-morning-report"].submit(status=303).follow()
    assert "Resumed schedule morning-report." in page.text
    clock.advance(30 * 60)
    assert schedules(jobs).tick() == 1
    page = jobs.get("/admin/schedules")
    text = row(page, "morning-report")
    assert "2026-11-26 10:00:00 CET now" in text  # the last tick
    assert "2026-11-27 10:00:00 CET in 24 h" in text  # the next one, Friday
    clock.advance(0.01)
    (message,) = read(jobs, "jobs").json["messages"]
    assert message["body"] == {"report": "daily", "n": 12345678901234567890}

    confirm = jobs.get("/admin/schedules/morning-report/delete")
    assert "Type the schedule" in confirm.text
    form = confirm.forms[1]
    form["confirm"] = "morning"
    assert "Type the schedule" in form.submit(status=400).text
    form["confirm"] = "morning-report"
    page = form.submit(status=303).follow()
    assert "Deleted schedule morning-report." in page.text
    assert "No schedules" in page.text
    assert schedules(jobs).list(jobs.apps.app) == []


def test_an_interval_schedule_shows_its_period_and_utc(jobs):
    new_form(jobs, name="beat", queue="jobs", interval="90", body="{}").submit(status=303)
    text = row(jobs.get("/admin/schedules"), "beat")
    # An interval schedule's first tick is when it starts: now, when it gives no start.
    assert "every 90 s" in text and "2026-11-26 08:30:00 UTC now" in text


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"cron": "61 * * * *"}, "cron", "minute"),
        ({"cron": "* * *"}, "cron", "five fields"),
        ({"interval": "0"}, "interval", ""),
        ({"interval": "31536001"}, "interval", ""),
        ({"interval": "60", "timezone": "Mars/Olympus"}, "timezone", ""),
        ({"interval": "60", "body": "{not json"}, "body", "JSON"),
        ({"interval": "60", "body": "[1, 2]"}, "body", "object"),
        ({"interval": "60", "queue": "nope"}, "queue", ""),
        ({"interval": "60", "name": "bad name!"}, "name", ""),
        ({"interval": "60", "missed": "some"}, "missed", ""),
        ({"interval": "60", "priority": "99"}, "priority", ""),
        ({"interval": "60", "attributes": "[1]"}, "attributes", ""),
    ],
)
def test_a_bad_field_is_named_next_to_it_and_kept(jobs, fields, field, said):
    given_fields = {"name": "bad", "queue": "jobs", "body": "{}", **fields}
    form = jobs.get("/admin/schedules").forms["schedule-form"]
    if "missed" in given_fields:  # not one of the select's options
        form.fields["missed"][0].options.append((given_fields["missed"], False, None))
    for name, value in given_fields.items():
        form[name] = value
    res = form.submit(status=400)
    assert "The schedule was not created" in res.text
    label = res.html.find(attrs={"name": field}).find_parent("label")
    error = label.find(class_="field-error")
    assert error is not None and error.get_text().strip(), f"no error next to {field}"
    assert said in error.get_text()
    if field != "missed":  # a select keeps only its own options
        assert res.forms["schedule-form"][field].value == given_fields[field]  # kept
    assert schedules(jobs).list(jobs.apps.app) == []


def test_cron_and_interval_together_are_refused(jobs):
    res = new_form(jobs, name="both", queue="jobs", cron="* * * * *", interval="60", body="{}")
    page = res.submit(status=400)
    assert page.html.find_all(class_="field-error")
    assert schedules(jobs).list(jobs.apps.app) == []


def test_an_existing_name_is_a_409(jobs):
    new_form(jobs, name="beat", queue="jobs", interval="60", body="{}").submit(status=303)
    res = new_form(jobs, name="beat", queue="jobs", interval="30", body="{}").submit(status=409)
    assert "exists already" in res.text


def test_unknown_schedules_are_404_pages(jobs):
    token = csrf_of(jobs.get("/admin/schedules"))
    for action in ("pause", "resume"):
        res = jobs.post(f"/admin/schedules/nope/{action}", {"csrf_token": token}, status=404)
        assert res.content_type == "text/html" and "no schedule named nope" in res.text
    res = jobs.get("/admin/schedules/nope/delete", status=404)
    assert "no schedule named nope" in res.text
    res = jobs.post(
        "/admin/schedules/nope/delete", {"csrf_token": token, "confirm": "nope"}, status=404
    )
    assert "no schedule named nope" in res.text


def test_every_schedule_post_needs_the_csrf_token(jobs):
    new_form(jobs, name="beat", queue="jobs", interval="60", body="{}").submit(status=303)
    for path in (
        "/admin/schedules",
        "/admin/schedules/beat/pause",
        "/admin/schedules/beat/delete",
    ):
        res = jobs.post(path, {"name": "x", "queue": "jobs", "confirm": "beat"}, status=400)
        assert "nothing was changed" in res.text
    (beat,) = schedules(jobs).list(jobs.apps.app)
    assert not beat.paused


def test_what_an_operator_typed_is_escaped(jobs):
    res = new_form(jobs, name="x", queue="jobs", cron="<script>alert(1)</script>", body="{}")
    page = res.submit(status=400)
    assert "<script>alert(1)" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


@FUZZ
@given(
    field=st.sampled_from(
        [
            "name",
            "queue",
            "cron",
            "interval",
            "timezone",
            "start",
            "end",
            "missed",
            "body",
            "attributes",
            "partition",
            "ttl",
            "priority",
            "delay",
        ]
    ),
    value=NASTY,
)
def test_create_form_fuzz(jobs, field, value):
    token = csrf_of(jobs.get("/admin/schedules"))
    form = {"csrf_token": token, "name": "fuzzed", "queue": "jobs", "interval": "60", "body": "{}"}
    form[field] = value
    started = time.monotonic()
    response = jobs.post("/admin/schedules", form, expect_errors=True)
    assert_refused_politely(response, time.monotonic() - started)
    for schedule in schedules(jobs).list(jobs.apps.app):  # accepted: the core's rules allowed it
        schedules(jobs).delete(jobs.apps.app, schedule.name)


@FUZZ
@given(name=NASTY, action=st.sampled_from(["pause", "resume", "delete"]))
def test_schedule_name_in_the_path_fuzz(jobs, name, action):
    from urllib.parse import quote

    token = csrf_of(jobs.get("/admin/schedules"))
    path = f"/admin/schedules/{quote(name, safe='')}/{action}"
    started = time.monotonic()
    response = jobs.post(path, {"csrf_token": token, "confirm": name}, expect_errors=True)
    assert_refused_politely(response, time.monotonic() - started)
    response = jobs.get(path, expect_errors=True)
    assert_refused_politely(response, time.monotonic() - started)


def test_bad_utf8_in_the_form_is_refused(jobs):
    token = csrf_of(jobs.get("/admin/schedules"))
    response, elapsed = raw(
        jobs,
        "POST",
        "/admin/schedules",
        body=b"csrf_token=" + token.encode() + b"&name=a&queue=jobs&interval=60&body=%FF%FE",
    )
    assert_refused_politely(response, elapsed)
    assert response.status_code == 400
    assert schedules(jobs).list(jobs.apps.app) == []


def test_start_and_end_as_iso_times_in_the_schedule_zone(jobs):
    form = new_form(
        jobs,
        name="hourly",
        queue="jobs",
        interval="3600",
        timezone="Europe/Paris",
        start="2026-12-01T09:00",
        end="2026-12-31T18:00:00+00:00",
        body="{}",
    )
    form.submit(status=303)
    hourly = schedules(jobs).get(jobs.apps.app, "hourly")
    assert (hourly.start, hourly.end) == (1796112000, 1798740000)
    assert "2026-12-01 09:00:00 CET in 5 d" in row(jobs.get("/admin/schedules"), "hourly")

    res = new_form(
        jobs, name="later", queue="jobs", interval="60", start="next tuesday", body="{}"
    ).submit(status=400)
    said = res.html.find(attrs={"name": "start"}).find_parent("label").get_text()
    assert "must be an ISO time" in said
    res = new_form(
        jobs,
        name="later",
        queue="jobs",
        interval="60",
        start="1800000000",
        end="1700000000",
        body="{}",
    ).submit(status=400)
    said = res.html.find(attrs={"name": "end"}).find_parent("label").get_text()
    assert "must not be before start" in said


def test_a_schedule_whose_queue_is_gone_says_why(jobs, clock):
    new_form(jobs, name="beat", queue="jobs", interval="60", body="{}").submit(status=303)
    jobs.delete("/queue/jobs", headers=jobs.auth)
    clock.advance(61)
    assert schedules(jobs).tick() == 0
    text = row(jobs.get("/admin/schedules"), "beat")
    assert "stopped" in text and "its queue jobs no longer exists" in text
    page = jobs.get("/admin/schedules").forms["resume-beat"].submit(status=303).follow()
    assert "Schedule beat was not resumed: queue: the application has no queue named jobs" in (
        page.text
    )


def test_the_schedule_limit_is_said_next_to_the_name(jobs, monkeypatch):
    monkeypatch.setattr(schedules(jobs), "limit", 1)
    new_form(jobs, name="one", queue="jobs", interval="60", body="{}").submit(status=303)
    res = new_form(jobs, name="two", queue="jobs", interval="60", body="{}").submit(status=403)
    assert "the most it may have" in res.text
