"""Cron schedules of the canonical engine (issue 16; bunqueue-tcp-protocol.txt "Cron Commands";
reference behaviour: bunqueue 2.9.5 dist/infrastructure/scheduler/cron/*.js and cronParser.js;
every choice is written in docs/bunqueue.md, "Cron (issue 16)"). The calendar (validation,
next runs across time zones) is core/cron_calendar.py.

A schedule names a queue, a job template (CronJob: the canonical job each due time creates) and
its timing: a cron expression (5 fields, or 6 with leading seconds; croniter computes the
calendar, zoneinfo the IANA time zone) or `repeat_every_ms`. Schedules live in the engine
(`Engine.cron`, a CronTable) and fire on the engine's clock: `due_mono()` feeds
Engine.next_due, `tick()` runs from Engine.tick. Each due time creates at most one ordinary job
through Engine.put (so every dialect's consumers of the queue see it) and writes the schedule's
row (executions, next_run_ms) with `journal.put_record` in the SAME batch as that job: a kill -9
between firing and commit loses both or neither.

Times: wall ms since the epoch (`next_run_ms`, `after_ms`); the engine's timers are monotonic,
`due_mono()` converts. Errors: CronError (`kind`, `detail`) for invalid timing.
"""
from __future__ import annotations

import os
from heapq import heappop, heappush
from typing import NamedTuple

import msgpack

from .cron_calendar import CronError, check_timing, next_run_ms

#: A repeatEvery schedule fired less than this fraction of its interval ago is not fired again
#: (reference getSkipReason "overlap"; it collapses a catch-up burst into one run).
OVERLAP_FRACTION = 0.8
#: The longest the engine's timer waits while schedules exist (ms): a wall clock that jumps
#: is noticed within this (the reference's SAFETY_FALLBACK_MS).
SAFETY_MS = 60_000


class CronJob(NamedTuple):
    """The canonical job a schedule creates at each due time (Engine.put's arguments):
    `payload` bytes in encoding `fmt` (0 raw, 1 MessagePack), `priority` the canonical rank,
    `ttr_ms`, `max_fails` (0: the first failure is final), `dialect` that owns the job (its
    JobPolicy applies), `ext` the dialect extras (a ``uniqueKey`` there: no job while an
    unfinished job of the queue holds that key), `delay_ms` / `ttl_ms` (0: none), `uuid7`:
    give each run's job a fresh UUIDv7 uid (a bunqueue job id, as the reference's runs have),
    else none (other dialects name it by the derived uid); `event`: the history event of the
    job's creation (core/transitions.py: put, add, push, ...)."""

    payload: bytes
    fmt: int
    priority: int
    ttr_ms: int
    max_fails: int
    dialect: str
    ext: dict | None = None
    delay_ms: int = 0
    ttl_ms: int = 0
    uuid7: bool = False
    event: str = "put"


def uuid7(now_ms: int) -> str:
    """A random UUIDv7 string (RFC 9562) for wall time `now_ms`: 48-bit ms timestamp, version
    7, 74 random bits."""
    r = int.from_bytes(os.urandom(10), "big")
    hi = (now_ms & 0xFFFFFFFFFFFF) << 80 | 0x7 << 76 | (r >> 62 & 0xFFF) << 64
    n = hi | 0x2 << 62 | (r & 0x3FFFFFFFFFFFFFFF)
    h = "%032x" % n
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class CronView(NamedTuple):
    """A snapshot of one schedule: `name`, `queue`, `schedule` (the expression as given, or
    None), `repeat_every_ms` (or None), `timezone` (IANA name or None), `next_run_ms` (wall
    ms), `executions` (runs so far), `max_limit` (None: unlimited), `info` (the dialect's own
    fields, stored as given: bunqueue's jobName and priority), `job` (the CronJob)."""

    name: str
    queue: str
    schedule: str | None
    repeat_every_ms: int | None
    timezone: str | None
    next_run_ms: int
    executions: int
    max_limit: int | None
    info: dict
    job: CronJob


# ----------------------------------------------------------------------------- schedules
#: advance()'s verdicts
FIRE, SKIP, DROP = "fire", "skip", "drop"


