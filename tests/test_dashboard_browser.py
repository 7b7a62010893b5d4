"""The web dashboard at /ui (protocols/http/ui, docs/dashboard.md) in a real browser: headless
Chromium driven by Playwright, against an in-process server on a SQLite file with real
greenstalk clients and pipelined beanstalk puts.

- a job put over beanstalk appears in the open job list within a second (live updates);
- kick, retry and delete done in the browser, through the confirmation step, are what a
  greenstalk client sees next;
- paging through 100,000 jobs: first, nexts, last, prev; ids contiguous and ordered;
- hostile input (unknown queue, bad job id, bad cursors, cross-origin POSTs) answers
  400 / 403 / 404 pages, never a 500.
"""
from __future__ import annotations

import greenstalk
import httpx
import pytest

from .dashboard_support import put_many, server

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect  # noqa: E402

#: Playwright's wait for something the page must show: a functional bound, not a benchmark
SECOND = 1000


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = server(tmp_path_factory.mktemp("dash"))
    yield s
    s.stop()


@pytest.fixture
def base(srv):
    return f"http://127.0.0.1:{srv.ports['http']}"


@pytest.fixture
def gs(srv):
    clients = []

    def make(tube: str) -> greenstalk.Client:
        c = greenstalk.Client(("127.0.0.1", srv.ports["beanstalk"]), use=tube, watch=tube)
        clients.append(c)
        return c
    yield make
    for c in clients:
        c.close()


def row_ids(page) -> list:
    return [int(x) for x in page.eval_on_selector_all("tr.job", "rs => rs.map(r => r.dataset.id)")]


def drain(page, c, ids) -> None:
    """On a queue's job list: drain it through the confirmation step; the list is empty and
    greenstalk client `c` finds none of `ids`."""
    page.click("#q-drain")
    page.click("#confirm")
    expect(page.locator("#no-jobs")).to_be_visible()
    for i in ids:
        with pytest.raises(greenstalk.NotFoundError):
            c.peek(i)


def confirm(page, action: str) -> None:
    """Click the action's button, then confirm on the confirmation page."""
    page.click(f"#act-{action}")
    expect(page.locator("#confirm-text")).to_be_visible()
    page.click("#confirm")
    page.wait_for_load_state()


def test_job_put_over_beanstalk_appears_live(page, base, gs):
    c = gs("live")
    first = c.put("first")
    page.goto(f"{base}/ui/jobs?queue=live")
    expect(page.locator(f"#job-{first}")).to_be_visible()
    expect(page.locator("#live.on")).to_be_visible(timeout=5 * SECOND)   # stream open
    jid = c.put("hello <script>alert(1)</script>")
    row = page.locator(f"#job-{jid}")
    expect(row).to_be_visible(timeout=SECOND)
    expect(row.locator("code")).to_have_text("hello <script>alert(1)</script>")   # escaped
    expect(row.locator("td").nth(2)).to_have_text("65536")   # greenstalk's default pri
    urgent = c.put("urgent", priority=7)
    expect(page.locator(f"#job-{urgent} td").nth(2)).to_have_text("7", timeout=SECOND)
    page.goto(f"{base}/ui/")
    expect(page.locator("tr[data-queue=live]")).to_be_visible()
    before = page.locator("tr[data-queue=live] td").nth(1).inner_text()
    c.put("third")
    expect(page.locator("tr[data-queue=live] td").nth(1)).not_to_have_text(before,
                                                                           timeout=SECOND)


def test_kick_in_the_browser_is_seen_by_greenstalk(page, base, gs):
    c = gs("kicks")
    jid = c.put("to bury")
    job = c.reserve(timeout=1)
    c.bury(job)
    page.goto(f"{base}/ui/job/{jid}")
    expect(page.locator("#job-state")).to_have_text("buried")
    confirm(page, "kick")
    expect(page.locator("#job-state")).to_have_text("ready")
    assert c.stats_job(jid)["state"] == "ready"
    assert c.stats_job(jid)["kicks"] == 1
    assert c.reserve(timeout=1).id == jid


def test_retry_of_a_failed_job_in_the_browser_is_seen_by_greenstalk(page, base, gs):
    c = gs("retries")
    jid = c.put("to fail")
    pulled = httpx.get(f"{base}/queues/retries/jobs").json()["job"]   # an HTTP worker
    r = httpx.post(f"{base}/jobs/{pulled['id']}/fail", json={"error": "boom"}).json()
    assert r["ok"] is True
    page.goto(f"{base}/ui/job/{jid}")
    expect(page.locator("#job-state")).to_have_text("failed")
    expect(page.locator("#failure, #result").first).to_contain_text("boom")
    assert c.stats_job(jid)["state"] == "buried"   # beanstalk sees a failed job as buried
    confirm(page, "retry")
    expect(page.locator("#job-state")).to_have_text("ready")
    assert c.reserve(timeout=1).id == jid


