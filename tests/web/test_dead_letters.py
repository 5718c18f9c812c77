"""Dead letters and redrive through HTTP, end to end on the embedded store.

A message delivered ``max_attempts`` times whose lease ends (or that is
released) goes to the dead-letter queue once, with its body unchanged and
attributes naming where it came from; redrive moves it back.
"""

from __future__ import annotations

import pytest

from queuey.errors import StorageUnavailable
from tests.web.calls import ack, create, post, read, release, reserved


def dead_letters(app, clock, queue="jobs-dead"):
    """The dead-letter queue's messages, oldest first (after moving the frozen
    clock past the microseconds its fresh ids step ahead)."""
    clock.advance(0.01)
    return read(app, queue, order="ascending").json["messages"]


def subscription_stats(app, queue="jobs") -> dict:
    stats = app.get(f"/queue/{queue}/stats", headers=app.auth).json
    return {s["subscription"]: s for s in stats["subscriptions"]}


def exhaust(app, clock, queue="jobs", attempts=2, visibility_timeout=10):
    """Reserve the queue's one message ``attempts`` times, letting each lease end."""
    last = None
    for attempt in range(1, attempts + 1):
        (last,) = reserved(app, queue)
        assert last["attempts"] == attempt
        clock.advance(visibility_timeout + 0.1)
    return last


