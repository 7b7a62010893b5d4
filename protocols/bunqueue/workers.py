"""Registered workers of the bunqueue dialect: RegisterWorker, Heartbeat, UnregisterWorker and
ListWorkers (bunqueue-tcp-protocol.txt "Worker Commands"; reference: bunqueue 2.9.5
application/workerManager.js, domain/types/worker.js, infrastructure/server/handlers/monitoring/
workers.js and health.js handleHeartbeat, tcp/connections.js).

The rules, as the reference has them:

- a worker is a record the client keeps up to date: the server never counts jobs for it;
  activeJobs / processedJobs / failedJobs are what the last Heartbeat reported (each only when
  given), 0 until then;
- RegisterWorker with the workerId of a registered worker updates that one (queues,
  concurrency, lastSeen; hostname and pid when given) and keeps its name, registeredAt and
  counts; otherwise a new worker: name as given, queues [] by default, concurrency 1,
  hostname "unknown", pid 0, registeredAt = the client's startedAt or now;
- a worker is "active" while seen (registered or heartbeat) less than WORKER_TIMEOUT_MS ago,
  else "stale"; one not seen for 3 x WORKER_TIMEOUT_MS is removed (the reference sweeps every
  minute; here at the next worker command);
- workers go away with the connection that registered them;
- ListWorkers' stats: total, active, the lifetime totals of the reported processed / failed
  counts (they stay after their worker is gone), the reported active jobs of the workers there
  now, and the concurrency of the active workers.

Times are wall-clock ms from the port's clock.
"""
from __future__ import annotations

from .codec import UNDEFINED, js_num, num

__all__ = ["WORKER_TIMEOUT_MS", "WorkerRegistry"]

#: A worker not seen for this long (ms) is "stale" (reference default, env WORKER_TIMEOUT_MS).
WORKER_TIMEOUT_MS = 30_000
#: ... and removed after this long (ms).
WORKER_REMOVE_MS = 3 * WORKER_TIMEOUT_MS


def _number(v) -> bool:
    return v.__class__ in (int, float)


def _key(v):
    """`v` as a workerId to look up (None for a value that cannot be one: a list, a map)."""
    return v if v.__class__ in (str, int, float) else None


