"""The real bunqueue TypeScript client's scheduling API (npm `bunqueue` 2.9.5 on Bun):
job schedulers (Cron, CronList, CronDelete), the global concurrency limit and the global rate
limit, driven by tests/bunqueue_client/schedule.ts against jobgate and, as a check on the test,
against the reference server. `check_schedule` holds what the reference does (run
`test_schedule_reference` to see it hold there).

Needs `npm install` in tests/bunqueue_client (bun + bunqueue); skipped with the reason otherwise.
"""
from __future__ import annotations


import pytest

from .bunqueue_real import BunqueueServer, bun_missing_reason, run_script
from .support import Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")


def run_schedule(port: int, timeout: float = 120.0) -> dict:
    """Run schedule.ts against 127.0.0.1:port; its JSON output (fails the test on exit != 0)."""
    return run_script("schedule.ts", port, timeout=timeout)


def check_schedule(out: dict) -> None:
    """The reference's behaviour, as schedule.ts observes it."""
    # a repeatable job: `every` 300 ms with limit 3 gives exactly three jobs from the template;
    # the schedule is gone once its limit is reached (so removing it answers false)
    assert out["everyUpsert"] == {"id": "tick", "name": "tick-job", "every": 300, "limit": 3,
                                  "nextIsNumber": True}
    assert out["everyListed"] == [{"id": "tick", "every": 300, "limit": 3, "nextIsNumber": True}]
    assert out["everyJobs"] == [{"name": "tick-job", "data": {"k": 1}}] * 3
    assert out["everyRemoved"] is False
    assert out["everyListedAfter"] == 0
    # a six-field cron pattern in a time zone: next run 03:30 Tokyo = 18:30 UTC, within a day
    assert out["cronUpsertPattern"] == "0 30 3 * * *"
    assert out["cronGet"] == {"id": "nightly", "pattern": "0 30 3 * * *", "nextUtc": "18:30:0",
                              "nextInFuture": True, "nextWithinDay": True}
    assert out["cronRemoved"] is True
    assert out["cronGetAfter"] is None
    # global concurrency 2: a worker of concurrency 6 never runs more than 2 at once
    assert out["concurrencyGet"] == 2
    assert out["concurrencyMaxActive"] == 2
    assert out["concurrencyGetAfter"] is None
    # global rate limit 3 per 2000 ms: 3 jobs start at once, the other 3 only later
    assert out["rateGet"] == {"max": 3, "duration": 2000}
    assert out["rateAll"] == 6
    assert out["rateBurst"] == 3
    assert out["rateSpanMs"] >= 1000
    assert out["rateGetAfter"] is None


def test_schedule_reference():
    """Every expectation holds on the real server (keeps schedule.ts and the checks honest)."""
    with BunqueueServer() as bq:
        check_schedule(run_schedule(bq.port))


def test_schedule_jobgate(tmp_path):
    s = Server(f"sqlite:///{tmp_path}/jobgate.db", bunqueue=True)
    try:
        check_schedule(run_schedule(s.bunqueue_port))
    finally:
        s.stop()