def _after(scheduled: int, every: int, now: int) -> int:
    """The first `scheduled + k * every` (k >= 1) strictly after `now`."""
    k = max(1, (now - scheduled) // every + 1)
    return scheduled + k * every


def advance(s, now: int) -> str:
    """One due time of schedule `s` at wall ms `now` (reference CronExecution): DROP when it
    is exhausted (maxLimit reached) or its expression has no next match (nothing changed);
    SKIP when a repeatEvery run came too soon after the last one (overlap: next_run moved on,
    no job); FIRE otherwise (executions counted, next_run moved on; missed repeatEvery
    intervals collapse into this run): the caller creates the job and stores the schedule."""
    if s.max_limit is not None and s.executions >= s.max_limit:
        return DROP   # exhausted: the reference drops it at its next due time
    scheduled = s.next_run
    if s.schedule:
        try:
            nxt = next_run_ms(s.schedule, now, s.tz)
        except CronError:   # no match left (or its zone vanished): it will never run again
            return DROP
    else:
        nxt = scheduled + s.every
        if s.last_fired is not None and now - s.last_fired < s.every * OVERLAP_FRACTION:
            s.next_run = _after(scheduled, s.every, now)   # overlap: skipped
            return SKIP
    s.executions += 1
    if s.every is not None and nxt <= now:
        nxt = _after(scheduled, s.every, now)   # missed intervals collapse into this run
    s.next_run = nxt
    s.last_fired = now
    return FIRE


def schedule_of(r: dict):
    """The schedule of a stored cron_schedules row `r` (dict: name, queue, next_run_ms,
    executions, spec bytes), as the engine keeps it (next_run None when the row has none)."""
    spec = msgpack.unpackb(r["spec"], raw=False, strict_map_key=False)
    s = _Schedule()
    s.name, s.queue = r["name"], r["queue"]
    s.executions = int(r["executions"])
    s.next_run = r["next_run_ms"]
    s.schedule = spec.get("schedule")
    s.every = spec.get("repeatEvery")
    s.tz = spec.get("timezone")
    s.max_limit = spec.get("maxLimit")
    s.skip_missed = spec.get("skipMissed", True)
    s.seq = spec.get("seq", 0)
    s.info = spec.get("info") or {}
    jl = spec["job"]
    s.job = CronJob(bytes(jl[0]), *jl[1:])
    s.last_fired = None
    return s


class _Schedule:
    __slots__ = ("name", "queue", "schedule", "every", "tz", "max_limit", "executions",
                 "next_run", "job", "info", "skip_missed", "seq", "gen", "last_fired")

    def view(self) -> CronView:
        return CronView(self.name, self.queue, self.schedule, self.every, self.tz,
                        self.next_run, self.executions, self.max_limit, self.info, self.job)

    def row(self) -> dict:
        """The cron_schedules row (core/schema.py): the rest of the schedule in `spec`."""
        j = self.job
        spec = {"schedule": self.schedule, "repeatEvery": self.every, "timezone": self.tz,
                "maxLimit": self.max_limit, "skipMissed": self.skip_missed, "seq": self.seq,
                "info": self.info,
                "job": [j.payload, j.fmt, j.priority, j.ttr_ms, j.max_fails, j.dialect, j.ext,
                        j.delay_ms, j.ttl_ms, j.uuid7, j.event]}
        return {"name": self.name, "queue": self.queue, "next_run_ms": self.next_run,
                "executions": self.executions,
                "spec": msgpack.packb(spec, use_bin_type=True)}


class CronTable:
    """The engine's schedules (see the module docstring). `engine`: core.engine.Engine (its
    clock, journal, put, dedup index and timer arming)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        #: False on a node in shared mode: the leader fires the stored schedules in the
        #: database (core/shared_cron.py); this table only keeps what clients set here
        self.firing = True
        self.by_name: dict[str, _Schedule] = {}   # insertion order = CronList order
        self.heap: list = []                       # (next_run wall ms, gen, schedule)
        self._gen = 0
        self._seq = 0
        self.fired = 0                             # jobs created by schedules

    # ------------------------------------------------------------------ operations
    def set(self, queue: str, name: str, job: CronJob, schedule: str | None = None,
            repeat_every_ms: int | None = None, timezone: str | None = None,
            max_limit: int | None = None, immediately: bool = False,
            skip_missed_on_restart: bool = True, info: dict | None = None
            ) -> tuple[CronView, bool]:
        """Create or replace schedule `name` (reference CronRuntime.add): its next run is
        computed from now (`immediately`, for a new schedule: now); a replaced schedule keeps
        its executions count and its place in list order. `max_limit` <= 0 means unlimited.
        Returns (view, existed). Raises CronError (nothing changes)."""
        now = self.engine.clock.wall_ms()
        check_timing(schedule, repeat_every_ms, timezone, now)
        nxt = next_run_ms(schedule, now, timezone) if schedule else now + repeat_every_ms
        old = self.by_name.get(name)
        s = _Schedule()
        s.name, s.queue, s.job = name, queue, job
        s.schedule = schedule or None
        s.every = repeat_every_ms
        s.tz = timezone
        s.max_limit = max_limit if max_limit is not None and max_limit > 0 else None
        s.executions = old.executions if old is not None else 0
        s.next_run = now if immediately and old is None else nxt
        s.info = dict(info or {})
        s.skip_missed = bool(skip_missed_on_restart)
        s.last_fired = None
        if old is not None:
            s.seq = old.seq
        else:
            self._seq += 1
            s.seq = self._seq
        self.by_name[name] = s
        self._push(s)
        self._store(s)
        return s.view(), old is not None

    def get(self, name: str) -> CronView | None:
        s = self.by_name.get(name)
        return None if s is None else s.view()

    def delete(self, name: str) -> bool:
        """Remove schedule `name`; False when there is none."""
        s = self.by_name.pop(name, None)
        if s is None:
            return False
        s.gen = -1
        j = self.engine.journal
        if j is not None:
            j.put_record("cron_schedules", name, None)
        return True

    def list(self) -> list:
        return [s.view() for s in self.by_name.values()]

    # ------------------------------------------------------------------ timers
    def due_mono(self):
        """Monotonic ms of the earliest live next run (at most SAFETY_MS from now), or None."""
        h = self.heap
        while h and h[0][2].gen != h[0][1]:
            heappop(h)
        if not h or not self.firing:
            return None
        c = self.engine.clock
        return c.monotonic_ms() + min(h[0][0] - c.wall_ms(), SAFETY_MS)

    def tick(self) -> None:
        """Fire every schedule due at the clock's wall time (reference CronExecution.tick)."""
        h = self.heap
        if not h or not self.firing:
            return
        now = self.engine.clock.wall_ms()
        while h and h[0][0] <= now:
            at, gen, s = heappop(h)
            if s.gen != gen:
                continue
            self._run(s, now)

    def _run(self, s: _Schedule, now: int) -> None:
        step = advance(s, now)
        if step is DROP:
            self.delete(s.name)
            return
        if step is FIRE:
            self._fire(s)
        self._push(s)
        self._store(s)   # after the job: both in the journal's open batch

    def _fire(self, s: _Schedule) -> None:
        j = s.job
        e = self.engine
        key = j.ext.get("uniqueKey") if j.ext else None
        if key is not None and e.dedup_job(s.queue, key) is not None:
            return   # the previous run's job is unfinished (reference preventOverlap)
        uid = None
        if j.uuid7:
            uid = uuid7(e.clock.wall_ms())
            while e.uid_taken(uid):
                uid = uuid7(e.clock.wall_ms())
        e.put(s.queue, j.payload, j.priority, j.delay_ms, j.ttr_ms, j.dialect, uid,
              j.ttl_ms, j.ttl_ms, 0, j.max_fails, 0, j.event,
              dict(j.ext) if j.ext else None, j.fmt)
        self.fired += 1

    def _push(self, s: _Schedule) -> None:
        self._gen += 1
        s.gen = self._gen
        heappush(self.heap, (s.next_run, s.gen, s))
        c = self.engine.clock
        self.engine._arm(c.monotonic_ms() + (s.next_run - c.wall_ms()))

    def _store(self, s: _Schedule) -> None:
        j = self.engine.journal
        if j is not None:
            j.put_record("cron_schedules", s.name, s.row())

    # ------------------------------------------------------------------ recovery
    def restore(self, rows: list) -> int:
        """Load stored schedules (store.load_records("cron_schedules")) at start. A schedule
        whose next run passed while the server was down: with skip-missed (the reference's
        default, skipMissedOnRestart) its next run is recomputed from now and nothing fires
        for the missed runs; without it, it fires once at the first tick and the other missed
        runs collapse into that one (docs/bunqueue.md). Returns how many were loaded."""
        now = self.engine.clock.wall_ms()
        loaded = []
        for r in rows:
            s = schedule_of(r)
            if s.next_run is None:
                s.next_run = now
            if s.skip_missed and s.next_run < now:
                try:
                    s.next_run = (next_run_ms(s.schedule, now, s.tz) if s.schedule
                                  else now + s.every)
                except CronError:
                    continue   # its time zone is gone from this system: kept stored, not run
                self._store(s)
            loaded.append(s)
        loaded.sort(key=lambda x: x.seq)
        for s in loaded:
            self.by_name[s.name] = s
            self._seq = max(self._seq, s.seq)
            self._push(s)
        return len(loaded)
