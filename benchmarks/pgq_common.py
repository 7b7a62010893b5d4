"""Shared parts of pg_queues_bench.py's drivers: the 100-byte payloads that carry their enqueue
time, the lock-free backlog cap shared by producer and worker processes, and the window that
decides which completions count. Standard library only: imported by the project's interpreter
(jobgate driver) and by the benchmark venv's (Procrastinate driver).

Times are CLOCK_MONOTONIC nanoseconds (time.monotonic_ns(); Node's process.hrtime.bigint() reads
the same clock on Linux), so one process can compare a time taken by another."""
from __future__ import annotations

import json
import multiprocessing
import time

PAYLOAD_SIZE = 100
JSON_PAD_KEY = "p"


def beanstalk_body(t_ns: int) -> bytes:
    """A 100-byte beanstalk body: the enqueue time (monotonic ns, 20 digits) then padding."""
    head = b"%020d " % t_ns
    return head + b"x" * (PAYLOAD_SIZE - len(head))


def body_time(body: bytes) -> int | None:
    """The enqueue time in a beanstalk_body(), or None when the body is not one (the `null`
    server's canned body)."""
    head = body[:20]
    return int(head) if head.isdigit() and body[20:21] == b" " else None


def json_payload(t_ns: int) -> dict:
    """A job argument dict whose compact JSON is exactly 100 bytes: {"t": t_ns, "p": "xx.."}."""
    base = len(json.dumps({"t": t_ns, JSON_PAD_KEY: ""}, separators=(",", ":")))
    return {"t": t_ns, JSON_PAD_KEY: "x" * max(0, PAYLOAD_SIZE - base)}


class Backlog:
    """Jobs enqueued minus jobs completed, shared by forked processes without locks: every
    producer and worker owns one 64-bit slot and only adds to its own; readers sum the slots.
    Producers call wait_room() before each enqueue so that at most `cap` jobs are waiting or
    running at any time (the queue neither runs dry because producers are slow nor grows without
    bound because workers are)."""

    def __init__(self, producers: int, workers: int, cap: int):
        self.cap = cap
        self.enq = multiprocessing.RawArray("q", producers)
        self.done = multiprocessing.RawArray("q", workers)

    def level(self) -> int:
        """Enqueued minus completed, now (may be off by the jobs in flight in other processes)."""
        return sum(self.enq) - sum(self.done)

    def wait_room(self, deadline_ns: int, poll_s: float = 0.0002) -> bool:
        """Block until the backlog is under the cap (True) or deadline_ns passes (False)."""
        while self.level() >= self.cap:
            if time.monotonic_ns() >= deadline_ns:
                return False
            time.sleep(poll_s)
        return True


class Window:
    """The timed part of a run: [start_ns, end_ns]. A completion counts when it happens inside
    it; its samples are end-to-end (enqueue -> completion acknowledged) and fetch (enqueue ->
    the job in a worker's hands) latencies in ms."""

    def __init__(self, start_ns: int, end_ns: int):
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.e2e_ms: list[float] = []
        self.fetch_ms: list[float] = []
        self.completed = 0

    def record(self, t_enq: int | None, t_fetch: int, t_done: int) -> None:
        if not (self.start_ns <= t_done <= self.end_ns):
            return
        self.completed += 1
        if t_enq is not None:
            self.e2e_ms.append(round((t_done - t_enq) / 1e6, 3))
            self.fetch_ms.append(round((t_fetch - t_enq) / 1e6, 3))

    def result(self) -> dict:
        return {"completed": self.completed, "e2e_ms": self.e2e_ms, "fetch_ms": self.fetch_ms}


def merge_results(parts: list[dict], window_s: float, extra: dict | None = None) -> dict:
    """One driver result from the parts of its worker processes: completed jobs, jobs/s over
    window_s, every latency sample, and the first errors."""
    out = {"completed": 0, "e2e_ms": [], "fetch_ms": [], "enqueued": 0, "errors": []}
    for p in parts:
        out["completed"] += p.get("completed", 0)
        out["enqueued"] += p.get("enqueued", 0)
        out["e2e_ms"] += p.get("e2e_ms", [])
        out["fetch_ms"] += p.get("fetch_ms", [])
        if p.get("error"):
            out["errors"].append(p["error"])
    out["window_s"] = window_s
    out["jobs_per_s"] = out["completed"] / window_s if window_s > 0 else 0.0
    out.update(extra or {})
    return out
