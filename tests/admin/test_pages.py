"""The admin pages through webtest: every page, the forms, CSRF, escaping, paging."""

from __future__ import annotations

import re

import pytest

from queuey.core.consumergroups import GroupFigures, GroupPartition, Member
from queuey.errors import StorageUnavailable
from tests.admin.conftest import csrf_of
from tests.web.calls import create, post, read, reserved


def ids_on(page) -> list[str]:
    return re.findall(r'<code class="id">([0-9a-f]{32})</code>', page.text)


def depth(client, queue) -> int:
    return client.get(f"/queue/{queue}/stats", headers=client.auth).json["messages"]


@pytest.fixture
def jobs(admin, settle):
    """Queue ``jobs`` (2 partitions, one attempt) holding three messages."""
    create(admin, "jobs", partitions=2, max_attempts=1, visibility_timeout=10)
    for n in range(3):
        post(admin, "jobs", {"n": n, "note": f"message {n}"})
    settle()
    return "jobs"


def test_every_page_renders_for_a_queue_with_messages(admin, jobs):
    listing = admin.get("/admin/")
    row = re.search(
        r'<tr>\s*<td data-label="Queue"><a href="/admin/queue/jobs">jobs</a>.*?</tr>',
        listing.text,
        re.S,
    )
    assert row and '<td class="num" data-label="Depth">3</td>' in row.group(0)
    page = admin.get("/admin/queue/jobs")
    assert '<span class="value" id="depth">3</span>' in page.text
    assert "<svg" in page.text and "Partitions" in page.text
    assert "jobs-dead" in page.text  # where its dead letters go
    assert len(ids_on(admin.get("/admin/queue/jobs/messages"))) == 3
    assert "does not exist" in admin.get("/admin/queue/jobs/dead").text
    assert "Type the queue" in admin.get("/admin/queue/jobs/purge").text
    assert "Type the queue" in admin.get("/admin/queue/jobs/delete").text
    assert "New queue" in admin.get("/admin/new").text
    assert "queuey.zookeeper.hosts" in admin.get("/admin/groups").text
    assert admin.get("/admin", status=303).location.endswith("/admin/")


def test_pages_are_html_even_when_something_is_wrong(admin):
    missing = admin.get("/admin/queue/nope", status=404)
    assert missing.content_type == "text/html" and "There is no queue named nope" in missing.text
    assert admin.get("/admin/not-a-page", status=404).content_type == "text/html"
    bad = admin.get("/admin/queue/bad%20name", status=400)
    assert bad.content_type == "text/html" and "queue_name" in bad.text
    res = admin.put("/admin/queue/nope", status=404)
    assert res.content_type == "text/html"


def test_storage_unavailable_is_a_friendly_503(admin, monkeypatch):
    def down(*args, **kwargs):
        raise StorageUnavailable("test: down", retry_after=7)

    monkeypatch.setattr(admin.app.registry.queuey.storage, "list_queues", down)
    res = admin.get("/admin/", status=503)
    assert "Storage unavailable" in res.text and res.headers["Retry-After"] == "7"
    assert "Traceback" not in res.text


