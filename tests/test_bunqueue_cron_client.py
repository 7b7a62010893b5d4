"""The real bunqueue TypeScript client's job-scheduler API (tests/bunqueue_client/cron.ts:
Queue.upsertJobScheduler / getJobScheduler / getJobSchedulers / getJobSchedulersCount /
removeJobScheduler, i.e. Cron, CronList, CronDelete) with a Worker taking the runs, against
jobgate and, with the same checks, against the real bunqueue 2.9.5 server (issue 16 item 1).
Needs `npm install` in tests/bunqueue_client; skipped with the reason otherwise.
"""
from __future__ import annotations


import pytest

from .bunqueue_real import BunqueueServer, bun_missing_reason, run_script
from .support import Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")


def run_cron_ts(port: int) -> dict:
    return run_script("cron.ts", port)


def check(out: dict) -> None:
    assert out["every"] == {"id": "every", "name": "tick", "next": out["every"]["next"],
                            "every": 300, "limit": 3}
    assert 250 <= out["everyNextDelta"] <= 1500
    assert out["hourly"]["pattern"] == "0 * * * *" and out["hourlyNextMinute"] == 0
    assert out["count"] == 2
    assert sorted(out["list"], key=lambda s: s["id"]) == [
        {"id": "every", "name": "tick", "pattern": None, "every": 300, "limit": 3},
        {"id": "hourly", "name": "report", "pattern": "0 * * * *", "every": None,
         "limit": None}]
    # three runs, each an ordinary job with the template's name, data and priority; no fourth.
    # The hourly schedule fires too when the run crosses the top of an hour (CI did, at
    # 22:59:59): at most that one run of it, with its own template.
    ticks = [s for s in out["seen"] if s["name"] == "tick"]
    others = [s for s in out["seen"] if s["name"] != "tick"]
    assert ticks == [{"name": "tick", "data": {"n": 1}, "priority": 2}] * 3
    assert others in ([], [{"name": "report", "data": {"r": True}, "priority": 0}])
    assert out["everyAfter"] is None            # exhausted at its next due time: gone
    assert (out["removed"], out["removedAgain"], out["countAfter"]) == (True, False, 0)


def test_cron_client_against_jobgate(tmp_path):
    s = Server(f"sqlite:///{tmp_path}/jobgate.db", bunqueue=True)
    try:
        check(run_cron_ts(s.bunqueue_port))
    finally:
        s.stop()


def test_cron_client_against_the_reference(tmp_path):
    """The same checks on the real server (keeps cron.ts and the expectations honest)."""
    s = BunqueueServer(data_path=tmp_path / "bq.db")
    try:
        check(run_cron_ts(s.port))
    finally:
        s.stop()