def test_delete_and_promote_in_the_browser(page, base, gs):
    c = gs("deletes")
    jid = c.put("to delete")
    late = c.put("later", delay=3600)
    page.goto(f"{base}/ui/jobs?queue=deletes&state=delayed")
    assert row_ids(page) == [late]
    page.click(f"#job-{late} a")
    confirm(page, "promote")
    expect(page.locator("#job-state")).to_have_text("ready")
    assert c.stats_job(late)["state"] == "ready"
    page.goto(f"{base}/ui/job/{jid}")
    page.click("#act-delete")
    page.click("#cancel")   # the confirmation step can be left: nothing happens
    assert c.stats_job(jid)["state"] == "ready"
    confirm(page, "delete")
    expect(page.locator("#queue-name")).to_have_text("deletes")   # back to the list
    assert row_ids(page) == [late]
    with pytest.raises(greenstalk.NotFoundError):
        c.peek(jid)


def test_pause_and_drain_a_queue(page, base, gs):
    c = gs("drains")
    ids = [c.put(f"d{i}") for i in range(3)]
    page.goto(f"{base}/ui/jobs?queue=drains")
    page.click("#q-pause")
    page.click("#confirm")
    expect(page.locator("#jobs .tag.paused")).to_be_visible()
    assert c.stats_tube("drains")["pause"] > 0
    page.click("#q-resume")
    page.click("#confirm")
    expect(page.locator("#jobs .tag.paused")).to_have_count(0)
    drain(page, c, ids)


def test_paging_through_100000_jobs(page, base, srv):
    ids = put_many(srv.ports["beanstalk"], "big", 100_000)
    assert ids == list(range(ids[0], ids[0] + 100_000))
    page.goto(f"{base}/ui/jobs?queue=big&limit=100")
    seen = row_ids(page)
    assert seen == ids[:100]
    for _ in range(3):
        page.click("#next")
        got = row_ids(page)
        assert got == list(range(seen[-1] + 1, seen[-1] + 101))
        seen = got
    page.click("#last")
    last = row_ids(page)
    assert last == ids[-100:]
    assert page.locator("#next").count() == 0
    for _ in range(2):
        page.click("#prev")
        got = row_ids(page)
        assert got == list(range(last[0] - 100, last[0]))
        last = got
    page.goto(f"{base}/ui/jobs?queue=big&limit=100&after={ids[50_000]}")
    assert row_ids(page) == ids[50_001:50_101]


@pytest.mark.parametrize("path,status", [
    ("/ui/jobs?queue=no-such-queue", 404), ("/ui/jobs", 400),
    ("/ui/jobs?queue=default&state=exploded", 400),
    ("/ui/jobs?queue=default&after=-5", 400), ("/ui/jobs?queue=default&after=1e9", 400),
    ("/ui/jobs?queue=default&before=99999999999999999999999", 400),
    ("/ui/jobs?queue=default&after=1&before=5", 400),
    ("/ui/jobs?queue=default&last=1&after=3", 400), ("/ui/jobs?queue=default&limit=0", 400),
    ("/ui/jobs?queue=default&limit=100000", 400), ("/ui/job/abc", 400), ("/ui/job/0", 400),
    ("/ui/job/999999999", 404), ("/ui/job/%00", 400), ("/ui/confirm/nuke?queue=default", 404),
    ("/ui/confirm/delete?id=x", 400), ("/ui/confirm/pause?queue=nope", 404),
    ("/ui/jobs?queue=%3Cscript%3E", 404),
])
def test_hostile_input_is_a_4xx_page(base, path, status):
    r = httpx.get(base + path)
    assert r.status_code == status
    assert "text/html" in r.headers["content-type"]
    assert "<script>" not in r.text


def test_actions_need_a_same_origin_post_and_a_confirmation(base, gs):
    c = gs("csrf")
    jid = c.put("keep me")
    form = {"id": str(jid), "confirm": "yes", "back": "/ui/"}
    assert httpx.post(f"{base}/ui/action/delete", data=form).status_code == 403
    assert httpx.post(f"{base}/ui/action/delete", data=form,
                      headers={"Origin": "http://evil.example"}).status_code == 403
    assert httpx.post(f"{base}/ui/action/delete", data=dict(form, confirm="no"),
                      headers={"Origin": base}).status_code == 400
    assert httpx.post(f"{base}/ui/action/promote", data=form,
                      headers={"Origin": base}).status_code == 409   # not delayed
    assert c.stats_job(jid)["state"] == "ready"
    r = httpx.post(f"{base}/ui/action/delete", data=dict(form, back="//evil.example/"),
                   headers={"Origin": base})
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
