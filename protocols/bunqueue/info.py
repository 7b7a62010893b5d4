"""Server-wide bunqueue state shared by every connection: lock tokens, registered workers,
event subscribers, auth tokens, counters (bunqueue-tcp-protocol.txt "Authentication",
"PULL", "Worker Commands"; reference: bunqueue 2.9.5).

Lock tokens live in memory only: a restart returns active jobs to waiting (DESIGN.md), so no
lock survives it. Workers and subscriptions are per process as in the reference.
"""
from __future__ import annotations

import hmac
import time

#: What Hello announces (reference 2.9.5 answers protocol 3 with these capabilities).
PROTOCOL_VERSIONS = (1, 2, 3)
CAPABILITIES = ["pipelining", "separate-job-name"]
#: The bunqueue server version whose protocol jobgate speaks (Hello's `version`).
SPEAKS_VERSION = "2.9.5"
DEFAULT_LOCK_TTL_MS = 30_000
#: Lock expiries after which a job goes to the DLQ with reason "stalled" (reference maxStalls).
MAX_STALLS = 3


class BunqueueInfo:
    """State of the bunqueue dialect for one server process.

    `engine`: core.engine.Engine; `auth_tokens`: accepted tokens (empty: no auth);
    `rate_limit`: commands per second per connection (0: unlimited); `locks`: job id -> lock
    token of jobs pulled with an owner; `db_path`: the SQLite file (Metrics' sqliteSizeMb); `workers`: workerId -> registration dict;
    `subscribers`: sessions that sent SubscribeEvents; counters for Stats / Metrics.
    """

    def __init__(self, engine, auth_tokens=(), rate_limit: float = 0,
                 db_path: str | None = None) -> None:
        self.engine = engine
        self.auth_tokens = [t.encode("utf-8") for t in auth_tokens]
        self.rate_limit = rate_limit
        self.db_path = db_path
        self.locks: dict[int, str] = {}
        self.workers: dict[str, dict] = {}
        self.subscribers: set = set()
        self.connections = 0
        self.started = time.monotonic()
        self.total_pushed = 0
        self.total_pulled = 0
        self.total_completed = 0
        self.total_failed = 0
        engine.stall_handlers["bunqueue"] = self.stalled
        engine.ttl_waiting_only.add("bunqueue")

    def stalled(self, job) -> bytes | None:
        """A bunqueue job's lock (TTR) expired: it counts an attempt and a stall (reference
        lockManager); at maxAttempts, or after MAX_STALLS stalls, it goes to the DLQ: returns
        the failure text then, else None (the engine requeues it)."""
        self.locks.pop(job.id, None)
        job.fails += 1
        ext = job.ext
        if ext is None:
            ext = job.ext = {}
        ext.pop("startedAt", None)
        if job.fails >= job.max_fails:
            reason, error = "max_attempts_exceeded", \
                f"Lock expired at max attempts ({job.max_fails})"
        elif job.timeouts >= MAX_STALLS:
            reason, error = "stalled", f"Lock expired after {job.timeouts} renewals"
        else:
            return None
        now = self.engine.clock.wall_ms()
        ext.update(dlqReason=reason, dlqAt=now, failedReason=error)
        self.total_failed += 1
        return error.encode()
    def check_token(self, token) -> bool:
        """True when `token` is one of the configured tokens (constant-time compare)."""
        if token.__class__ is not str:
            return False
        t = token.encode("utf-8")
        ok = False
        for good in self.auth_tokens:
            ok |= hmac.compare_digest(t, good)
        return ok

    def publish(self, event_type: str, queue: str, job_id: str, now_ms: int,
                **extra) -> None:
        """Send an event frame to every subscriber that watches `queue` (or every queue);
        `extra`: `data` (a completed job's result) or `error` (a failure's message)."""
        if not self.subscribers:
            return
        for s in list(self.subscribers):
            s.event(event_type, queue, job_id, now_ms, extra)
