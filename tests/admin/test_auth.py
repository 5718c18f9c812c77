"""Signing in to the admin pages: keys, the allowlist, the session cookie, CSRF."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie

from queuey import applications
from queuey.applications import applications_from_mapping
from tests.admin.conftest import ADMIN_SETTINGS, csrf_of, sign_in
from tests.support import KEY, REMOTE_KEY, ROTATED_KEY

REFUSED = "Unknown application or wrong key."


def session_cookie(response) -> SimpleCookie:
    (header,) = [h for h in response.headers.getall("Set-Cookie") if h.startswith("queuey_admin=")]
    cookie = SimpleCookie()
    cookie.load(header)
    return cookie


def test_a_page_asks_to_sign_in_first_and_comes_back_after(admin_app):
    res = admin_app.get("/admin/queue/jobs?x=1", status=303)
    assert res.location.endswith("/admin/signin?next=%2Fadmin%2Fqueue%2Fjobs%3Fx%3D1")
    form = res.follow().forms[0]
    form["application"] = admin_app.apps.app
    form["key"] = KEY
    res = form.submit(status=303)
    assert res.location.endswith("/admin/queue/jobs?x=1")


def test_signing_in_sets_a_strict_httponly_cookie_scoped_to_admin(admin_app):
    res = sign_in(admin_app)
    assert res.location.endswith("/admin/")
    header = [h for h in res.headers.getall("Set-Cookie") if h.startswith("queuey_admin=")][0]
    assert "HttpOnly" in header and "SameSite=Strict" in header
    assert "Path=/admin;" in header + ";"
    assert "secure" not in header.lower()  # queuey.admin.secure_cookie is off by default
    assert session_cookie(res)["queuey_admin"]["max-age"] == "3600"
    page = res.follow()
    assert admin_app.apps.app in page.text and "Sign out" in page.text


def test_secure_cookie_setting(make_app, sqlite_storage, wrap_app):
    client = wrap_app(
        make_app(sqlite_storage, **ADMIN_SETTINGS, **{"queuey.admin.secure_cookie": "true"})
    )
    res = client.get("/admin/signin")
    assert "; secure" in res.headers["Set-Cookie"].lower()


def test_a_rotated_key_stored_as_its_digest_signs_in(admin_app):
    sign_in(admin_app, key=ROTATED_KEY)
    admin_app.get("/admin/", status=200)


def test_a_wrong_key_is_refused(admin_app):
    res = sign_in(admin_app, key="not-the-key", status=401)
    assert REFUSED in res.text
    admin_app.get("/admin/", status=303)


def test_an_unknown_application_gets_the_same_answer(admin_app):
    res = sign_in(admin_app, application="nobody", status=401)
    assert REFUSED in res.text and "nobody" in res.text  # the name stays in the form
    assert KEY not in res.text


def test_an_unknown_application_costs_a_key_check_and_reads_alike(admin_app, monkeypatch):
    """The page for an unknown name and for a real one with a wrong key differ
    only in the name echoed back (and the form's token), and both check a key."""
    digests = []
    real_digest = applications.digest

    def counted(text):
        digests.append(text)
        return real_digest(text)

    monkeypatch.setattr(applications, "digest", counted)
    pages = {}
    for name in ("nobodyxyz", admin_app.apps.remote_app):
        form = admin_app.get("/admin/signin").forms[0]
        form["application"], form["key"] = name, "not-the-key"
        digests.clear()
        res = form.submit(status=401)
        text = re.sub(r'value="[0-9a-f]{40,}"', "", res.text).replace(name, "NAME")
        pages[name] = (res.status_code, text, len(digests))
    unknown, wrong = pages.values()
    assert unknown == wrong
    assert unknown[2] == 1 and REFUSED in unknown[1]


def test_a_disallowed_address_is_refused_at_sign_in(admin_app):
    # The remote application's key is good only from 10.0.0.0/8.
    res = sign_in(admin_app, application=admin_app.apps.remote_app, key=REMOTE_KEY, status=403)
    assert "This address may not use the application&#39;s key." in res.text
    admin_app.get("/admin/", status=303)


def test_the_allowlist_is_checked_on_every_request(admin):
    admin.get("/admin/", status=200)
    res = admin.get("/admin/", extra_environ={"REMOTE_ADDR": "192.0.2.7"}, status=403)
    assert "This address may not use the application&#39;s key." in res.text
    assert res.content_type == "text/html"


def test_removing_the_key_ends_the_session(admin):
    registry = admin.app.registry
    app = admin.apps.app
    registry.queuey.applications = {
        **registry.queuey.applications,
        **applications_from_mapping({app: {"keys": [f"plain:{ROTATED_KEY}"]}}),
    }
    assert admin.get("/admin/", status=303).location.endswith("/admin/signin?next=%2Fadmin%2F")


def test_sign_out_ends_the_session(admin):
    page = admin.get("/admin/")
    page.forms[0].submit(status=303)  # the sign-out form in the header
    admin.get("/admin/", status=303)


def test_sign_in_without_its_csrf_token_is_refused(admin_app):
    admin_app.get("/admin/signin")
    res = admin_app.post(
        "/admin/signin", {"application": admin_app.apps.app, "key": KEY}, status=400
    )
    assert "nothing was changed" in res.text
    admin_app.get("/admin/", status=303)


def test_api_headers_do_not_open_admin_pages(admin_app):
    admin_app.get("/admin/", headers=admin_app.auth, status=303)


def test_the_session_cookie_does_not_authenticate_the_api(admin):
    res = admin.get("/queue", status=401)
    assert res.json["status"] == "error"


def test_next_never_leaves_the_admin_pages(admin_app):
    page = admin_app.get("/admin/signin", params={"next": "https://example.org/"})
    form = page.forms[0]
    assert form["next"].value == "/admin/"
    res = admin_app.post(
        "/admin/signin",
        {
            "application": admin_app.apps.app,
            "key": KEY,
            "next": "//example.org/",
            "csrf_token": csrf_of(page),
        },
        status=303,
    )
    assert res.location == "http://localhost/admin/"


def test_admin_answers_carry_security_headers(admin_app):
    for res in (admin_app.get("/admin/signin"), admin_app.get("/admin/static/admin.css")):
        csp = res.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert res.headers["X-Frame-Options"] == "DENY"
        assert res.headers["Referrer-Policy"] == "same-origin"
    assert admin_app.get("/admin/signin").headers["Cache-Control"] == "no-store"
    assert "Content-Security-Policy" not in admin_app.get("/__lbheartbeat__").headers


def test_admin_disabled_leaves_only_the_api(make_app, sqlite_storage, wrap_app):
    client = wrap_app(
        make_app(sqlite_storage, **ADMIN_SETTINGS, **{"queuey.admin.enabled": "false"})
    )
    assert client.get("/admin/", status=404).json["status"] == "error"
