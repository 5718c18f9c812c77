"""The admin message page: a message and, for the subscription asked, whether it
is handed out now and every reason it is not, in words; reached from the
messages page; a bad id or subscription answered with the HTML error page."""

from __future__ import annotations

import pytest

from queuey import ids
from tests.web.calls import create, post, release, reserved


@pytest.fixture
def leased(admin, settle):
    create(admin, "jobs", visibility_timeout=60, max_attempts=3)
    message_id = post(admin, "jobs", {"n": 1}).json["messages"][0]["message_id"]
    settle()
    (got,) = reserved(admin, "jobs", subscription="workers")
    release(admin, "jobs", [got["receipt"]], subscription="workers", delay=30, error="<b>oops</b>")
    return message_id


def test_the_messages_page_links_each_message_to_its_explanation(admin, leased):
    page = admin.get("/admin/queue/jobs/messages")
    link = page.html.find("a", title="Why is it (not) delivered?")
    assert link["href"] == f"/admin/queue/jobs/messages/1:{leased}"

    default = admin.get(link["href"])
    assert "Deliverable now" in default.html.find(id="verdict").text  # the default subscription
    assert leased in default.text

    workers = admin.get(link["href"], params={"subscription": "workers"})
    verdict = workers.html.find(id="verdict").text
    reason = workers.html.find("li", attrs={"data-reason": "released"}).text
    print(f"\n{' '.join(verdict.split())}: {reason}")
    assert "Not deliverable now" in verdict
    assert "released by a consumer (attempt 1)" in reason and "until 20" in reason
    assert "&#39;&lt;b&gt;oops&lt;/b&gt;&#39;" not in reason  # words come from describe()
    assert "<b>oops</b>" not in workers.text  # the last error is escaped, never markup


def test_bad_ids_and_subscriptions_get_the_error_page(admin, leased, clock):
    bad = admin.get("/admin/queue/jobs/messages/not-an-id", status=400)
    assert "<html" in bad.text.lower() and "message" in bad.text
    unknown = ids.min_uuid(clock.now_micros()).hex  # nobody posted it
    missing = admin.get(f"/admin/queue/jobs/messages/{unknown}", status=404)
    assert "No such message" in missing.text
    ancient = ids.min_uuid(1_000_000).hex  # past the queue's ttl: expired
    gone = admin.get(f"/admin/queue/jobs/messages/{ancient}")
    assert gone.html.find("li", attrs={"data-reason": "expired"}) is not None
    admin.get(f"/admin/queue/jobs/messages/{leased}?subscription=no%20way", status=400)
