"""The admin pages in a real headless Chromium against a live waitress server.

One browser serves the whole module (starting Chromium is the slow part);
each test has its own server, application and cookies.
"""

from __future__ import annotations

import pytest
import requests

from tests.admin import browser
from tests.support import wait_until

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))


@pytest.fixture(scope="module")
def driver():
    with browser.chromium() as driver:
        yield driver


@pytest.fixture
def server(make_live_server, driver):
    server = make_live_server("sqlite")
    driver.delete_all_cookies()
    browser.resize(driver, browser.DESKTOP)
    return server


class Api:
    """The HTTP API of a live server, with the test application's headers."""

    def __init__(self, server) -> None:
        self.url = server.url
        self.headers = {"X-Application-Name": server.application, "ApplicationKey": server.key}

    def call(self, method: str, path: str, **kwargs):
        res = requests.request(method, self.url + path, headers=self.headers, timeout=10, **kwargs)
        res.raise_for_status()
        return res.json()

    def create(self, name: str, **params):
        return self.call("POST", "/queue", json={"queue_name": name, **params})

    def post(self, name: str, body: dict):
        return self.call("POST", f"/queue/{name}", json=body)

    def depth(self, name: str) -> int:
        return self.call("GET", f"/queue/{name}/stats")["messages"]


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def signed_in(driver, server):
    browser.sign_in(driver, server.url, server.application, server.key)
    wait_until(lambda: driver.current_url.endswith("/admin/"), what="the queue list")
    return driver


def test_sign_in_and_a_wrong_key_refused(driver, server):
    browser.sign_in(driver, server.url, server.application, "not-the-key")
    assert "Unknown application or wrong key." in css(driver, "#refusal").text
    assert driver.current_url.endswith("/admin/signin")
    driver.get(server.url + "/admin/")
    assert "/admin/signin" in driver.current_url  # still signed out
    signed_in(driver, server)
    assert css(driver, ".who").text == server.application
    assert "No queues" in css(driver, "main").text


def test_csrf_token_missing_is_refused_and_nothing_changes(driver, server):
    api = Api(server)
    api.create("keep")
    api.post("keep", {"n": 1})
    signed_in(driver, server)
    driver.get(server.url + "/admin/queue/keep/purge")
    css(driver, "input[name=confirm]").send_keys("keep")
    driver.execute_script("document.querySelector('main input[name=csrf_token]').remove()")
    browser.click_and_wait(driver, css(driver, "main button[type=submit]"))
    assert "security token was missing or wrong" in css(driver, "main").text
    assert api.depth("keep") == 1


def test_create_post_browse_and_purge(driver, server):
    from selenium.webdriver.support.ui import Select

    api = Api(server)
    signed_in(driver, server)
    browser.click_and_wait(driver, css(driver, "a.button[href='/admin/new']"))
    css(driver, "input[name=queue_name]").send_keys("orders")
    partitions = css(driver, "input[name=partitions]")
    partitions.clear()
    partitions.send_keys("3")
    Select(css(driver, "select[name=type]")).select_by_visible_text("private")
    browser.click_and_wait(driver, css(driver, "main button[type=submit]"))
    assert driver.current_url.endswith("/admin/queue/orders")
    assert "Created queue orders." in css(driver, ".flash.ok").text
    assert api.call("GET", "/queue/orders/info")["type"] == "private"

    body = css(driver, "textarea[name=body]")
    body.clear()
    body.send_keys('{"order": 7, "items": ["tea", "<b>cake</b>"]}')
    browser.click_and_wait(driver, css(driver, "#post-form button[type=submit]"))
    assert "Posted message" in css(driver, ".flash.ok").text
    assert css(driver, "#depth").text == "1"

    driver.get(server.url + "/admin/queue/orders/messages")
    shown = css(driver, "pre.body").text
    assert shown == '{\n  "order": 7,\n  "items": [\n    "tea",\n    "<b>cake</b>"\n  ]\n}'

    driver.get(server.url + "/admin/queue/orders/purge")
    button = css(driver, "main button[type=submit]")
    assert not button.is_enabled()  # until the name is typed
    css(driver, "input[name=confirm]").send_keys("orders")
    assert button.is_enabled()
    browser.click_and_wait(driver, button)
    assert "Purged queue orders" in css(driver, ".flash.ok").text
    assert css(driver, "#depth").text == "0"
    assert api.depth("orders") == 0


def test_dead_letters_redrive(driver, server):
    api = Api(server)
    api.create("jobs", max_attempts=1)
    for n in range(2):
        api.post("jobs", {"n": n})
    receipts = [
        m["receipt"] for m in api.call("POST", "/queue/jobs/reserve", json={"limit": 2})["messages"]
    ]
    released = api.call("POST", "/queue/jobs/release", json={"receipts": receipts, "error": "boom"})
    assert released["dead_lettered"] == 2

    signed_in(driver, server)
    driver.get(server.url + "/admin/queue/jobs/dead")
    assert css(driver, "#dead-count").text == "2"
    assert "boom" in css(driver, ".messages").text
    browser.click_and_wait(driver, css(driver, "#redrive-form button"))
    assert "Redrive: 2 moved back" in css(driver, ".flash.ok").text
    assert "No dead letters" in css(driver, "main").text
    again = api.call("POST", "/queue/jobs/reserve", json={"limit": 10})["messages"]
    assert sorted(m["body"]["n"] for m in again) == [0, 1]


def test_pages_fit_a_phone_screen(driver, server):
    api = Api(server)
    api.create("a-queue-with-a-rather-long-name-for-a-phone", partitions=4)
    api.post("a-queue-with-a-rather-long-name-for-a-phone", {"text": "x" * 300, "n": 1})
    signed_in(driver, server)
    browser.resize(driver, browser.PHONE, mobile=True)
    queue = "/admin/queue/a-queue-with-a-rather-long-name-for-a-phone"
    for path in (
        "/admin/",
        queue,
        queue + "/messages",
        queue + "/dead",
        "/admin/new",
        "/admin/groups",
    ):
        driver.get(server.url + path)
        width, scroll = driver.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth]"
        )
        assert width == browser.PHONE[0]
        assert scroll <= width, f"{path} overflows a phone's width: {scroll} > {width}"


def test_pause_posting_by_clicking_then_resume(driver, server):
    api = Api(server)
    api.create("orders")
    signed_in(driver, server)
    driver.get(server.url + "/admin/queue/orders")
    browser.click_and_wait(driver, css(driver, "#posting-form button"))
    assert "Paused posting to queue orders" in css(driver, ".flash.ok").text
    assert css(driver, "#posting-state").text == "paused"
    refused = requests.post(
        f"{server.url}/queue/orders", json={"n": 1}, headers=api.headers, timeout=10
    )
    assert refused.status_code == 503 and "paused" in refused.json()["error_msg"]

    browser.click_and_wait(driver, css(driver, "a.brand"))
    assert css(driver, "td[data-label=Flow] .tag.paused").text == "paused"
    driver.get(server.url + "/admin/queue/orders")
    browser.click_and_wait(driver, css(driver, "#posting-form button"))
    assert css(driver, "#posting-state").text == "open"
    api.post("orders", {"n": 2})
    assert api.depth("orders") == 1
