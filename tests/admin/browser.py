"""Headless Chromium for the admin pages' browser tests and the docs' screenshots.

Debian's ``chromium`` and ``chromium-driver`` packages (``make browser``
installs them); Selenium is pointed at both binaries and told to stay
offline, so Selenium Manager never tries to download a browser or a driver.
The flags keep an offline Chromium from calling home (without them it
retries refused connections all the time).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--metrics-recording-only",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
#: A phone's screen (an iPhone 12-15's CSS pixels).
PHONE = (390, 844)
DESKTOP = (1280, 900)


def missing() -> str | None:
    """Why the browser cannot start here, or ``None``."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing: run `make browser` (Debian's chromium and chromium-driver)"
    return None


@contextmanager
def chromium(size: tuple[int, int] = DESKTOP) -> Iterator:
    """A headless Chromium driven by Selenium, its profile removed afterwards."""
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="queuey-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={size[0]},{size[1]}")
    driver = webdriver.Chrome(
        service=Service(executable_path=str(CHROMEDRIVER), log_output=os.devnull),
        options=options,
    )
    try:
        driver.set_page_load_timeout(30)
        resize(driver, size)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def resize(driver, size: tuple[int, int], mobile: bool = False) -> None:
    """Make the page's viewport exactly ``size`` CSS pixels (a phone's when ``mobile``)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": mobile},
    )


def click_and_wait(driver, element, timeout: float = 10) -> None:
    """Click ``element`` (a link or a form's button) and wait for the next page
    to load: a click returns before the navigation it starts has finished. The
    old document is marked, so the wait ends in a document without the mark."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("window.queueyOldPage = true")
    element.click()
    # A script run while the navigation swaps documents may fail: try again.
    WebDriverWait(driver, timeout, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.queueyOldPage === undefined && document.readyState === 'complete'"
        )
    )


def sign_in(driver, base_url: str, application: str, key: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base_url + "/admin/signin")
    driver.find_element(By.NAME, "application").send_keys(application)
    driver.find_element(By.NAME, "key").send_keys(key)
    click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
