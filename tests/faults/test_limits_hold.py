"""Limits that hold against a hostile application, on the server as shipped
(granian, 2 worker processes, SQLite): each call is a fresh connection, so the
kernel spreads them over both workers, and every figure is what the whole
server accepted.

Each test reproduces one way a limit used to be passed (docs/security.rst,
"What a hostile application can cost"): batches past a post rate, dead
letters past ``max_messages``, a quota before the server knew the usage,
bytes estimated instead of counted, a full rate table weakening another
application's limit, and three documented promises (a paused fair queue, a
purge, a ``max_length`` set on a full queue).
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tests.support import KEY

pytestmark = pytest.mark.slow

APPLICATIONS = """
[application:{app}]
keys = plain:{key}
allow = 127.0.0.0/8

[application:{app}-rate]
keys = plain:{key}
allow = 127.0.0.0/8
max_posts_per_second = 5

[application:{app}-store]
keys = plain:{key}
allow = 127.0.0.0/8
max_messages = 40

[application:{app}-bytes]
keys = plain:{key}
allow = 127.0.0.0/8
max_bytes = 3000

[application:{app}-big]
keys = plain:{key}
allow = 127.0.0.0/8
max_bytes = 400000

[application:{app}-subs]
keys = plain:{key}
allow = 127.0.0.0/8
max_subscriptions = 5

[application:{app}-hostile]
keys = plain:{key}
allow = 127.0.0.0/8
max_subscriptions = 1000
"""

#: The hostile application's table holds this many keys (``queuey.flow.keys_per_application``).
KEYS = 32


class Api:
    """One application's calls, each on a fresh connection."""

    def __init__(self, url: str, application: str) -> None:
        self.url = url
        self.headers = {"X-Application-Name": application, "ApplicationKey": KEY}

    def call(self, method: str, path: str, body=None) -> requests.Response:
        return requests.request(
            method, self.url + path, json=body, headers=self.headers, timeout=30
        )

    def create(self, name: str, **fields) -> None:
        res = self.call("POST", "/queue", {"queue_name": name, **fields})
        assert res.status_code == 201, res.text

    def batch(self, queue: str, bodies: list) -> requests.Response:
        return self.call(
            "POST", f"/queue/{queue}/batch", {"messages": [{"body": b} for b in bodies]}
        )

    def count(self, queue: str) -> int:
        """The queue's messages, read back."""
        res = self.call("GET", f"/queue/{queue}?limit=1000")
        assert res.status_code == 200, res.text
        return len(res.json()["messages"])


@pytest.fixture
def node(make_api_node, tmp_path, test_apps):
    apps = tmp_path / "limit-apps.ini"
    apps.write_text(APPLICATIONS.format(app=test_apps.app, key=KEY), encoding="utf-8")
    made = make_api_node(
        "limits",
        server="granian",
        **{
            "queuey.applications": str(apps),
            "queuey.limits.throttle_hold": "0",
            "queuey.flow.keys_per_application": str(KEYS),
        },
    )
    assert len(made.workers()) >= 2, "granian runs 2 worker processes"
    return made


def refusal(res: requests.Response) -> tuple[int, list[str]]:
    assert res.json()["status"] == "error", res.text
    return res.status_code, list(res.json()["error_msg"])


