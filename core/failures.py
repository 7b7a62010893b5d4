"""Failure records and the stall policy (canonical; first needed by bunqueue).

Failure records live in the job's extras (core/extras.py: `ext` is replaced, never changed in
place), under the keys bunqueue 2.9.5 uses in its Job object, so they are stored with the job
and survive a restart:

- `failedReason`: the last failure's text (None when it gave none);
- `stacktrace`: its stack, at most the job's stackTraceLimit non-empty lines (Failure.stack_limit;
  the reference's default is STACK_LIMIT, 10), or None;
- `timeline`: the attempts made, as {state, timestamp[, error, attempt]} entries: "active"
  (when the failed attempt started), "failed", and "waiting" when it was retried; at most
  TIMELINE_KEEP entries are kept (the reference keeps 20 with the first and the current one);
- `runAt`: wall ms at which a retried job is due again; `dlqReason` / `dlqAt`: why and when
  the job went to the dead letters.

The stall policy decides what a TTR (lock) expiry does to a job, per dialect that created it
(JobPolicy, set by the dialect through the port): by default the job is ready again and a
timeout is counted. bunqueue's (reference lockManager): the expiry also counts an attempt, and
the job goes to the dead letters at maxAttempts ("max_attempts_exceeded") or after MAX_STALLS
expiries ("stalled").

Units: wall ms.
"""
from __future__ import annotations

from typing import NamedTuple

#: Stack lines kept per failure (bunqueue 2.9.5: stackTraceLimit defaults to 10).
STACK_LIMIT = 10
#: Timeline entries kept per job (the job view adds its first and current entries: 20).
TIMELINE_KEEP = 18


class JobPolicy(NamedTuple):
    """How the engine treats the jobs a dialect creates.

    `stall_counts_attempt`: a TTR expiry counts an explicit failure (`fails`); `max_stalls`:
    after this many expiries the job goes to the dead letters (0: never); `ttl_spares_reserved`:
    a TTL that ends while the job is reserved waits for the lease to end (bunqueue's ttl) instead
    of evicting it at once (workq's); `max_attempts_error` / `stalled_error`: the failure texts
    of those dead-lettered jobs ({max} is maxAttempts, {stalls} the expiries);
    `timeout_error`: the failure text when a job's own timeout ends a reservation (core/extras.py
    key ``timeout``); `backoff`: None, or fn(job, attempt) -> ms to wait before that retry.

    Finishing (glide-mq, issue 17; docs/mapping.md): `delete_completes`: a delete by the owner
    that reserved the job (beanstalk's only word for success) completes it with an empty result
    instead of removing it, so its producer sees it completed; `stamp_finish`: a job that
    completes or fails for good gets extras key ``finishedOn`` (wall ms) in that transition;
    `remove_completed` / `remove_failed`: None, or fn(ext) -> bool: True removes the job
    (history event `remove`) once it completed / failed for good (glide-mq's
    removeOnComplete / removeOnFail); `backoff_on_fail`: an explicit failure that retries and
    brings no delay of its own (a workq `fail`) waits for `backoff` (the creator's rule).
    """

    stall_counts_attempt: bool = False
    max_stalls: int = 0
    ttl_spares_reserved: bool = False
    max_attempts_error: str = "Lock expired at max attempts ({max})"
    stalled_error: str = "Lock expired after {stalls} renewals"
    timeout_error: str = "Job timeout exceeded"
    backoff: object = None
    delete_completes: bool = False
    stamp_finish: bool = False
    remove_completed: object = None
    remove_failed: object = None
    backoff_on_fail: bool = False


DEFAULT_POLICY = JobPolicy()


def stack_lines(stack, limit=STACK_LIMIT) -> list | None:
    """The stack lines kept for a failure: stripped, non-empty str entries, at most `limit`
    (None: no limit; 0 or less: none); None when there are none or `stack` is not a list
    (bunqueue 2.9.5 domain/job/state.js normalizeStacktrace)."""
    if stack.__class__ is not list:
        return None
    out = []
    for s in stack:
        if limit is not None and len(out) >= limit:
            break
        if s.__class__ is str and s.strip():
            out.append(s.strip())
    return out or None


def failed(ext, failure, attempt: int, now_ms: int) -> dict:
    """The extras after a failure of attempt number `attempt` (a core.model.Failure) at
    `now_ms`: `failedReason`, `stacktrace` (only when the failure carries a stack list), and
    the timeline's "active" (when the attempt started) and "failed" entries."""
    ext = dict(ext) if ext else {}
    if failure.stack.__class__ is list:
        ext["stacktrace"] = stack_lines(failure.stack, failure.stack_limit)
    ext["failedReason"] = failure.error
    tl = list(ext.get("timeline", ()))
    if ext.get("startedAt") is not None:
        tl.append({"state": "active", "timestamp": float(ext["startedAt"])})
    tl.append({"state": "failed", "timestamp": float(now_ms), "error": failure.error,
               "attempt": attempt})
    ext["timeline"] = tl
    return ext


def retried(ext: dict, attempt: int, now_ms: int, run_at_ms: int) -> dict:
    """The extras of a failed job that waits again: a "waiting" timeline entry, `runAt`, and
    no `startedAt`."""
    ext = dict(ext)
    ext["timeline"] = list(ext.get("timeline", ())) + [
        {"state": "waiting", "timestamp": float(now_ms), "attempt": attempt}]
    ext["runAt"] = run_at_ms
    ext.pop("startedAt", None)
    return ext


def trimmed(ext: dict) -> dict:
    """`ext` with at most TIMELINE_KEEP timeline entries (the newest)."""
    tl = ext.get("timeline")
    if tl is not None and len(tl) > TIMELINE_KEEP:
        ext = dict(ext)
        ext["timeline"] = tl[-TIMELINE_KEEP:]
    return ext


def dead(ext, now_ms: int, reason: str | None = None, error=None) -> dict:
    """The extras of a job that went to the dead letters: `dlqReason` (`reason`, or kept, or
    "max_attempts_exceeded"), `dlqAt`, and `failedReason` when `error` is given."""
    ext = dict(ext) if ext else {}
    if reason is not None:
        ext["dlqReason"] = reason
    else:
        ext.setdefault("dlqReason", "max_attempts_exceeded")
    ext["dlqAt"] = now_ms
    if error is not None:
        ext["failedReason"] = error
    return ext


def stalled(job, policy: JobPolicy, now_ms: int) -> bytes | None:
    """Apply `policy` to `job` (a core.records.Job whose TTR just expired; `timeouts` already
    counts this expiry). Returns the failure text when the job goes to the dead letters, else
    None (it is ready again). Updates the job's fails and extras."""
    if not policy.stall_counts_attempt:
        return None
    job.fails += 1
    ext = dict(job.ext) if job.ext else {}
    ext.pop("startedAt", None)
    if job.fails >= job.max_fails:
        reason, error = "max_attempts_exceeded", policy.max_attempts_error.format(
            max=job.max_fails)
    elif policy.max_stalls and job.timeouts >= policy.max_stalls:
        reason, error = "stalled", policy.stalled_error.format(stalls=job.timeouts)
    else:
        job.ext = ext
        return None
    job.ext = dead(ext, now_ms, reason, error)
    return error.encode()
