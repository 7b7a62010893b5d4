"""The real bunqueue TypeScript client's queue limit API (npm `bunqueue` 2.9.5 on Bun,
tests/bunqueue_client/limits_client.ts) against jobgate, and the same script against the real
bunqueue server as a check on the test: global concurrency (a Worker of concurrency 5 held to
2 by the server, isMaxed), global rate limit (4 per second: the eighth job starts about a
second after the first; getRateLimitTtl), a temporary rate limit (Queue.rateLimit), removal,
and the stall config (setStallConfigAsync / getStallConfigAsync). Both outputs must be equal.
"""
from __future__ import annotations


import pytest

from .bunqueue_real import BunqueueServer, bun_missing_reason, run_script
from .support import Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")

EXPECTED = {
    "concurrencyBefore": None, "concurrency": 2, "maxedIdle": False, "concurrencyMaxActive": 2,
    "sawMaxed": True, "concurrencyAfter": None, "maxedAfter": False,
    "rateBefore": None, "rateTtlBefore": -2, "rate": {"max": 4, "duration": 1000},
    "rateTtlFull": 0, "rateSpreadOk": True, "rateTtlUsedOk": True, "rateAfter": None,
    "rateTtlAfter": -2, "temporary": {"max": 1, "duration": 1000}, "temporaryTtlOk": True,
    "stallDefault": {"enabled": True, "stallInterval": 30000, "maxStalls": 3,
                     "gracePeriod": 5000},
    "stall": {"enabled": True, "stallInterval": 10000, "maxStalls": 5, "gracePeriod": 5000},
    "stallDisabled": {"enabled": False, "stallInterval": 10000, "maxStalls": 5,
                      "gracePeriod": 5000},
}


def run_client(port: int) -> dict:
    return run_script("limits_client.ts", port, timeout=120)


def test_limits_client_reference():
    with BunqueueServer() as ref:
        assert run_client(ref.port) == EXPECTED


def test_limits_client_jobgate(tmp_path):
    s = Server(f"sqlite:///{tmp_path}/jobgate.db", bunqueue=True)
    try:
        assert run_client(s.bunqueue_port) == EXPECTED
    finally:
        s.stop()
