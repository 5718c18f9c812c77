"""The HTTP client: every method against the real app, retries against a scripted server."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from queuey.client import (
    BadRequest,
    Conflict,
    NotFound,
    OutgoingMessage,
    QueueInfo,
    QueueyClient,
    ReceivedMessage,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from tests.client.scripted import ScriptedServer, make_client, refused_url

#: A message id as the service spells them (a version-1 UUID's hex).
MESSAGE_ID = "0123456789ab1def8123456789abcdef"
UNAVAILABLE = {"status": "error", "error_msg": {"storage": "unavailable"}}
POSTED = {
    "status": "ok",
    "messages": [{"message_id": MESSAGE_ID, "timestamp": 1.5, "partition": 1}],
}


#: A queue's metadata as the service answers it (GET /queue/q/info).
INFO = {
    "status": "ok",
    "queue_name": "q",
    "partitions": 2,
    "created": 1_700_000_000,
    "type": "public",
    "ttl": 600,
    "consistency": "strong",
    "visibility_timeout": 30,
    "max_attempts": 0,
    "dead_letter_queue": "q-dead",
    "delay": 0,
}


@pytest.mark.unit
def test_503_is_retried_honouring_retry_after_up_to_max_backoff(scripted):
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0.03"})
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "30"})
    scripted.answer(200, INFO)
    client = make_client(scripted.url, max_backoff=0.2)
    assert client.queue_info("q").partitions == 2
    assert client.sleeps == [0.03, 0.2]
    assert len(scripted.requests) == 3


def sent_dedup_ids(scripted: ScriptedServer) -> list[list[str | None]]:
    """The ``dedup_id`` of each message of each recorded request, in order."""
    found = []
    for _, path, body in scripted.requests:
        if "/batch" in path:
            found.append([m.get("dedup_id") for m in json.loads(body)["messages"]])
        else:
            query = parse_qs(urlsplit(path).query)
            found.append([query.get("dedup_id", [None])[0]])
    return found


@pytest.mark.unit
@pytest.mark.parametrize("method", ["post", "post_batch"])
def test_a_post_answered_503_is_sent_again_with_the_same_dedup_ids(scripted, method):
    """A 503 may come after the write was applied: the repeat carries the same
    ``dedup_id``, so the service stores the message once either way."""
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0"})
    scripted.answer(201, POSTED)
    client = make_client(scripted.url, retries=3)
    if method == "post":
        assert client.post("q", {"a": 1}).message_id == MESSAGE_ID
    else:
        client.post_batch("q", [{"a": 1}, OutgoingMessage({"b": 2}, dedup_id="mine")])
    first, second = sent_dedup_ids(scripted)
    assert first == second and all(first), "the repeat is the same post"
    assert all(len(d) == 32 for d in first if d != "mine")
    if method == "post_batch":
        assert first[1] == "mine", "a caller's dedup_id is kept"
    assert client.sleeps == [0]


@pytest.mark.unit
def test_a_post_that_timed_out_goes_to_the_next_node_with_the_same_dedup_id(scripted):
    other = ScriptedServer()
    try:
        scripted.answer(201, POSTED, delay=0.5)
        other.answer(201, POSTED)
        client = make_client([scripted.url, other.url], timeout=0.1)
        assert client.post("q", {"a": 1}).partition == 1
        assert sent_dedup_ids(scripted) == sent_dedup_ids(other)
    finally:
        other.close()


@pytest.mark.unit
def test_no_dedup_id_is_made_up_when_the_client_never_retries(scripted):
    scripted.answer(201, POSTED)
    make_client(scripted.url, retries=0).post("q", {"a": 1})
    assert sent_dedup_ids(scripted) == [[None]]


@pytest.mark.unit
@pytest.mark.parametrize("method", ["post", "post_batch", "create_queue"])
def test_a_post_without_dedup_id_answered_503_is_sent_once_and_its_outcome_is_unknown(
    scripted, method
):
    """With ``auto_dedup=False`` (or for a queue creation) a 503 may come after
    the write was applied: posting again could store it twice."""
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0"})
    scripted.answer(201, POSTED)
    client = make_client(scripted.url, retries=3, auto_dedup=False)
    call = {
        "post": lambda: client.post("q", {"a": 1}),
        "post_batch": lambda: client.post_batch("q", [{"a": 1}]),
        "create_queue": lambda: client.create_queue("q"),
    }[method]
    with pytest.raises(Unavailable) as info:
        call()
    assert len(scripted.requests) == 1, "sent once"
    assert info.value.outcome_unknown is True
    assert info.value.status == 503 and info.value.error_msg == {"storage": "unavailable"}
    assert client.sleeps == []


@pytest.mark.unit
def test_a_post_with_an_idempotency_key_may_be_retried_after_a_503(scripted):
    """The hook the dedup_id of the next release uses: a keyed post is safe to repeat."""
    scripted.answer(503, UNAVAILABLE, {"Retry-After": "0.01"})
    scripted.answer(201, POSTED)
    client = make_client(scripted.url, retries=3)
    data = client._request("POST", "/queue/q", json={"a": 1}, repeatable=True)
    assert data["messages"][0]["message_id"] == MESSAGE_ID
    assert len(scripted.requests) == 2 and client.sleeps == [0.01]


@pytest.mark.unit
def test_a_rejected_post_has_a_known_outcome(scripted):
    scripted.answer(400, {"status": "error", "error_msg": {"ttl": "too large"}})
    client = make_client(scripted.url)
    with pytest.raises(BadRequest) as info:
        client.post("q", {"a": 1}, ttl=10**9)
    assert info.value.outcome_unknown is False


@pytest.mark.unit
def test_a_post_no_node_accepted_has_a_known_outcome():
    client = make_client([refused_url()], retries=1)
    with pytest.raises(Unavailable) as info:
        client.post("q", {"a": 1})
    assert info.value.outcome_unknown is False, "never sent: safe to post again"


@pytest.mark.unit
def test_503_after_every_retry_raises_unavailable_with_the_servers_message(scripted):
    for _ in range(3):
        scripted.answer(503, UNAVAILABLE)
    client = make_client(scripted.url, retries=2)
    with pytest.raises(Unavailable) as info:
        client.queue_info("q")
    assert info.value.status == 503
    assert info.value.error_msg == {"storage": "unavailable"}
    assert len(scripted.requests) == 3
    assert all(0 <= s <= 0.05 for s in client.sleeps)  # full jitter within the cap


@pytest.mark.unit
def test_fails_over_to_the_next_url_when_a_node_refuses(scripted):
    scripted.answer(201, POSTED)
    client = make_client([refused_url(), scripted.url])
    assert client.post("q", {"a": 1}).partition == 1  # a POST: never sent, so retried
    assert len(scripted.requests) == 1
    # the client stays on the node that answered
    scripted.answer(200, INFO)
    assert client.queue_info("q").partitions == 2
    assert len(client.sleeps) == 1


@pytest.mark.unit
def test_no_node_reachable_raises_unavailable():
    client = make_client([refused_url(), refused_url()], retries=3)
    with pytest.raises(Unavailable):
        client.read("q")
    assert len(client.sleeps) == 3


@pytest.mark.unit
def test_a_post_without_dedup_id_that_timed_out_is_not_retried(scripted):
    scripted.answer(201, POSTED, delay=0.5)
    client = make_client(scripted.url, timeout=0.1, auto_dedup=False)
    with pytest.raises(Unavailable, match="not retried") as info:
        client.post("q", {"a": 1})
    assert len(scripted.requests) == 1
    assert info.value.outcome_unknown is True


@pytest.mark.unit
def test_an_idempotent_request_that_timed_out_is_retried(scripted):
    scripted.answer(200, {"status": "ok", "messages": []}, delay=0.5)
    scripted.answer(200, {"status": "ok", "messages": []})
    client = make_client(scripted.url, timeout=0.2)
    assert client.read("q") == []
    assert len(scripted.requests) == 2


@pytest.mark.unit
@pytest.mark.parametrize(
    ("status", "error"),
    [(400, BadRequest), (401, Unauthorized), (404, NotFound), (409, Conflict), (413, TooLarge)],
)
def test_errors_are_typed_and_carry_error_msg(scripted, status, error):
    scripted.answer(status, {"status": "error", "error_msg": {"limit": "must be 1..1000"}})
    client = make_client(scripted.url)
    with pytest.raises(error) as info:
        client.read("q", limit=5000)
    assert info.value.error_msg == {"limit": "must be 1..1000"}
    assert info.value.status == status
    assert len(scripted.requests) == 1, "client errors are not retried"


@pytest.mark.unit
def test_headers_and_parameters_on_the_wire(scripted):
    scripted.answer(200, {"status": "ok", "messages": []})
    client = make_client(scripted.url)
    client.read("my q", since_timestamp=1700000000.000001, partitions=[1, 3], order="ascending")
    method, path, _ = scripted.requests[0]
    assert method == "GET"
    assert path.startswith("/queue/my%20q?")
    assert "since_timestamp=1700000000.000001" in path
    assert "partitions=1%2C3" in path
    assert "order=ascending" in path


# ------------------------------------------------------------ against the real app


def test_queue_lifecycle(client):
    info = client.create_queue("lifecycle", partitions=3, ttl=600)
    work_queue = (30, 0, "lifecycle-dead", 0)  # visibility timeout, attempts, dead letters, delay
    expected = QueueInfo(
        "lifecycle", 3, info.created, "public", 600, *work_queue, consistency="strong"
    )
    assert info == expected and info.name == "lifecycle"
    assert info.created > 1_600_000_000
    assert client.queue_info("lifecycle").partitions == 3
    with pytest.raises(Conflict):
        client.create_queue("lifecycle")
    assert client.update_queue("lifecycle", partitions=5).partitions == 5
    with pytest.raises(BadRequest) as info_err:
        client.update_queue("lifecycle", partitions=2)
    assert "partitions" in info_err.value.error_msg
    client.create_queue("other")
    assert client.list_queues() == ["lifecycle", "other"]
    detailed = client.list_queues(details=True)
    assert [q.name for q in detailed] == ["lifecycle", "other"]
    assert client.list_queues(offset="lifecycle") == ["other"]
    assert [q.name for q in client.iter_queues(page_size=1)] == ["lifecycle", "other"]
    client.delete_queue("other")
    with pytest.raises(NotFound):
        client.queue_info("other")
    generated = client.create_queue()
    assert len(generated.name) == 32


def test_post_read_and_page(client):
    client.create_queue("msgs", partitions=2)
    one = client.post("msgs", {"n": 0}, partition=2)
    assert one.partition == 2 and len(one.message_id) == 32
    batch = client.post_batch(
        "msgs",
        [{"n": 1}, OutgoingMessage({"n": 2}, partition=1), OutgoingMessage({"n": 3}, ttl=60)],
    )
    assert [p.partition for p in batch][1] == 1
    newest = client.read("msgs", limit=2)
    assert [m.body["n"] for m in newest] == [3, 2]
    assert isinstance(newest[0], ReceivedMessage)
    oldest_first = client.read("msgs", order="ascending", limit=10)
    assert [m.body["n"] for m in oldest_first] == [0, 1, 2, 3]
    # since_timestamp excludes exactly the message whose timestamp it is
    after = client.read("msgs", since_timestamp=one.timestamp, order="ascending")
    assert [m.body["n"] for m in after] == [1, 2, 3]
    after_id = client.read("msgs", since=batch[0].message_id, order="ascending")
    assert [m.body["n"] for m in after_id] == [2, 3]
    only_p1 = client.read("msgs", partitions=[1], order="ascending")
    assert all(m.partition == 1 for m in only_p1)
    assert [m.body["n"] for m in client.iter_messages("msgs", page_size=1)] == [0, 1, 2, 3]
    assert [m.body["n"] for m in client.iter_messages("msgs", since=one.message_id)] == [1, 2, 3]


def test_get_and_delete_messages_by_ref(client):
    client.create_queue("refs", partitions=2)
    posted = client.post_batch("refs", [OutgoingMessage({"n": i}, partition=2) for i in range(3)])
    refs = [f"{p.partition}:{p.message_id}" for p in posted]
    got = client.get_messages("refs", refs[:2])
    assert sorted(m.body["n"] for m in got) == [0, 1]
    assert got[0].ref in refs
    client.delete_messages("refs", refs[:1])
    assert [m.body["n"] for m in client.get_messages("refs", refs)] == [1, 2]


def test_checkpoints_and_heartbeat(client):
    client.create_queue("cp", partitions=3)
    first = client.post("cp", {"n": 1}, partition=1)
    third = client.post("cp", {"n": 2}, partition=3)
    assert client.get_checkpoints("cp", "workers") == {}
    client.set_checkpoints("cp", "workers", {1: first.message_id, 3: third.message_id})
    assert client.get_checkpoints("cp", "workers") == {1: first.message_id, 3: third.message_id}
    assert client.heartbeat()["status"] == "ok"


def test_wrong_key_and_unknown_queue(live_server):
    bad = QueueyClient(live_server.url, live_server.application, "wrong", retries=0)
    with pytest.raises(Unauthorized):
        bad.create_queue("x")
    bad.close()
    with QueueyClient(live_server.url, live_server.application, live_server.key) as good:
        with pytest.raises(NotFound):
            good.post("missing", {"a": 1})


class TruncatingServer(ScriptedServer):
    """Announces a longer body than it sends, then closes: the answer breaks off."""

    def __init__(self) -> None:
        super().__init__()
        outer = self

        class Handler(self.server.RequestHandlerClass):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with outer.lock:
                    outer.requests.append((self.command, self.path, b""))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.write(b'{"status": "ok"')
                self.close_connection = True

            do_GET = do_POST = _answer

        self.server.RequestHandlerClass = Handler


@pytest.mark.unit
@pytest.mark.parametrize("method", ["read", "post", "post without dedup_id"])
def test_an_answer_that_breaks_off_is_a_client_error_with_an_unknown_outcome(method):
    server = TruncatingServer()
    try:
        client = make_client(server.url, retries=1, auto_dedup=method != "post without dedup_id")
        call = client.read if method == "read" else lambda q: client.post(q, {"a": 1})
        with pytest.raises(Unavailable) as info:
            call("q")
        assert info.value.outcome_unknown is True
        if method == "post":
            assert len(server.requests) == 2, "a post with a dedup_id is sent again"
        if method == "post without dedup_id":
            assert len(server.requests) == 1, "a post without one is sent once"
    finally:
        server.close()
