"""Snapshots of live records for the port (core/api.py): Job -> JobView / Reserved, Queue ->
QueueView, the engine -> ServerStats. The value types are in core/model.py.

A snapshot copies every field; `ext` is shared as a read-only mapping, which is safe because the
engine replaces a job's extras dict on every change and never changes one in place
(core/extras.py). Times: `left_ms` from the engine's monotonic clock, `due_ms` in wall ms.
"""
from __future__ import annotations

from types import MappingProxyType

from .leases import token_str
from .records import Job, live_job
from .model import (DELAYED, RESERVED, JobView, LeaseView, QueueView, Reserved, ServerStats,
                    derived_uid)

_new = tuple.__new__


def adapter(engine, convert, callback):
    """A waiter's callback for the engine: `callback` gets a live Job as `convert(engine, job)`
    (reserved or job_view); markers such as TIMED_OUT pass through."""
    def cb(x):
        callback(convert(engine, x) if x.__class__ is Job else x)
    return cb


def reserved(engine, job) -> Reserved:
    """The Reserved value of a job that was just reserved."""
    j = engine.journal
    return _new(Reserved, (job.id, job.uid, job.queue, job.payload, job.fmt, job.ttr_ms,
                           job.token, j is None or (job.in_db != 0 and job.in_db <= j.committed)))


def job_view(engine, job) -> JobView:
    """An immutable snapshot of `job` (core.records.Job)."""
    st = job.state
    left = due = 0
    lease = None
    if st is DELAYED or st is RESERVED:
        clock = engine.clock
        now = clock.monotonic_ms()
        at = job.ready_at if st is DELAYED else job.deadline
        left = at - now
        due = clock.wall_ms() + left
        if st is RESERVED:
            lease = LeaseView(token_str(job.token), job.lease_mode, job.owner.name, left, due)
    ext = job.ext
    return _new(JobView, (
        job.id, job.uid if job.uid is not None else derived_uid(job.id), job.uid is not None,
        job.queue, job.payload, job.fmt, job.priority, st, job.dialect, job.created_ms,
        job.delay_ms, job.ttr_ms, job.ttl_ms, job.sched_ms, job.max_attempts, job.max_fails,
        job.reserves, job.timeouts, job.releases, job.buries, job.kicks, job.fails, job.result,
        job.result_ok, None if ext is None else MappingProxyType(ext),
        ext is not None and bool(ext.get("deps")), left, due, lease))


def queue_view(engine, q) -> QueueView:
    """An immutable snapshot of queue `q` (core.records.Queue)."""
    now = engine.clock.monotonic_ms()
    paused = q.paused_until > now
    blocked = 0
    if q.n_delayed:
        jobs = engine.jobs
        blocked = sum(1 for e in q.delayed if (j := live_job(jobs, e)) is not None
                      and j.ext is not None and j.ext.get("deps"))
    return QueueView(q.name, q.n_ready, q.urgent, q.n_delayed, blocked, q.n_reserved,
                     len(q.buried), q.n_done, q.using, q.watching, q.waiting, q.total_jobs,
                     q.deletes, q.pauses, paused, q.pause_ms,
                     q.paused_until - now if paused else 0, q.keep, q.name in engine.pinned)


def server_stats(engine) -> ServerStats:
    """Server-wide counts of `engine` (core.engine.Engine)."""
    urgent = ready = reserved_ = delayed = buried = done = 0
    for q in engine.queues.values():
        urgent += q.urgent
        ready += q.n_ready
        reserved_ += q.n_reserved
        delayed += q.n_delayed
        buried += len(q.buried)
        done += q.n_done
    return ServerStats(urgent, ready, reserved_, delayed, buried, done, len(engine.queues),
                       engine.waiting, engine.job_timeouts, engine.total_jobs,
                       engine.evicted_jobs, engine.stall_failures, engine.draining)