def test_a_message_out_of_attempts_is_dead_lettered_once_with_its_story(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", max_attempts=2, visibility_timeout=10, type="private", ttl=600)
    posted = post(app, "jobs", {"n": 1}, priority=3).json["messages"][0]
    (first,) = reserved(app, "jobs")
    release(app, "jobs", [first["receipt"]], error="thumbnailer crashed")
    (second,) = reserved(app, "jobs")
    assert second["attempts"] == 2
    clock.advance(10.1)  # the last lease ends without an ack

    assert reserved(app, "jobs") == []  # dead-lettered on the way
    info = app.get("/queue/jobs-dead/info", headers=app.auth).json
    assert (info["type"], info["partitions"]) == ("private", 1)
    assert info["ttl"] == app.app.registry.queuey.settings.max_ttl
    (letter,) = dead_letters(app, clock)
    assert letter["body"] == {"n": 1}
    assert letter["attributes"] == {
        "source_queue": "jobs",
        "source_message_id": posted["message_id"],
        "source_partition": "1",
        "source_subscription": "default",
        "attempts": "2",
        "last_error": "thumbnailer crashed",
    }
    assert subscription_stats(app)["default"]["dead_lettered"] == 1
    clock.advance(300)
    assert reserved(app, "jobs") == []
    assert len(dead_letters(app, clock)) == 1
    text = app.get("/metrics").text
    assert "queuey_messages_dead_lettered_total 1.0" in text


def test_release_of_the_last_attempt_dead_letters_at_once(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", max_attempts=1, dead_letter_queue="graveyard")
    create(app, "graveyard", partitions=3)
    post(app, "jobs", {"n": 1})
    (got,) = reserved(app, "jobs")
    res = release(app, "jobs", [got["receipt"]], error="bad input")
    assert res.json == {"status": "ok", "released": 1, "dead_lettered": 1, "failed": {}}
    (letter,) = dead_letters(app, clock, "graveyard")
    assert letter["attributes"]["last_error"] == "bad input"
    assert reserved(app, "jobs") == []


def test_each_subscription_dead_letters_its_own_copy(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", max_attempts=1, visibility_timeout=5)
    post(app, "jobs", {"n": 1})
    for sub in ("a", "b"):
        reserved(app, "jobs", subscription=sub)
    clock.advance(5.1)
    for sub in ("a", "b"):
        assert reserved(app, "jobs", subscription=sub) == []
    letters = dead_letters(app, clock)
    assert sorted(m["attributes"]["source_subscription"] for m in letters) == ["a", "b"]


def test_an_acked_message_is_never_dead_lettered(sqlite_app, clock):
    create(sqlite_app, "jobs", max_attempts=1, visibility_timeout=5)
    post(sqlite_app, "jobs", {"n": 1})
    (got,) = reserved(sqlite_app, "jobs")
    ack(sqlite_app, "jobs", [got["receipt"]])
    clock.advance(60)
    assert reserved(sqlite_app, "jobs") == []
    sqlite_app.get("/queue/jobs-dead/info", headers=sqlite_app.auth, status=404)


class FlakyStorage:
    """The real storage, with chosen calls failing once as if the store were
    unreachable (a fault injected around real storage, not a fake of it)."""

    def __init__(self, storage, fail: set[str]) -> None:
        self._storage = storage
        self.fail = set(fail)

    def __getattr__(self, name):
        attribute = getattr(self._storage, name)
        if name not in ("put_messages", "ack") or not callable(attribute):
            return attribute

        def call(queue, *args, **kwargs):
            key = f"{name}:{queue.name}"
            if key in self.fail:
                self.fail.discard(key)
                raise StorageUnavailable("injected")
            return attribute(queue, *args, **kwargs)

        return call


@pytest.mark.parametrize(
    "fail", [{"put_messages:jobs-dead"}, {"ack:jobs"}], ids=["post-fails", "ack-fails"]
)
def test_a_failed_dead_lettering_is_retried_and_stored_once(
    make_app, sqlite_storage, wrap_app, clock, fail
):
    """The dead letter is retried when its claim lapses; if the first post had
    landed, its dedup id keeps the dead-letter queue from holding it twice."""
    flaky = FlakyStorage(sqlite_storage, fail=set())
    app = wrap_app(make_app(flaky))
    create(app, "jobs", max_attempts=1, visibility_timeout=10)
    create(app, "jobs-dead")
    post(app, "jobs", {"n": 1})
    reserved(app, "jobs")
    clock.advance(10.1)
    flaky.fail = set(fail)
    assert reserved(app, "jobs") == []  # the reserve still answers
    assert flaky.fail == set(), "the injected failure was not reached"
    landed = len(dead_letters(app, clock))
    assert landed == (1 if fail == {"ack:jobs"} else 0)
    assert reserved(app, "jobs") == []  # claimed: not retried before the claim lapses
    clock.advance(10.1)
    assert reserved(app, "jobs") == []
    letters = dead_letters(app, clock)
    print(f"dead-lettering with {sorted(fail)}: after retry {len(letters)} dead letter(s)")
    assert len(letters) == 1, letters
    assert subscription_stats(app)["default"]["dead_lettered"] == 1


# -- redrive --------------------------------------------------------------------------
def test_redrive_reopens_dead_letters_in_their_subscription(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", max_attempts=1, visibility_timeout=10)
    for n in range(3):
        post(app, "jobs", {"n": n})
    clock.advance(0.01)  # past the microseconds a frozen clock's ids step ahead
    reserved(app, "jobs", limit=3)
    clock.advance(10.1)
    reserved(app, "jobs")
    assert len(dead_letters(app, clock)) == 3

    res = app.post_json("/queue/jobs-dead/redrive", {"limit": 2}, headers=app.auth)
    assert res.json == {
        "status": "ok",
        "moved": 2,
        "reposted": 0,
        "skipped": 0,
        "skipped_messages": {},
    }
    assert [m["body"] for m in dead_letters(app, clock)] == [{"n": 2}]
    again = reserved(app, "jobs", limit=10)
    assert sorted((m["body"]["n"], m["attempts"]) for m in again) == [(0, 1), (1, 1)]
    # A subscription that never dead-lettered them is not touched.
    assert [m["attempts"] for m in reserved(app, "jobs", subscription="other", limit=10)] == [
        1,
        1,
        1,
    ]
    res = app.post("/queue/jobs-dead/redrive", headers=app.auth)
    assert res.json["moved"] == 1 and dead_letters(app, clock) == []


def test_redrive_reposts_a_message_whose_original_is_gone(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", max_attempts=1, visibility_timeout=10)
    posted = post(app, "jobs", {"n": 1}).json["messages"][0]
    reserved(app, "jobs")
    clock.advance(10.1)
    reserved(app, "jobs")
    app.delete(f"/queue/jobs/messages/1:{posted['message_id']}", headers=app.auth)

    res = app.post_json("/queue/jobs-dead/redrive", {}, headers=app.auth)
    assert (res.json["moved"], res.json["reposted"]) == (0, 1)
    clock.advance(0.01)
    (fresh,) = read(app, "jobs").json["messages"]
    assert fresh["body"] == {"n": 1} and fresh["message_id"] != posted["message_id"]
    assert [m["attempts"] for m in reserved(app, "jobs")] == [1]
    assert dead_letters(app, clock) == []


def test_redrive_keeps_what_it_cannot_move_and_says_why(sqlite_app, clock):
    app = sqlite_app
    create(app, "jobs", max_attempts=1, visibility_timeout=10)
    create(app, "gone", max_attempts=1, visibility_timeout=10, dead_letter_queue="jobs-dead")
    for queue in ("jobs", "gone"):
        post(app, queue, {"from": queue})
        reserved(app, queue)
    clock.advance(10.1)
    for queue in ("jobs", "gone"):
        reserved(app, queue)
    app.delete("/queue/gone", headers=app.auth)
    stray = post(app, "jobs-dead", {"not": "a dead letter"}).json["messages"][0]
    letters = {m["body"].get("from"): m for m in dead_letters(app, clock)}

    res = app.post_json("/queue/jobs-dead/redrive", {}, headers=app.auth).json
    assert (res["moved"], res["reposted"], res["skipped"]) == (1, 0, 2)
    assert res["skipped_messages"] == {
        letters["gone"]["message_id"]: "the source queue gone no longer exists",
        stray["message_id"]: "not a dead letter: it has no valid source_* attributes",
    }
    assert sorted(m["message_id"] for m in dead_letters(app, clock)) == sorted(
        [letters["gone"]["message_id"], stray["message_id"]]
    )
    # A copy of a moved dead letter (as a redrive that died before its delete
    # leaves behind) is kept: its message is back in the subscription already.
    copy = app.post_json(
        "/queue/jobs-dead/batch",
        {"messages": [{"body": {"from": "jobs"}, "attributes": letters["jobs"]["attributes"]}]},
        headers=app.auth,
    ).json["messages"][0]
    res = app.post_json("/queue/jobs-dead/redrive", {}, headers=app.auth).json
    assert (res["moved"], res["reposted"], res["skipped"]) == (0, 0, 3)
    assert res["skipped_messages"][copy["message_id"]] == (
        "the source message is not finished in subscription default "
        "(already redriven, or being dead-lettered)"
    )
    assert [m["attempts"] for m in reserved(app, "jobs")] == [1]
