"""How the dashboard shows a job (pure functions over core.api.JobView): payload preview,
priorities in the creating dialect's terms, options, logs and outcome (docs/dashboard.md).
Every string goes through Jinja2's autoescape in the templates; nothing here marks HTML safe.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

import msgpack

#: characters of a payload shown on the job page / in a list row
PREVIEW_CHARS = 4096
ROW_CHARS = 80
_BEAN_BASE = 2 ** 31


def _plain(v):
    """A MessagePack-decoded value made JSON-able (bytes as text)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def payload_text(payload: bytes, fmt: int) -> str:
    """The payload as text: a MessagePack value (fmt 1) as indented JSON, else the bytes as
    UTF-8 (invalid bytes replaced)."""
    if fmt == 1:
        try:
            v = msgpack.unpackb(payload, raw=False, strict_map_key=False, timestamp=3)
            return json.dumps(_plain(v), indent=2, ensure_ascii=False)
        except Exception:
            pass
    return payload.decode("utf-8", "replace")


def preview(payload: bytes, fmt: int, chars: int) -> tuple:
    """(text cut to `chars` characters, True when it was cut)."""
    if fmt == 1 and len(payload) > 1 << 20:
        fmt = 0   # too big to decode for a preview: its bytes
    t = payload_text(payload[: chars * 4 + 64] if fmt != 1 else payload, fmt)
    cut = len(t) > chars or (fmt != 1 and len(payload) > chars * 4 + 64)
    return t[:chars], cut


def priority_value(job) -> int:
    """The job's priority as its creating dialect writes it (docs/mapping.md, "Priority"):
    beanstalk pri = rank + 2^31; workq / bunqueue priority = -rank; glide-mq priority =
    rank + 4096 for a prioritized job, else 0 (LIFO and plain jobs); any other dialect: the
    canonical rank."""
    r = job.priority
    d = job.dialect
    if d == "beanstalk":
        return r + _BEAN_BASE
    if d in ("workq", "bunqueue", "http"):
        return -r
    if d == "glidemq":
        return r + 4096 if r < -1 else 0
    return r


def dialect_priority(job) -> str:
    """priority_value with the dialect's word for it: "65536 (beanstalk pri)"."""
    d = job.dialect
    if d == "beanstalk":
        return f"{priority_value(job)} (beanstalk pri)"
    if d in ("workq", "bunqueue", "http", "glidemq"):
        return f"{priority_value(job)} ({d} priority)"
    return f"{job.priority} (rank)"


def wall(ms) -> str:
    """Wall ms as an ISO time (UTC), '' for 0 / None."""
    if not ms:
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return str(ms)


def label(job) -> str:
    """The state shown: `failed` for a buried job with a result."""
    if job.state == "buried" and job.result is not None:
        return "failed"
    return "waiting for dependencies" if job.blocked else job.state


def detail(job) -> dict:
    """Everything the job page shows, as plain values."""
    ext = dict(job.ext) if job.ext is not None else {}
    text, cut = preview(job.payload, job.fmt, PREVIEW_CHARS)
    logs = []
    for x in ext.get("logs") or ():
        if isinstance(x, (list, tuple)) and len(x) >= 3:
            logs.append({"message": str(x[0]), "level": str(x[1]), "at": wall(x[2])})
        else:
            logs.append({"message": str(x), "level": "", "at": ""})
    outcome = None
    if job.result is not None:
        r, rcut = preview(job.result, 1 if ext.get("resultFmt") == 1 else 0, PREVIEW_CHARS)
        outcome = {"ok": job.result_ok, "text": r, "cut": rcut}
    error = ext.get("failedReason") or ext.get("dlqReason")
    options = [
        ("priority", dialect_priority(job)), ("rank", job.priority),
        ("TTR", f"{job.ttr_ms} ms"), ("delay", f"{job.delay_ms} ms"),
        # workq counts attempts at lease (max_attempts), bunqueue at failure (maxAttempts =
        # max_fails: protocols/bunqueue/jobview.py); "-": unlimited
        ("attempts / max", f"{job.reserves} / {job.max_attempts or '-'}"),
        ("fails / max", f"{job.fails} / {job.max_fails or '-'}"),
        ("backoff", json.dumps(_plain(ext["backoff"])) if "backoff" in ext else "-"),
        ("TTL", f"{job.ttl_ms} ms" if job.ttl_ms else "-"),
    ]
    if job.left_ms:
        options.append(("due", f"{wall(job.due_ms)} (in {job.left_ms} ms)"))
    counters = [("reserves", job.reserves), ("timeouts", job.timeouts),
                ("releases", job.releases), ("buries", job.buries), ("kicks", job.kicks),
                ("fails", job.fails)]
    shown = {k: v for k, v in ext.items() if k not in ("logs",)}
    return {"job": job, "state": label(job), "payload": text, "payload_cut": cut,
            "payload_bytes": len(job.payload), "options": options, "counters": counters,
            "logs": logs, "outcome": outcome, "error": None if error is None else str(error),
            "stack": ext.get("stacktrace"), "created": wall(job.created_ms),
            "extras": json.dumps(_plain(shown), indent=2, ensure_ascii=False) if shown else "",
            "lease": job.lease, "timeline": _timeline(ext.get("timeline"))}


def _timeline(t) -> list:
    """bunqueue's per-job timeline (extras `timeline`: [{state, timestamp, ...}]) as rows."""
    rows = []
    for x in t if isinstance(t, (list, tuple)) else ():
        if isinstance(x, dict):
            rows.append({"state": str(x.get("state", "")),
                         "at": wall(x.get("timestamp")) if isinstance(x.get("timestamp"),
                                                                      int) else "",
                         "error": str(x.get("error") or "")})
    return rows


def row(job) -> dict:
    """One line of the job list."""
    text, cut = preview(job.payload, job.fmt, ROW_CHARS)
    return {"id": job.id, "state": label(job), "priority": priority_value(job),
            "rank": job.priority,
            "dialect": job.dialect, "created": wall(job.created_ms), "reserves": job.reserves,
            "payload": text + ("…" if cut else "")}
