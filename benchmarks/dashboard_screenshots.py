"""Screenshots of the web dashboard for docs/ (docs/dashboard.md): the queues overview, a job
list and a job's page, as 1000 px wide PNGs in docs/img/.

A server in this process (tests/inproc.py, memory mode) gets a few jobs of each kind over
beanstalk (ready, delayed, buried) and over the HTTP API (bunqueue jobs with logs, a failed
one), some traffic runs while the overview is open (for the throughput chart), and headless
Chromium (Debian's `chromium`, through Playwright) takes the pictures.

    python benchmarks/dashboard_screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def _traffic(port: int, stop: threading.Event) -> None:
    import greenstalk
    with greenstalk.Client(("127.0.0.1", port), use="emails", watch="emails") as c:
        while not stop.is_set():
            for _ in range(20):
                c.put('{"to": "someone@example.com"}')
            for _ in range(18):
                c.delete(c.reserve(timeout=1))
            time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    import greenstalk
    import httpx
    from playwright.sync_api import sync_playwright

    from gateway.config import Listener
    from tests.inproc import InProcServer

    srv = InProcServer(None, listeners=[Listener("beanstalk", "127.0.0.1", 0, open=True),
                                        Listener("http", "127.0.0.1", 0)])
    base = f"http://127.0.0.1:{srv.ports['http']}"
    stop = threading.Event()
    try:
        with greenstalk.Client(("127.0.0.1", srv.ports["beanstalk"]), use="emails",
                               watch="emails") as c:
            for i in range(40):
                c.put(f'{{"to": "user{i}@example.com", "template": "welcome"}}')
            for i in range(3):
                c.put(f'{{"to": "later{i}@example.com"}}', delay=3600)
            for _ in range(2):
                c.bury(c.reserve(timeout=1))
            c.use("thumbnails")
            for i in range(12):
                c.put(f"/images/{i}.jpg", priority=10)
        with httpx.Client(base_url=base) as h:
            for i in range(6):
                h.post("/queues/reports/jobs", json={"name": "monthly", "data": {
                    "month": f"2026-0{i + 1}", "format": "pdf"}, "maxAttempts": 1})
            pulled = h.get("/queues/reports/jobs").json()["job"]
            h.post("/jobs/" + pulled["id"] + "/fail", json={"error": "template not found"})
        os.makedirs(args.out, exist_ok=True)
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=args.chromium, headless=True,
                                   args=["--no-sandbox"])
            page = b.new_page(viewport={"width": 1000, "height": 620})
            page.goto(f"{base}/ui/")
            t = threading.Thread(target=_traffic, args=(srv.ports["beanstalk"], stop))
            t.start()
            time.sleep(6)   # the chart fills
            stop.set()
            t.join()
            page.screenshot(path=os.path.join(args.out, "dashboard-overview.png"))
            page.goto(f"{base}/ui/jobs?queue=emails&limit=12")
            page.screenshot(path=os.path.join(args.out, "dashboard-jobs.png"))
            page.goto(f"{base}/ui/jobs?queue=reports&state=failed")
            page.click("tr.job a")
            page.screenshot(path=os.path.join(args.out, "dashboard-job.png"))
            b.close()
    finally:
        stop.set()
        srv.stop()
    for n in ("dashboard-overview.png", "dashboard-jobs.png", "dashboard-job.png"):
        p = os.path.join(args.out, n)
        print(p, os.path.getsize(p), "bytes")


if __name__ == "__main__":
    main()