class WorkerRegistry:
    """The workers of one server process. `by_id`: workerId -> record (a dict with the reply
    keys plus "session", the Session that registered it); lifetime counters `processed`,
    `failed` and the current sum `active` of the reported counts."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict] = {}
        self.processed = 0
        self.failed = 0
        self.active = 0

    def __len__(self) -> int:
        return len(self.by_id)

    def _drop(self, wid: str) -> None:
        w = self.by_id.pop(wid)
        self.active -= w["activeJobs"]

    def sweep(self, now_ms: int) -> None:
        """Remove the workers not seen for WORKER_REMOVE_MS (`now_ms`: wall ms)."""
        old = [wid for wid, w in self.by_id.items() if now_ms - w["lastSeen"] > WORKER_REMOVE_MS]
        for wid in old:
            self._drop(wid)

    def register(self, cmd: dict, session, now_ms: int) -> dict:
        """RegisterWorker: the reply's `data` (workerId, name, queues, concurrency, hostname,
        pid, status, registeredAt, lastSeen, activeJobs, processedJobs, failedJobs,
        currentJob). `cmd`: the command's fields; `session`: who registers it."""
        self.sweep(now_ms)
        wid = _key(cmd.get("workerId"))
        queues = cmd.get("queues")
        queues = [] if queues is None else queues
        c = cmd.get("concurrency")
        c = 1 if c is None else c
        w = self.by_id.get(wid) if wid else None
        if w is not None:
            w["queues"] = queues
            w["concurrency"] = c
            w["lastSeen"] = num(now_ms)
            if cmd.get("hostname"):
                w["hostname"] = cmd["hostname"]
            if cmd.get("pid"):
                w["pid"] = cmd["pid"]
        else:
            if wid is None:
                wid = f"worker-{len(self.by_id) + 1}-{now_ms}"
            started = cmd.get("startedAt")
            hostname = cmd.get("hostname")
            pid = cmd.get("pid")
            w = {"id": wid, "name": cmd["name"] if "name" in cmd else UNDEFINED,
                 "queues": queues, "concurrency": c,
                 "hostname": "unknown" if hostname is None else hostname,
                 "pid": 0 if pid is None else pid,
                 "registeredAt": js_num(started) if _number(started) else num(now_ms),
                 "lastSeen": num(now_ms), "activeJobs": 0, "processedJobs": 0,
                 "failedJobs": 0, "currentJob": None, "session": session}
            self.by_id[wid] = w
        return {"workerId": w["id"], "name": w["name"], "queues": w["queues"],
                "concurrency": w["concurrency"], "hostname": w["hostname"], "pid": w["pid"],
                "status": "active", "registeredAt": w["registeredAt"],
                "lastSeen": w["lastSeen"], "activeJobs": w["activeJobs"],
                "processedJobs": w["processedJobs"], "failedJobs": w["failedJobs"],
                "currentJob": w["currentJob"]}

    def heartbeat(self, cmd: dict, now_ms: int) -> bool:
        """Heartbeat {id, activeJobs?, processed?, failed?}: lastSeen = now and the counts
        given (numbers; others are ignored). False when no such worker."""
        self.sweep(now_ms)
        w = self.by_id.get(_key(cmd.get("id")))
        if w is None:
            return False
        w["lastSeen"] = num(now_ms)
        v = cmd.get("activeJobs")
        if _number(v):
            self.active += v - w["activeJobs"]
            w["activeJobs"] = v
        v = cmd.get("processed")
        if _number(v):
            self.processed += v - w["processedJobs"]
            w["processedJobs"] = v
        v = cmd.get("failed")
        if _number(v):
            self.failed += v - w["failedJobs"]
            w["failedJobs"] = v
        return True

    def unregister(self, wid, now_ms: int) -> bool:
        """UnregisterWorker: False when no such worker."""
        self.sweep(now_ms)
        wid = _key(wid)
        if wid is None or wid not in self.by_id:
            return False
        self._drop(wid)
        return True

    def drop_session(self, session) -> None:
        """The connection `session` ended: its workers go."""
        for wid in [wid for wid, w in self.by_id.items() if w["session"] is session]:
            self._drop(wid)

    def listing(self, now_ms: int) -> dict:
        """ListWorkers' `data`: {workers: [{id, name, queues, concurrency, hostname, pid,
        status, registeredAt, lastSeen, activeJobs, processedJobs, failedJobs, currentJob,
        uptime (ms since registeredAt)}], stats: {total, active, totalProcessed, totalFailed,
        activeJobs, concurrencySlots}}."""
        self.sweep(now_ms)
        out = []
        n_active = slots = 0
        for w in self.by_id.values():
            active = now_ms - w["lastSeen"] < WORKER_TIMEOUT_MS
            if active:
                n_active += 1
                if _number(w["concurrency"]):
                    slots += w["concurrency"]
            out.append({"id": w["id"], "name": w["name"], "queues": w["queues"],
                        "concurrency": w["concurrency"], "hostname": w["hostname"],
                        "pid": w["pid"], "status": "active" if active else "stale",
                        "registeredAt": w["registeredAt"], "lastSeen": w["lastSeen"],
                        "activeJobs": w["activeJobs"], "processedJobs": w["processedJobs"],
                        "failedJobs": w["failedJobs"], "currentJob": w["currentJob"],
                        "uptime": js_num(now_ms - w["registeredAt"])})
        return {"workers": out, "stats": {
            "total": len(out), "active": n_active, "totalProcessed": js_num(self.processed),
            "totalFailed": js_num(self.failed), "activeJobs": js_num(self.active),
            "concurrencySlots": js_num(slots)}}
