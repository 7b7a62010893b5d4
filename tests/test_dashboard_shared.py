"""The web dashboard of a node in shared mode (docs/dashboard.md "Several nodes"), in a real
browser (headless Chromium driven by Playwright) against two real node processes on one
fresh PostgreSQL database: node a's dashboard shows and changes the jobs that greenstalk
clients put, buried and hold on node b (in the database, or held by b).

- the overview counts every node's jobs of a queue; the job list pages through rows in the
  database; a job's page reads its row;
- kick and delete of jobs in the database, done in a's browser, are what greenstalk on b sees
  next; a job reserved on b cannot be changed from a (409);
- pause on a holds b's reservers back, resume lets them go; drain deletes b's waiting jobs.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import greenstalk
import httpx
import pytest

from .bunqueue_support import BQ
from .shared_support import bean, rows
from .test_dashboard_browser import confirm, drain, row_ids

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect  # noqa: E402


def test_dashboard_of_one_node_shows_and_changes_another_nodes_jobs(nodes, page):
    a, b = nodes(2, http=True)
    base = f"http://127.0.0.1:{a.http_port}"
    c = bean(b, "shq")
    ids = [c.put(b"job %d" % i) for i in range(5)]
    held = c.reserve(timeout=5)
    to_bury = c.reserve(timeout=5)
    c.bury(to_bury)
    page.goto(f"{base}/ui/")
    row = page.locator("tr[data-queue=shq]")
    expect(row.locator("td.n").nth(0)).to_have_text("3")    # ready
    expect(row.locator("td.n").nth(2)).to_have_text("1")    # reserved, on b
    expect(row.locator("td.n").nth(3)).to_have_text("1")    # buried
    page.goto(f"{base}/ui/jobs?queue=shq&limit=2")
    assert row_ids(page) == ids[:2]
    page.goto(f"{base}/ui/jobs?queue=shq&limit=2&after={ids[1]}")
    assert row_ids(page) == ids[2:4]
    page.goto(f"{base}/ui/jobs?queue=shq&last=1&limit=2")
    assert row_ids(page) == ids[3:]
    page.goto(f"{base}/ui/job/{to_bury.id}")
    expect(page.locator("#job-state")).to_have_text("buried")
    confirm(page, "kick")
    expect(page.locator("#job-state")).to_have_text("ready")
    assert c.stats_job(to_bury.id)["state"] == "ready"
    page.goto(f"{base}/ui/job/{ids[-1]}")
    confirm(page, "delete")
    with pytest.raises(greenstalk.NotFoundError):
        c.peek(ids[-1])
    # a job held on b: its page reads, an action from a is refused
    page.goto(f"{base}/ui/job/{held.id}")
    expect(page.locator("#job-state")).to_have_text("reserved")
    r = httpx.post(f"{base}/ui/action/delete", data={"id": str(held.id), "confirm": "yes"},
                   headers={"Origin": base})
    assert r.status_code == 409
    assert c.stats_job(held.id)["state"] == "reserved"


def test_pause_resume_and_drain_from_another_node(nodes, page):
    a, b = nodes(2, http=True)
    base = f"http://127.0.0.1:{a.http_port}"
    c = bean(b, "shp")
    ids = [c.put(b"p%d" % i) for i in range(3)]
    page.goto(f"{base}/ui/jobs?queue=shp")
    page.click("#q-pause")
    page.click("#confirm")
    expect(page.locator("#jobs .tag.paused")).to_be_visible()
    assert c.stats_tube("shp")["pause"] > 0
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=1)
    page.click("#q-resume")
    page.click("#confirm")
    expect(page.locator("#jobs .tag.paused")).to_have_count(0)
    got = c.reserve(timeout=5)
    assert got.id == ids[0]
    c.release(got)
    drain(page, c, ids)


def test_job_list_has_the_nodes_own_reserved_jobs_and_actions_reach_any_dialects_job(
        nodes, page):
    """Jobs put on b and reserved by a client of a are in a's list, in order, on every page
    (review finding: they were on neither side of the merge); a delayed bunqueue job in the
    database is promoted from a's dashboard (review finding: a job with a client uid was
    not taken by id, and the action answered 409)."""
    a, b = nodes(2, http=True)
    base = f"http://127.0.0.1:{a.http_port}"
    cb = bean(b, "own")
    ids = [cb.put(b"j%d" % i) for i in range(7)]
    ca = bean(a, "own")
    held = [ca.reserve(timeout=5).id for _ in range(3)]
    assert held == ids[:3]
    page.goto(f"{base}/ui/jobs?queue=own")
    assert row_ids(page) == ids
    page.goto(f"{base}/ui/jobs?queue=own&limit=2")
    seen = row_ids(page)
    for _ in range(5):   # "next" to the last page, which has none
        if page.locator("#next").count() == 0:
            break
        page.click("#next")
        seen += row_ids(page)
    assert seen == ids and page.locator("#next").count() == 0
    page.click("#prev")
    assert row_ids(page) == ids[4:6]
    q = BQ(b.bunqueue_port)
    jid = q.push("bqd", {"x": 1}, delay=600_000)
    (row_id,), = rows(nodes.url, "SELECT id FROM jobs WHERE uid = %s", (jid,))
    page.goto(f"{base}/ui/job/{row_id}")
    expect(page.locator("#job-state")).to_have_text("delayed")
    confirm(page, "promote")
    expect(page.locator("#job-state")).to_have_text("ready")
    assert q.state(jid) == "waiting"
    assert httpx.get(f"{base}/ui/jobs?queue=%00").status_code == 404
