"""Queue limits are the engine's, whichever dialect takes the job (docs/mapping.md, "Queue
limits (issue 16)"): ten workers of three dialects at once on one queue over real sockets, a
jobgate server subprocess on a SQLite file:

- 4 greenstalk (beanstalk `reserve-with-timeout` + `delete`), 3 workq clients
  (conformance/workq_client.py: `lease` + `complete`) and 3 real bunqueue TypeScript Workers on
  Bun (tests/bunqueue_client/limits_worker.ts: PULL with a lock + ACK);
- concurrency 3 (set through bunqueue SetConcurrency): never more than 3 jobs of the queue
  reserved at once, counted on the server's side from its job_events history (every reserve
  and every way out of the reserved state, in commit order), and the limit is reached;
- rate limit 5 per second: no interval holds more reservations than the token bucket allows
  (5 at once, then 5 per 1000 ms), from the reserve events' server timestamps.

Every dialect must have taken jobs, else the test does not show what it claims.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid

import greenstalk
import pytest
import sqlalchemy as sa

from conformance.workq_client import Client as WorkqClient
from conformance.workq_client import TimedOut

from .bunqueue_real import BUN, CLIENT_DIR, bun_env, bun_missing_reason
from .bunqueue_support import BQ
from .support import Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")

N_JOBS = 30
WORK_S = 0.1


class Workers:
    """The ten workers on queue `q`; `stop()` ends them and returns {dialect: jobs done}."""

    def __init__(self, server: Server, q: str, work_s: float, poll_timeout_ms: int) -> None:
        self.q = q
        self.work_s = work_s
        self.done = {"beanstalk": 0, "workq": 0, "bunqueue": 0}
        self.errors: list = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.ts = subprocess.Popen(
            [BUN, os.path.join(CLIENT_DIR, "limits_worker.ts"), "--host", "127.0.0.1",
             "--port", str(server.bunqueue_port), "--queue", q, "--workers", "3",
             "--work-ms", str(int(work_s * 1000)), "--poll-timeout-ms", str(poll_timeout_ms)],
            cwd=CLIENT_DIR, env=bun_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        assert self.ts.stdout.readline().strip() == "ready", self.ts.stderr.read()
        self.threads = [threading.Thread(target=self._beanstalk, args=(server.port,))
                        for _ in range(4)]
        self.threads += [threading.Thread(target=self._workq, args=(server.workq_port,))
                         for _ in range(3)]
        for t in self.threads:
            t.start()

    def _count(self, dialect: str) -> None:
        with self._lock:
            self.done[dialect] += 1

    def _beanstalk(self, port: int) -> None:
        try:
            with greenstalk.Client(("127.0.0.1", port), watch=self.q) as g:
                while not self._stop.is_set():
                    try:
                        job = g.reserve(timeout=1)
                    except greenstalk.TimedOutError:
                        continue
                    time.sleep(self.work_s)
                    g.delete(job)
                    self._count("beanstalk")
        except Exception as e:  # pragma: no cover - reported by the test
            self.errors.append(repr(e))

    def _workq(self, port: int) -> None:
        try:
            with WorkqClient("127.0.0.1", port) as c:
                while not self._stop.is_set():
                    try:
                        job = c.lease(self.q, 1000)
                    except TimedOut:
                        continue
                    time.sleep(self.work_s)
                    c.complete(job.id, b"done")
                    self._count("workq")
        except Exception as e:  # pragma: no cover - reported by the test
            self.errors.append(repr(e))

    def stop(self) -> dict:
        self._stop.set()
        out, err = self.ts.communicate("stop\n", timeout=60)
        for t in self.threads:
            t.join(10)
        assert self.ts.returncode == 0, err[-3000:]
        ts = json.loads(out.strip().splitlines()[-1])
        assert ts["errors"] == [] and self.errors == [], (ts["errors"], self.errors)
        self.done["bunqueue"] = ts["processed"]
        return dict(self.done)


def _produce(server: Server, q: str, n: int) -> None:
    """Half the jobs put through beanstalk, half added through workq."""
    with greenstalk.Client(("127.0.0.1", server.port), use=q) as g:
        for i in range(n // 2):
            g.put(f"b{i}", ttr=60)
    with WorkqClient("127.0.0.1", server.workq_port) as c:
        for i in range(n - n // 2):
            c.add(str(uuid.uuid4()), q, 60_000, 600_000, b"w%d" % i)


def _wait_all_done(server: Server, q: str, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    with greenstalk.Client(("127.0.0.1", server.port)) as g:
        while time.monotonic() < end:
            st = g.stats_tube(q)
            if st["current-jobs-ready"] == 0 and st["current-jobs-reserved"] == 0:
                return
            time.sleep(0.1)
    raise AssertionError(f"jobs of {q} not done: {st}")


def _events(url: str, q: str) -> list:
    """(event, job_id, dialect, at_ms) of queue `q` from the history, in commit order."""
    e = sa.create_engine(url)
    try:
        with e.connect() as c:
            return [tuple(r) for r in c.execute(sa.text(
                "SELECT event, job_id, dialect, at_ms FROM job_events WHERE queue = :q "
                "ORDER BY id"), {"q": q})]
    finally:
        e.dispose()


def _max_reserved(events: list) -> int:
    """The most jobs reserved at once: a reserve holds a job until its next event (delete,
    complete, release, fail, timeout, abandon, ...: every way out of the reserved state)."""
    held: set = set()
    top = 0
    for ev, jid, _, _ in events:
        if ev == "reserve":
            assert jid not in held
            held.add(jid)
            top = max(top, len(held))
        else:
            held.discard(jid)
    return top


def _run(tmp_path, limit_cmd: dict, n: int, work_s: float, poll_timeout_ms: int = 1000):
    """Ten workers on a queue with `limit_cmd`; the bunqueue Workers' PULLs wait
    `poll_timeout_ms` (a PULL that times out queues up again behind the other waiters, so under
    a rate limit it must outlast their whole turn to be served at all)."""
    url = f"sqlite:///{tmp_path}/jobgate.db"
    s = Server(url, workq=True, bunqueue=True)
    q = f"lim-{uuid.uuid4().hex[:8]}"
    try:
        c = BQ(s.bunqueue_port, timeout=10)
        r = c.call(limit_cmd.pop("cmd"), queue=q, **limit_cmd)
        assert r["ok"] is True, r
        w = Workers(s, q, work_s, poll_timeout_ms)
        try:
            _produce(s, q, n)
            _wait_all_done(s, q)
        finally:
            done = w.stop()
        c.close()
    finally:
        s.stop()   # flushes the history
    return done, _events(url, q)


def test_concurrency_3_with_ten_workers_of_three_dialects(tmp_path):
    done, events = _run(tmp_path, {"cmd": "SetConcurrency", "limit": 3}, N_JOBS, WORK_S)
    assert sum(done.values()) == N_JOBS and all(done.values()), done
    reserves = [e for e in events if e[0] == "reserve"]
    assert {e[2] for e in reserves} == {"beanstalk", "workq", "bunqueue"}
    assert len({e[1] for e in reserves}) == N_JOBS
    assert _max_reserved(events) == 3                  # reached, never passed


def test_rate_limit_with_ten_workers_of_three_dialects(tmp_path):
    limit, window, n = 5, 1000, 20
    # ten waiters served 5 per s: a turn takes 2 s, so the bunqueue PULLs wait 5 s
    done, events = _run(tmp_path, {"cmd": "RateLimit", "limit": limit, "duration": window},
                        n, 0.0, poll_timeout_ms=5000)
    assert sum(done.values()) == n and all(done.values()), done
    ts = [e[3] for e in events if e[0] == "reserve"]
    assert len(ts) == n
    # token bucket: `limit` at once, then `limit` per `window`; 2 ms for wall/monotonic rounding
    for i in range(len(ts)):
        for j in range(i, len(ts)):
            allowed = limit + limit * (ts[j] - ts[i] + 2) // window
            assert j - i + 1 <= allowed, (i, j, ts[i], ts[j])
    assert ts[-1] - ts[0] >= (n - limit) * window // limit - 2
