"""How the engine treats jobs glide-mq producers create (core.api.JobPolicy; docs/mapping.md,
"glide-mq"): a beanstalk `delete` of a reserved job completes it (its producer polls
`HGET … state` and must see `completed`), finishing stamps `finishedOn`, glide-mq's
removeOnComplete / removeOnFail remove it, and a retry (after a failure from any dialect that
brings no delay of its own, or a job timeout) waits for glide-mq's backoff.
"""
from __future__ import annotations

from core.api import JobPolicy


def _retention(value) -> bool:
    """removeOnComplete / removeOnFail as glide-mq treats them: true (or a count of 0) removes
    the job at once. A count > 0 or an {age, count} object keeps it (jobgate keeps every
    finished job until the result retention ends: docs/glide-mq.md)."""
    if value is True:
        return True
    if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        return True
    if isinstance(value, dict) and value.get("count") == 0 and value.get("age") is None:
        return True
    return False


def _remove_completed(ext) -> bool:
    g = None if ext is None else ext.get("glide")
    return g is not None and _retention(g.get("roc"))


def _remove_failed(ext) -> bool:
    g = None if ext is None else ext.get("glide")
    return g is not None and _retention(g.get("rof"))


def backoff_ms(job, attempt: int) -> int:
    """glide-mq's retry delay (ms) before retry number `attempt` (1, 2, ...) of `job` (its
    extras' glide.backoff {type, delay}): fixed: delay; exponential: delay * 2^(attempt-1);
    none: 0 (retried at once)."""
    ext = job.ext or {}
    b = (ext.get("glide") or {}).get("backoff")
    if not isinstance(b, dict):
        return 0
    try:
        d = int(b.get("delay") or 0)
    except (TypeError, ValueError):
        return 0
    if b.get("type") == "exponential":
        return d * (2 ** max(0, attempt - 1))
    return d


GLIDEMQ_POLICY = JobPolicy(delete_completes=True, stamp_finish=True,
                           remove_completed=_remove_completed, remove_failed=_remove_failed,
                           backoff=backoff_ms, backoff_on_fail=True)


def install(port) -> None:
    """Set the glidemq policy on `port`."""
    port.set_policy("glidemq", GLIDEMQ_POLICY)
