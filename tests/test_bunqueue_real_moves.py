"""The real bunqueue TypeScript client (npm `bunqueue` 2.9.5 on Bun, tests/bunqueue_client/moves.ts)
driving issue 16's manual moves and job logs against jobgate, and the same script against the
reference bunqueue server as a check on the test: Queue.promoteJobs, moveJobToWait (a delayed job;
an active job with a wrong and with its own lock token), changeJobDelay, addJobLog / getJobLogs /
clearJobLogs, and a manual Worker's getNextJob / extendJobLocks.

Needs `npm install` in tests/bunqueue_client (bun + bunqueue); skipped with the reason otherwise.
"""
from __future__ import annotations


import pytest

from .bunqueue_real import BunqueueServer, bun_missing_reason, run_script
from .support import Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")


def run_moves(port: int, timeout: float = 90.0) -> dict:
    """Run moves.ts against 127.0.0.1:port; its JSON (fails the test on exit != 0)."""
    return run_script("moves.ts", port, timeout=timeout)


def check_moves(out: dict) -> None:
    """What the reference answered (test_moves_reference keeps these expectations honest)."""
    assert out["promotedTwo"] == 2
    assert out["statesAfterTwo"] == ["waiting", "waiting", "delayed"]
    assert (out["promotedRest"], out["promotedNone"]) == (1, 0)
    assert out["statesAfterAll"] == ["waiting"] * 3
    assert (out["delayedBefore"], out["moveDelayed"], out["delayedAfter"]) == \
        ("delayed", True, "waiting")
    assert out["changedState"] == "delayed"
    assert 599_000 <= out["changedDelayMs"] <= 601_000
    assert out["changedBackState"] == "waiting"
    assert out["logAdds"] == [1, 1, 1]
    assert out["logs"] == {"logs": ["[info] first", "[info] second", "[info] third"],
                           "count": 3}
    assert out["logsKeep1"] == {"logs": ["[info] third"], "count": 1}
    assert out["logsCleared"] == {"logs": [], "count": 0}
    assert out["pulledId"] is True and out["pulledHasToken"] is True
    assert out["activeState"] == "active"
    assert out["extended"] == 1
    assert out["moveWrongToken"].startswith("Invalid or expired lock token for job ")
    assert (out["moveActive"], out["activeAfter"], out["pulledAgain"]) == \
        (True, "waiting", True)


def test_moves_jobgate(tmp_path):
    s = Server(f"sqlite:///{tmp_path}/jobgate.db", bunqueue=True)
    try:
        check_moves(run_moves(s.bunqueue_port))
    finally:
        s.stop()


def test_moves_reference():
    """The same script and checks against bunqueue 2.9.5 (in memory)."""
    s = BunqueueServer()
    try:
        check_moves(run_moves(s.port))
    finally:
        s.stop()