def test_batches_cannot_pass_a_post_rate(node, test_apps):
    """Defect: 5,000 messages in 5 s through a limit of 5 per second, in
    batches of 1,000 waiting out each Retry-After. A batch larger than the
    burst is refused whole, naming the limit; batches within it are charged
    in full, so over any window at most rate * T + burst pass."""
    api = Api(node.url, f"{test_apps.app}-rate")
    api.create("q")
    started = time.monotonic()
    big = 0
    while time.monotonic() - started < 2:
        res = api.batch("q", [{"n": n} for n in range(1000)])
        assert refusal(res) == (413, ["max_posts_per_second"])
        big += 1
    accepted: list[tuple[float, float, int]] = []
    lock = threading.Lock()

    def post(size: int) -> None:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            began = time.monotonic()
            res = api.batch("q", [{"n": n} for n in range(size)])
            if res.status_code == 201:
                with lock:
                    accepted.append((began, time.monotonic(), size))
            else:
                assert refusal(res) == (429, ["max_posts_per_second"])

    threads = [threading.Thread(target=post, args=(size,)) for size in (1, 2, 5, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    total = sum(size for _, _, size in accepted)
    worst = 0.0
    for began, _, _ in accepted:
        for _, ended, _ in accepted:
            if ended > began:
                inside = sum(n for b, e, n in accepted if b >= began and e <= ended)
                worst = max(worst, inside - (5 * (ended - began) + 5))
    print(
        f"batches of 1000 refused: {big}; accepted within the burst: {total} "
        f"in ~3 s by 4 posters; worst window over rate*T+burst: {worst:.2f}"
    )
    assert api.count("q") == total
    assert worst <= 0


def test_dead_letters_and_subscriptions_cannot_multiply_a_message(node, test_apps):
    """Defect: one message reserved and released under 100 invented
    subscriptions stored 101 messages against ``max_messages`` 40. Dead letters
    count toward the quota and wait as claims when it is full; a queue's
    subscriptions are bounded by ``max_subscriptions``."""
    api = Api(node.url, f"{test_apps.app}-store")
    api.create("jobs", max_attempts=1)
    assert api.call("POST", "/queue/jobs", {"n": 1}).status_code == 201
    released = dead = 0
    for n in range(100):
        sub = f"invented-{n}"
        got = api.call("POST", "/queue/jobs/reserve", {"subscription": sub}).json()["messages"]
        assert len(got) == 1
        res = api.call(
            "POST", "/queue/jobs/release", {"subscription": sub, "receipts": [got[0]["receipt"]]}
        )
        assert res.status_code == 200, res.text
        released += 1
        dead += res.json()["dead_lettered"]
    stored = api.count("jobs") + api.count("jobs-dead")
    print(f"released under 100 subscriptions: {released}; dead-lettered {dead}; stored {stored}")
    assert stored <= 40 and dead == stored - 1
    # Over its quota, the application's own posts are refused too.
    assert refusal(api.call("POST", "/queue/jobs", {"n": 2})) == (507, ["max_messages"])

    small = Api(node.url, f"{test_apps.app}-subs")
    small.create("jobs")
    for n in range(5):
        assert small.call("POST", "/queue/jobs/reserve", {"subscription": f"s{n}"}).ok
    assert small.call("POST", "/queue/jobs/reserve", {"subscription": "s0"}).ok
    res = small.call("POST", "/queue/jobs/reserve", {"subscription": "s5"})
    assert refusal(res) == (403, ["max_subscriptions"])
    res = small.call("PUT", "/queue/jobs/subscriptions/s6", {"rate": 1})
    assert refusal(res) == (403, ["max_subscriptions"])


def test_a_quota_holds_from_the_first_request_and_through_a_restart(node, make_api_node, test_apps):
    """Defect: before the first measurement a batch of 1,000 passed a quota of
    40, and so did concurrent first posts, after every restart. Unknown usage
    counts as empty plus the post; posts are counted as they are admitted,
    so concurrent ones cannot each take the last place."""
    api = Api(node.url, f"{test_apps.app}-store")
    api.create("first")
    assert refusal(api.batch("first", [{"n": n} for n in range(1000)])) == (507, ["max_messages"])
    codes: list[int] = []
    lock = threading.Lock()

    def post() -> None:
        for _ in range(3):
            res = api.batch("first", [{"n": n} for n in range(5)])
            with lock:
                codes.append(res.status_code)

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    stored = api.count("first")
    print(f"8 posters x 3 batches of 5 against 40: {codes.count(201)} accepted, stored {stored}")
    assert stored == 5 * codes.count(201) == 40
    assert set(codes) == {201, 507}

    node.kill()  # kill -9 of the server and its workers: the counts are the host's
    again = make_api_node("limits-again", server="granian", **_settings_of(node))
    api = Api(again.url, f"{test_apps.app}-store")
    assert refusal(api.call("POST", "/queue/first", {"n": 1})) == (507, ["max_messages"])


def _settings_of(node) -> dict[str, str]:
    """The settings a node's ini gave it (to start another on the same store)."""
    settings = {}
    for line in (node.log_path.parent / f"{node.name}.ini").read_text().splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.startswith("queuey."):
            settings[key] = value
    return settings


def test_bytes_are_counted_as_posted(node, test_apps):
    """Defect: with ``max_bytes`` 3,000 ten 480-byte messages were all taken,
    and 300 KB bodies after a measurement of tiny ones went on to 10.5 MB
    against 400 KB. Each post's own bytes are counted as it is admitted."""
    api = Api(node.url, f"{test_apps.app}-bytes")
    api.create("q")
    body = {"p": "x" * 472}  # stored as {"p":"xx..."}: 480 bytes
    codes = [api.call("POST", "/queue/q", body).status_code for _ in range(10)]
    print(f"ten 480-byte posts against 3000 bytes: {codes}")
    assert codes == [201] * 6 + [507] * 4

    big = Api(node.url, f"{test_apps.app}-big")
    big.create("q")
    assert big.call("POST", "/queue/q", {"n": 1}).status_code == 201
    body = {"p": "y" * 299_992}  # 300,000 bytes
    codes = [big.call("POST", "/queue/q", body).status_code for _ in range(3)]
    assert codes == [201, 507, 507]
    res = big.call("POST", "/queue/q", body)
    assert refusal(res) == (507, ["max_bytes"])
    assert "of its 400000 bytes" in res.json()["error_msg"]["max_bytes"]


def test_a_full_rate_table_refuses_its_own_application_only(node, test_apps):
    """Defect: 4,200 invented rate-limited subscriptions filled the shared
    table and another application's limit fell back to per-process buckets
    (50 accepted in 4 s at 5 per second). Each application has a table of its
    own: past its keys it is refused (503), never anybody else."""
    hostile = Api(node.url, f"{test_apps.app}-hostile")
    hostile.create("q")
    assert hostile.call("POST", "/queue/q", {"n": 1}).status_code == 201
    statuses = []
    for n in range(KEYS + 8):
        sub = f"slow-{n}"
        assert hostile.call("PUT", f"/queue/q/subscriptions/{sub}", {"rate": 0.001}).ok
        statuses.append(hostile.call("POST", "/queue/q/reserve", {"subscription": sub}).status_code)
    print(f"reserves of {KEYS + 8} rate-limited subscriptions, {KEYS} keys: {statuses}")
    assert statuses.count(200) <= KEYS
    assert statuses[-1] == 503

    victim = Api(node.url, f"{test_apps.app}-rate")
    victim.create("v")
    started = time.monotonic()
    accepted = 0
    while time.monotonic() - started < 3:
        accepted += victim.call("POST", "/queue/v", {"n": 1}).status_code == 201
    elapsed = time.monotonic() - started
    print(f"victim limited to 5/s: {accepted} accepted in {elapsed:.1f} s")
    assert accepted <= 5 * elapsed + 5


def test_documented_promises_hold(node, test_apps):
    """A paused queue answers 503 whatever else is true (a fair queue and a
    priority); a purge empties a full queue's length at once; a ``max_length``
    set on a queue that holds messages counts them at once."""
    api = Api(node.url, test_apps.app)
    api.create("fair", fair=True)
    assert api.call("POST", "/queue/fair/pause").ok
    res = api.call("POST", "/queue/fair?priority=3", {"n": 1})
    assert refusal(res) == (503, ["paused"])

    api.create("full", max_length=5)
    assert api.batch("full", [{"n": n} for n in range(5)]).status_code == 201
    assert refusal(api.call("POST", "/queue/full", {"n": 6})) == (507, ["max_length"])
    assert api.call("DELETE", "/queue/full?delete=false").ok  # a purge
    codes = [api.call("POST", "/queue/full", {"n": n}).status_code for n in range(6)]
    assert codes == [201] * 5 + [507]

    api.create("later")
    assert api.batch("later", [{"n": n} for n in range(10)]).status_code == 201
    assert api.call("PUT", "/queue/later", {"max_length": 5}).ok
    assert refusal(api.call("POST", "/queue/later", {"n": 11})) == (507, ["max_length"])
