"""Take the admin pages' screenshots in docs/_static/ (``make screenshots``).

Starts Queuey on a throwaway SQLite file with a demo application, fills a few
queues through the HTTP API over an hour of simulated time (a manual clock,
so the chart has an hour of history), makes some dead letters, and drives
headless Chromium (the browser tests' set-up, :mod:`tests.admin.browser`)
through the main pages on a desktop-sized and a phone-sized screen.

The consumer groups page shows sample figures: a stand-in for the ZooKeeper
reader, so the picture does not need a running group.
"""

from __future__ import annotations

import logging
import random
import sys
import tempfile
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import queuey  # noqa: E402
from queuey.clock import ManualClock  # noqa: E402
from queuey.core.consumergroups import GroupFigures, GroupPartition, Member  # noqa: E402
from queuey.ids import MICROS  # noqa: E402
from tests.admin import browser  # noqa: E402
from tests.support import start_live_server  # noqa: E402

OUT = ROOT / "docs" / "_static"
APP, KEY = "shop", "demo-key-not-for-production"
APPLICATIONS = f"""
[application:{APP}]
keys = plain:{KEY}
allow = 127.0.0.0/8, ::1/128
"""


class SampleGroups:
    """Sample consumer groups for the picture (see the module's docstring)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def for_application(self, application: str) -> list[GroupFigures]:
        members = (
            Member("billing-7f3a", "worker-1.internal", 2417, self.now - 5400),
            Member("billing-91c2", "worker-2.internal", 2390, self.now - 5390),
        )
        partitions = tuple(
            GroupPartition(
                "orders",
                p,
                members[(p - 1) % 2].member,
                f"{p:02d}" * 16,
                self.now - lag,
                count,
                False,
                lag,
            )
            for p, count, lag in ((1, 3, 1.2), (2, 0, 0.0), (3, 41, 12.5), (4, 7, 2.0))
        )
        return [GroupFigures("billing", members, partitions, application)]


class Api:
    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update({"X-Application-Name": APP, "ApplicationKey": KEY})

    def __call__(self, method: str, path: str, **json):
        res = self.session.request(method, self.url + path, json=json or None, timeout=10)
        res.raise_for_status()
        return res.json()


def fill(api: Api, app, clock: ManualClock) -> None:
    """An hour of traffic, one step a minute, then some dead letters."""
    overview = app.registry.overview
    rng = random.Random(12)
    api("POST", "/queue", queue_name="orders", partitions=4, max_attempts=5)
    api("POST", "/queue", queue_name="emails", max_attempts=1, visibility_timeout=60)
    api("POST", "/queue", queue_name="thumbnails", partitions=2, type="private")
    api("POST", "/queue", queue_name="audit-log", ttl=604800)
    customers = ["ada", "grace", "linus", "barbara", "ken"]
    for minute in range(60):
        wave = 4 + int(6 * abs((minute % 30) - 15) / 15)
        messages = [
            {
                "body": {
                    "order_id": 10_000 + minute * 10 + n,
                    "customer": rng.choice(customers),
                    "items": [{"sku": f"SKU-{rng.randint(100, 999)}", "qty": rng.randint(1, 3)}],
                    "total": round(rng.uniform(5, 120), 2),
                },
                "partition_key": rng.choice(customers),
            }
            for n in range(wave)
        ]
        api("POST", "/queue/orders/batch", messages=messages)
        api("POST", "/queue/audit-log", event="checkout", minute=minute)
        clock.advance(1)
        taken = api("POST", "/queue/orders/reserve", limit=max(wave - 1 - minute % 3, 1))
        receipts = [m["receipt"] for m in taken["messages"]]
        if receipts:
            api("POST", "/queue/orders/ack", receipts=receipts)
        for name in ("orders", "audit-log"):
            overview.refresh(app.registry.workqueues.get_queue(APP, name))
        clock.advance(59)
    for n in range(4):
        api("POST", "/queue/emails", to=f"{customers[n]}@example.org", template="receipt")
    api("POST", "/queue/thumbnails", image="s3://bucket/cat.jpg", size=[320, 240])
    clock.advance(1)
    taken = api("POST", "/queue/emails/reserve", limit=3)["messages"]
    api(
        "POST",
        "/queue/emails/release",
        receipts=[m["receipt"] for m in taken],
        error="SMTP 451: mailbox temporarily unavailable",
    )
    clock.advance(1)
    for name in ("orders", "emails", "emails-dead", "thumbnails", "audit-log"):
        overview.refresh(app.registry.workqueues.get_queue(APP, name))


def shoot(driver, url: str, name: str, size: tuple[int, int], mobile: bool = False) -> None:
    """A full-page screenshot (up to 2,000 pixels tall) of ``url``."""
    browser.resize(driver, size, mobile)
    driver.get(url)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    browser.resize(driver, (size[0], min(max(height, size[1] if mobile else 0), 2000)), mobile)
    path = OUT / f"admin-{name}.png"
    path.write_bytes(driver.get_screenshot_as_png())
    print(f"{path.relative_to(ROOT)}: {path.stat().st_size // 1024} KiB")


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    OUT.mkdir(parents=True, exist_ok=True)
    if why := browser.missing():
        sys.exit(why)
    work = Path(tempfile.mkdtemp(prefix="queuey-screenshots-"))
    (work / "applications.ini").write_text(APPLICATIONS, encoding="utf-8")
    clock = ManualClock()
    clock.advance(-3600)
    app = queuey.main(
        {},
        **{
            "queuey.applications": str(work / "applications.ini"),
            "queuey.storage.backend": "queuey.storage.sqlite",
            "queuey.sqlite.path": str(work / "queuey.sqlite3"),
            "queuey.read_delay": "0",
            "queuey.stats.interval": "0",
            "queuey.admin.secret": "screenshots",
            "queuey.clock": clock,
        },
    )
    server = start_live_server(app, APP)
    try:
        fill(Api(server.url), app, clock)
        app.registry.groups = SampleGroups(clock.now_micros() / MICROS)
        with browser.chromium() as driver:
            browser.sign_in(driver, server.url, APP, KEY)
            base = server.url + "/admin"
            desktop = (1100, 700)
            shoot(driver, base + "/", "queues", desktop)
            shoot(driver, base + "/queue/orders", "queue", desktop)
            shoot(driver, base + "/queue/orders/messages", "messages", (1100, 900))
            shoot(driver, base + "/queue/emails/dead", "dead-letters", desktop)
            shoot(driver, base + "/groups", "groups", desktop)
            shoot(driver, base + "/queue/orders/purge", "confirm", (1100, 500))
            shoot(driver, base + "/", "phone", browser.PHONE, mobile=True)
            shoot(driver, base + "/queue/orders", "phone-queue", browser.PHONE, mobile=True)
            driver.delete_all_cookies()
            shoot(driver, base + "/signin", "signin", (1100, 520))
    finally:
        server.stop()
        app.registry.storage.close()


if __name__ == "__main__":
    main()