def test_an_unexpected_error_is_logged_and_answered_without_a_traceback(admin, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(admin.app.registry.queuey.storage, "list_queues", broken)
    res = admin.get("/admin/", status=500)
    assert "secret internals" not in res.text and "it has been logged" in res.text


def test_create_a_queue_through_the_form(admin):
    form = admin.get("/admin/new").forms[1]
    form["queue_name"] = "orders"
    form["partitions"] = "4"
    form["type"] = "private"
    res = form.submit(status=303)
    assert res.location.endswith("/admin/queue/orders")
    assert "Created queue orders." in res.follow().text
    info = admin.get("/queue/orders/info", headers=admin.auth).json
    assert (info["partitions"], info["type"], info["ttl"]) == (4, "private", 259200)


def test_create_names_each_bad_field_with_the_api_rules(admin):
    max_partitions = admin.app.registry.queuey.settings.max_partitions
    form = admin.get("/admin/new").forms[1]
    form["queue_name"] = "bad name!"
    form["partitions"] = str(max_partitions + 1)
    form["delay"] = "99999999999"
    res = form.submit(status=400)
    text = res.text
    assert "must be 1 to 50 letters, digits, &#39;_&#39; or &#39;-&#39;" in text
    assert f"less than or equal to {max_partitions}" in text
    assert res.forms[1]["queue_name"].value == "bad name!"  # kept for correcting
    assert admin.get("/queue", headers=admin.auth).json["queues"] == []


def test_create_refuses_an_existing_name(admin, jobs):
    form = admin.get("/admin/new").forms[1]
    form["queue_name"] = "jobs"
    assert "a queue named jobs exists already" in form.submit(status=409).text


def test_post_a_test_message(admin, jobs, settle):
    form = admin.get("/admin/queue/jobs").forms["post-form"]
    form["body"] = '{"hello": "operator", "n": 12345678901234567890}'
    form["partition"] = "2"
    res = form.submit(status=303)
    assert "Posted message" in res.follow().text
    settle()
    newest = read(admin, "jobs").json["messages"][0]
    assert newest["body"] == {"hello": "operator", "n": 12345678901234567890}
    assert newest["partition"] == 2


@pytest.mark.parametrize(
    ("body", "fields", "said"),
    [
        ("{not json", {}, "the body is not valid JSON"),
        ("[1, 2]", {}, "a message must be a JSON object"),
        ('{"a": 1}', {"partition": "3"}, "must be between 1 and 2, the queue's partitions"),
        ('{"a": 1}', {"partition": "1", "partition_key": "k"}, "give either partition or"),
    ],
)
def test_a_bad_test_message_is_refused_and_kept_in_the_form(admin, jobs, body, fields, said):
    form = admin.get("/admin/queue/jobs").forms["post-form"]
    form["body"] = body
    for name, value in fields.items():
        form[name] = value
    res = form.submit(status=400)
    assert said in res.text.replace("&#39;", "'")
    assert res.forms["post-form"]["body"].value == body
    assert depth(admin, "jobs") == 3


def test_message_bodies_are_escaped_and_pretty_printed(admin, jobs, settle):
    post(admin, "jobs", {"html": "<script>alert('x')</script>", "nested": {"a": [1, 2]}})
    settle()
    page = admin.get("/admin/queue/jobs/messages")
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
    assert "{\n  &#34;html&#34;" in page.text and "\n    &#34;a&#34;: [\n      1," in page.text


def test_browse_pages_newest_first(admin, jobs, clock):
    for n in range(42):
        post(admin, "jobs", {"n": 100 + n})
        clock.advance(0.001)
    clock.advance(0.01)
    newest_first = [m["message_id"] for m in read(admin, "jobs", limit=100).json["messages"]]
    assert len(newest_first) == 45
    seen, url = [], "/admin/queue/jobs/messages"
    while url:
        page = admin.get(url)
        seen.extend(ids_on(page))
        older = page.html.find("a", rel="next")
        url = older["href"] if older else None
    assert seen == newest_first  # 20 + 20 + 5, no gap, no repeat
    assert "Older" not in admin.get("/admin/queue/jobs/messages?before=1").text


def test_purge_needs_the_csrf_token(admin, jobs):
    admin.get("/admin/queue/jobs/purge")
    res = admin.post("/admin/queue/jobs/purge", {"confirm": "jobs"}, status=400)
    assert "nothing was changed" in res.text and res.content_type == "text/html"
    admin.post("/admin/queue/jobs/purge", {"confirm": "jobs", "csrf_token": "0" * 40}, status=400)
    assert depth(admin, "jobs") == 3


def test_every_admin_post_needs_the_csrf_token(admin, jobs):
    for path in (
        "/admin/new",
        "/admin/queue/jobs/post",
        "/admin/queue/jobs/measure",
        "/admin/queue/jobs/delete",
        "/admin/queue/jobs/redrive",
        "/admin/signout",
    ):
        admin.post(path, {"confirm": "jobs", "queue_name": "x", "body": "{}"}, status=400)
    assert depth(admin, "jobs") == 3
    admin.get("/admin/", status=200)  # still signed in


def test_purge_after_typing_the_name(admin, jobs):
    form = admin.get("/admin/queue/jobs/purge").forms[1]
    form["confirm"] = "job"
    assert "Type the queue" in form.submit(status=400).text
    assert depth(admin, "jobs") == 3
    form["confirm"] = "jobs"
    page = form.submit(status=303).follow()
    assert "Purged queue jobs" in page.text
    assert '<span class="value" id="depth">0</span>' in page.text
    assert depth(admin, "jobs") == 0


def test_delete_after_typing_the_name(admin, jobs):
    form = admin.get("/admin/queue/jobs/delete").forms[1]
    form["confirm"] = "jobs"
    res = form.submit(status=303)
    assert res.location.endswith("/admin/")
    assert "Deleted queue jobs." in res.follow().text
    admin.get("/queue/jobs/info", headers=admin.auth, status=404)
    assert 'href="/admin/queue/jobs"' not in admin.get("/admin/").text


def test_dead_letters_and_redrive(admin, jobs, clock):
    reserved(admin, "jobs", limit=3)
    clock.advance(10.1)
    assert reserved(admin, "jobs") == []  # all three dead-lettered on the way
    clock.advance(0.01)
    page = admin.get("/admin/queue/jobs/dead")
    assert len(ids_on(page)) == 3
    assert '<strong id="dead-count">3</strong>' in page.text
    assert "jobs / default" in page.text  # where each came from

    form = page.forms["redrive-form"]
    form["limit"] = "2"
    page = form.submit(status=303).follow()
    assert "Redrive: 2 moved back, 0 posted anew, 0 left in place." in page.text
    assert len(ids_on(page)) == 1
    assert sorted(m["body"]["n"] for m in reserved(admin, "jobs", limit=10)) == [0, 1]

    form = page.forms["redrive-form"]
    form["limit"] = "0"
    assert "Nothing moved: limit" in form.submit(status=303).follow().text


def test_groups_page_shows_members_owners_and_lag(admin):
    admin.app.registry.queuey.groups = StandInGroups(
        [
            GroupFigures(
                name="billing",
                members=(Member("worker-1", "host-a", 4242, 1_700_000_000.0),),
                partitions=(
                    GroupPartition(
                        "jobs", 1, "worker-1", "ab" * 16, 1_700_000_100.0, 12, False, 3.5
                    ),
                    GroupPartition("jobs", 2, None, None, None, 1000, True, 7200.0),
                ),
                application=admin.apps.app,
            )
        ]
    )
    page = admin.get("/admin/groups")
    text = page.text
    assert "billing" in text and "worker-1" in text and "host-a" in text and "4242" in text
    assert "<em>unowned</em>" in text and "1,000+" in text and "2 h" in text
    assert "2023-11-14 22:13:20 UTC" in text  # the member's start


def test_groups_page_when_zookeeper_does_not_answer(admin):
    from queuey.core.consumergroups import GroupsUnavailable

    class Down:
        def for_application(self, application):
            raise GroupsUnavailable("test")

    admin.app.registry.queuey.groups = Down()
    assert "ZooKeeper did not answer" in admin.get("/admin/groups", status=503).text


class StandInGroups:
    def __init__(self, groups) -> None:
        self.groups = groups

    def for_application(self, application):
        return [g for g in self.groups if g.application == application]


def test_a_signed_in_page_carries_a_fresh_csrf_token(admin, jobs):
    page = admin.get("/admin/queue/jobs")
    assert len(csrf_of(page)) == 40
