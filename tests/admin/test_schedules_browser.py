"""The schedules page in a real headless Chromium against a live waitress server:
create a schedule through the form, pause it, see it paused, delete it after
typing its name (the button stays disabled until then)."""

from __future__ import annotations

import pytest

from tests.admin import browser, test_browser
from tests.admin.test_browser import Api, css, signed_in

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))

#: The admin pages' browser fixtures: one Chromium for the module, and a fresh
#: live server with no cookies for each test.
driver = test_browser.driver
server = test_browser.server


def test_create_pause_and_delete_a_schedule(driver, server):
    api = Api(server)
    api.create("reports")
    signed_in(driver, server)
    browser.click_and_wait(driver, css(driver, "nav a[href='/admin/schedules']"))
    assert "No schedules" in css(driver, "main").text

    css(driver, "#schedule-form input[name=name]").send_keys("nightly")
    css(driver, "#schedule-form input[name=queue]").send_keys("reports")
    css(driver, "#schedule-form input[name=cron]").send_keys("30 2 * * *")
    zone = css(driver, "#schedule-form input[name=timezone]")
    zone.clear()
    zone.send_keys("Europe/Paris")
    body = css(driver, "#schedule-form textarea[name=body]")
    body.clear()
    body.send_keys('{"report": "<b>nightly</b>"}')
    browser.click_and_wait(driver, css(driver, "#schedule-form button[type=submit]"))
    assert "Created schedule nightly." in css(driver, ".flash.ok").text
    row = css(driver, "#schedule-nightly")
    assert "30 2 * * *" in row.text and "Europe/Paris" in row.text
    assert css(driver, "#schedule-nightly .state").text == "active"
    (listed,) = api.call("GET", "/schedules")["schedules"]
    assert listed["message"]["body"] == {"report": "<b>nightly</b>"}

    browser.click_and_wait(driver, css(driver, "#pause-nightly button"))
    assert "Paused schedule nightly." in css(driver, ".flash.ok").text
    assert css(driver, "#schedule-nightly .state").text == "paused"
    assert api.call("GET", "/schedules/nightly")["paused"] is True

    browser.resize(driver, browser.PHONE, mobile=True)
    driver.get(server.url + "/admin/schedules")
    width, scroll = driver.execute_script(
        "return [window.innerWidth, document.documentElement.scrollWidth]"
    )
    assert scroll <= width, f"the schedules page overflows a phone's width: {scroll} > {width}"
    browser.resize(driver, browser.DESKTOP)

    browser.click_and_wait(driver, css(driver, "#schedule-nightly a[href$='/delete']"))
    button = css(driver, "main button[type=submit]")
    assert not button.is_enabled()  # until the name is typed
    css(driver, "input[name=confirm]").send_keys("nightly")
    assert button.is_enabled()
    browser.click_and_wait(driver, button)
    assert "Deleted schedule nightly." in css(driver, ".flash.ok").text
    assert "No schedules" in css(driver, "main").text
    assert api.call("GET", "/schedules")["schedules"] == []
