"""The dashboard's token login (docs/dashboard.md, "Auth") in headless Chromium: with tokens
configured (the HTTP listener's bunqueue tokens), a browser without the cookie is sent to the
login page; a wrong token is refused; the right one sets an HttpOnly SameSite=Strict cookie
that lets it in, until it logs out. The live stream and fragments answer 401 without it.
"""
from __future__ import annotations

import greenstalk
import httpx
import pytest

from .dashboard_support import server

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect  # noqa: E402

TOKEN = "s3cret-dash-token"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = server(tmp_path_factory.mktemp("login"), tokens=[TOKEN])
    yield s
    s.stop()


@pytest.fixture
def base(srv):
    return f"http://127.0.0.1:{srv.ports['http']}"


def test_login_with_the_token(browser, base, srv):
    ctx = browser.new_context()
    ctx.set_default_timeout(10_000)
    page = ctx.new_page()
    page.goto(f"{base}/ui/jobs?queue=default")
    assert page.url == f"{base}/ui/login"   # no cookie: redirected
    page.fill("#token", "wrong")
    page.click("#login")
    expect(page.locator("#login-error")).to_have_text("wrong token")
    assert ctx.cookies() == []
    page.fill("#token", TOKEN)
    page.click("#login")
    expect(page.locator("h1")).to_have_text("Queues")
    (cookie,) = ctx.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert cookie["value"] == TOKEN
    with greenstalk.Client(("127.0.0.1", srv.ports["beanstalk"]), use="auth") as c:
        jid = c.put("behind the token")
        page.goto(f"{base}/ui/jobs?queue=auth")
        expect(page.locator(f"#job-{jid}")).to_be_visible()
        expect(page.locator("#live.on")).to_be_visible()   # the stream is let in too
    page.click(".logout button")
    expect(page).to_have_url(f"{base}/ui/login")   # (the click does not wait for the redirect)
    assert ctx.cookies() == []
    page.goto(f"{base}/ui/")
    assert page.url == f"{base}/ui/login"
    ctx.close()


def test_without_a_browser(base):
    with httpx.Client(base_url=base) as h:
        r = h.get("/ui/")
        assert r.status_code == 303 and r.headers["location"] == "/ui/login"
        assert h.get("/ui/events").status_code == 401
        assert h.get("/ui/fragment/queues").status_code == 401
    with httpx.Client(base_url=base, cookies={"jobgate_ui": "nope"}) as h:
        assert h.get("/ui/").status_code == 303
        assert h.get("/ui/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert h.get("/ui/static/dashboard.css").status_code == 200   # no secret in it
        # a login form posted from another site is refused before the token is looked at
        r = h.post("/ui/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and "set-cookie" not in r.headers
    with httpx.Client(base_url=base, cookies={"jobgate_ui": TOKEN}) as h:
        assert h.get("/ui/").status_code == 200
        # a cross-site action with the cookie: refused by the origin check
        r = h.post("/ui/action/drain", data={"queue": "default", "confirm": "yes"},
                   headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        # the rest of the HTTP API keeps its Bearer rule
        assert h.get("/stats").status_code == 401
