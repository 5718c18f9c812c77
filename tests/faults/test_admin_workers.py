"""An operator's admin session on the production server as shipped: granian,
2 worker processes, no ``queuey.admin.secret`` in the ini.

Every request goes on a fresh connection, so the kernel hands them to either
worker; each must accept the session (and the sign-in form's CSRF token)
the other signed. Before the runner drew one secret for all its processes,
each worker signed with its own and about half of these requests bounced.
"""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest
import requests

from queuey.server import SESSION_SECRET_FILE, SHARED_DIR_ENV
from tests.support import KEY

pytestmark = pytest.mark.slow

COOKIE = re.compile(r"queuey_admin=([^;]*)")
CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


class Operator:
    """A browser that opens a new connection for every request."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookie = ""
        self.answers: list[tuple[str, int]] = []

    def send(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Connection": "close"}
        if self.cookie:
            headers["Cookie"] = f"queuey_admin={self.cookie}"
        res = requests.request(
            method, self.url + path, headers=headers, allow_redirects=False, timeout=10, **kwargs
        )
        found = COOKIE.search(res.headers.get("Set-Cookie", ""))
        if found:
            self.cookie = found.group(1)
        self.answers.append((f"{method} {path}", res.status_code))
        return res


def test_an_admin_session_holds_across_both_workers(make_api_node, test_apps):
    node = make_api_node("admin", server="granian")  # the ini sets no queuey.admin.secret
    assert len(node.workers()) >= 2
    operator = Operator(node.url)
    form = operator.send("GET", "/admin/signin")
    assert form.status_code == 200
    signed = operator.send(
        "POST",
        "/admin/signin",
        data={
            "csrf_token": CSRF.search(form.text).group(1),
            "application": test_apps.app,
            "key": KEY,
            "next": "/admin/",
        },
    )
    assert signed.status_code == 303 and signed.headers["Location"].endswith("/admin/"), (
        signed.status_code,
        signed.text[:300],
    )
    pages = [operator.send("GET", "/admin/") for _ in range(24)]
    bounced = [(n, res.status_code) for n, res in enumerate(pages) if res.status_code != 200]
    assert not bounced, operator.answers
    assert all(test_apps.app in page.text for page in pages)
    signed_out = operator.send(
        "POST", "/admin/signout", data={"csrf_token": CSRF.search(pages[-1].text).group(1)}
    )
    print(f"\n[granian, 2 workers, no queuey.admin.secret] {len(operator.answers)} admin requests")
    assert signed_out.status_code == 303 and signed_out.headers["Location"].endswith(
        "/admin/signin"
    )
    # The secret the runner drew: this user's only, and never in the log.
    shared = psutil.Process(node.workers()[0]).environ()[SHARED_DIR_ENV]
    secret = (Path(shared) / SESSION_SECRET_FILE).read_text()
    assert (Path(shared) / SESSION_SECRET_FILE).stat().st_mode & 0o077 == 0
    assert secret not in node.log_path.read_text(errors="replace")
