"""The real bunqueue TypeScript client's queue limit API (npm `bunqueue` 2.9.5 on Bun,
tests/bunqueue_client/limits_client.ts) against jobgate, and the same script against the real
bunqueue server as a check on the test: global concurrency (a Worker of concurrency 5 held to
2 by the server, isMaxed), global rate limit (4 per second: the eighth job starts about a
second after the first; getRateLimitTtl), a temporary rate limit (Queue.rateLimit), removal,
and the stall config (setStallConfigAsync / getStallConfigAsync). Both outputs must be equal.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from .bunqueue_real import BUN, CLIENT_DIR, BunqueueServer, bun_env, bun_missing_reason
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
    r = subprocess.run([BUN, os.path.join(CLIENT_DIR, "limits_client.ts"), "--host",
                        "127.0.0.1", "--port", str(port)], cwd=CLIENT_DIR, env=bun_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"limits_client.ts exited {r.returncode}\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_limits_client_reference():
    with BunqueueServer() as ref:
        assert run_client(ref.port) == EXPECTED


def test_limits_client_jobgate(tmp_path):
    s = Server(f"sqlite:///{tmp_path}/jobgate.db", bunqueue=True)
    try:
        assert run_client(s.bunqueue_port) == EXPECTED
    finally:
        s.stop()
