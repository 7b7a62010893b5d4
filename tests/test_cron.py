"""Cron schedules of the canonical engine on a ManualClock (issue 16 item 1; core/cron.py;
docs/bunqueue.md "Cron (issue 16)"): 5- and 6-field expressions, repeatEvery, IANA time zones
with a spring-forward and a fall-back day, maxLimit, executions / nextRun, the dedup key of a
run, the same-batch rule (a run's job and the schedule's row commit together), and a restart
from a real SQLite file with several runs missed while down.
"""
from __future__ import annotations

from datetime import datetime, timezone

import msgpack
import pytest

from core.api import CronError, CronJob, ManualClock, Port
from core.storage import Store
from migrations import upgrade

from .storage_support import Node


def utc_ms(s: str) -> int:
    return int(datetime.fromisoformat(s).replace(tzinfo=timezone.utc).timestamp() * 1000)


JOB = CronJob(msgpack.packb({"c": 1}), 1, 0, 30_000, 3, "bunqueue")


def port_at(iso: str, durable: bool = False):
    clock = ManualClock(utc_ms(iso))
    return clock, Port.create(clock, durable=durable)


def advance_to(clock, port, iso_or_ms) -> None:
    """Move the clock to a wall time, running every due timer on the way (as the gateway's
    ticker does: at each next_due)."""
    target = utc_ms(iso_or_ms) if isinstance(iso_or_ms, str) else iso_or_ms
    while True:
        due = port.next_due()
        step_to = target if due is None else min(target, clock.wall_ms()
                                                  + max(0, due - clock.monotonic_ms()))
        clock.advance(step_to - clock.wall_ms())
        port.tick()
        if clock.wall_ms() >= target:
            return


def fired(port, queue="q") -> list:
    return [v.created_ms for v in port.jobs(queue)]


# --------------------------------------------------------------------------- expressions
def test_five_field_expression_fires_each_due_time_once():
    clock, p = port_at("2026-05-01T10:07:30")
    v, existed = p.cron_set("q", "hourly", JOB, schedule="0 * * * *")
    assert not existed and v.next_run_ms == utc_ms("2026-05-01T11:00:00")
    advance_to(clock, p, "2026-05-01T10:59:59")
    assert p.jobs("q") == []
    advance_to(clock, p, "2026-05-01T13:30:00")
    assert fired(p) == [utc_ms("2026-05-01T11:00:00"), utc_ms("2026-05-01T12:00:00"),
                        utc_ms("2026-05-01T13:00:00")]
    v = p.cron_get("hourly")
    assert (v.executions, v.next_run_ms) == (3, utc_ms("2026-05-01T14:00:00"))
    j = p.jobs("q")[0]
    assert (j.payload, j.priority, j.dialect) == (JOB.payload, 0, "bunqueue")


def test_six_field_expression_has_leading_seconds():
    clock, p = port_at("2026-05-01T10:00:00.500")
    v, _ = p.cron_set("q", "s", JOB, schedule="*/20 * * * * *")
    assert v.next_run_ms == utc_ms("2026-05-01T10:00:20")
    advance_to(clock, p, "2026-05-01T10:01:00")
    assert fired(p) == [utc_ms(f"2026-05-01T10:00:{s}") for s in ("20", "40")] + [
        utc_ms("2026-05-01T10:01:00")]
    v, _ = p.cron_set("q", "noon", JOB, schedule="0 0 12 * * *")
    assert v.next_run_ms == utc_ms("2026-05-01T12:00:00")
    v, _ = p.cron_set("q", "daily", JOB, schedule="@DAILY")
    assert v.next_run_ms == utc_ms("2026-05-02T00:00:00")


@pytest.mark.parametrize("kw, kind", [
    ({"schedule": "nope"}, "fields"),
    ({"schedule": "1 2 3 4 5 6 7"}, "fields"),
    ({"schedule": "61 * * * *"}, "range"),
    ({"schedule": "*/0 * * * *"}, "syntax"),
    ({"schedule": "@every5m"}, "syntax"),
    ({"schedule": "0 0 30 2 *"}, "no_future"),
    ({"schedule": "0 * * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({}, "missing"),
    ({"repeat_every_ms": 0}, "timing"),
    ({"repeat_every_ms": 2**53}, "timing"),
])
def test_invalid_timing_is_refused_and_changes_nothing(kw, kind):
    clock, p = port_at("2026-05-01T10:00:00")
    with pytest.raises(CronError) as e:
        p.cron_set("q", "bad", JOB, **kw)
    assert e.value.kind == kind
    assert p.cron_list() == [] and p.next_due() is None


# --------------------------------------------------------------------------- repeatEvery
def test_repeat_every_keeps_its_grid_and_max_limit_stops_it():
    clock, p = port_at("2026-05-01T10:00:00")
    v, _ = p.cron_set("q", "every", JOB, repeat_every_ms=1500, max_limit=3)
    assert (v.next_run_ms, v.max_limit, v.executions) == (clock.wall_ms() + 1500, 3, 0)
    t0 = clock.wall_ms()
    advance_to(clock, p, t0 + 4600)
    assert fired(p) == [t0 + 1500, t0 + 3000, t0 + 4500]
    v = p.cron_get("every")
    assert (v.executions, v.next_run_ms) == (3, t0 + 6000)   # listed until its next due time
    advance_to(clock, p, t0 + 60_000)
    assert len(p.jobs("q")) == 3 and p.cron_get("every") is None   # exhausted: gone
    # maxLimit 0 or negative: unlimited (reference createCronJob)
    v, _ = p.cron_set("q", "e2", JOB, repeat_every_ms=1000, max_limit=0)
    assert v.max_limit is None


def test_a_run_does_not_duplicate_an_unfinished_job_with_the_same_key():
    clock, p = port_at("2026-05-01T10:00:00")
    keyed = JOB._replace(ext={"uniqueKey": "cron:k"})
    p.cron_set("q", "k", keyed, repeat_every_ms=1000)
    t0 = clock.wall_ms()
    advance_to(clock, p, t0 + 3500)
    assert len(p.jobs("q")) == 1                       # runs 2 and 3 found run 1 waiting
    assert p.cron_get("k").executions == 3             # but they count (reference)
    owner = p.new_owner("beanstalk")
    r = p.reserve(owner, ["q"], 0, lambda _: None)
    p.delete(owner, r.id)
    advance_to(clock, p, t0 + 4500)
    assert len(p.jobs("q")) == 1 and p.cron_get("k").executions == 4


def test_update_by_name_keeps_executions_and_list_order():
    clock, p = port_at("2026-05-01T10:00:00")
    p.cron_set("q", "a", JOB, repeat_every_ms=1000)
    p.cron_set("q", "b", JOB, schedule="0 * * * *")
    advance_to(clock, p, clock.wall_ms() + 2000)
    v, existed = p.cron_set("q2", "a", JOB, schedule="30 * * * *", timezone="Europe/Rome")
    assert existed and v.executions == 2 and v.repeat_every_ms is None
    assert [(x.name, x.queue) for x in p.cron_list()] == [("a", "q2"), ("b", "q")]
    assert p.cron_delete("a") and not p.cron_delete("a")
    assert [x.name for x in p.cron_list()] == ["b"]


def test_immediately_fires_a_new_schedule_at_once():
    clock, p = port_at("2026-05-01T10:00:00")
    v, _ = p.cron_set("q", "now", JOB, repeat_every_ms=60_000, immediately=True)
    assert v.next_run_ms == clock.wall_ms()
    advance_to(clock, p, clock.wall_ms())
    assert len(p.jobs("q")) == 1


# --------------------------------------------------------------------------- time zones
def test_timezone_offsets_the_calendar():
    clock, p = port_at("2026-07-01T00:00:00")
    v, _ = p.cron_set("q", "rome", JOB, schedule="0 10 * * *", timezone="Europe/Rome")
    assert v.next_run_ms == utc_ms("2026-07-01T08:00:00")     # CEST, UTC+2
    v, _ = p.cron_set("q", "ny", JOB, schedule="30 9 * * *", timezone="America/New_York")
    assert v.next_run_ms == utc_ms("2026-07-01T13:30:00")     # EDT, UTC-4


def test_spring_forward_day_new_york():
    """2026-03-08: 02:00 EST jumps to 03:00 EDT. 02:30 does not exist that day: Bun.cron (the
    reference) fires at 03:30 EDT (07:30Z), once; the next day at 02:30 EDT (06:30Z)."""
    clock, p = port_at("2026-03-07T12:00:00")
    v, _ = p.cron_set("q", "0230", JOB, schedule="30 2 * * *", timezone="America/New_York")
    assert v.next_run_ms == utc_ms("2026-03-08T07:30:00")
    p.cron_set("q2", "hourly", JOB, schedule="0 * * * *", timezone="America/New_York")
    advance_to(clock, p, "2026-03-09T12:00:00")
    assert fired(p) == [utc_ms("2026-03-08T07:30:00"), utc_ms("2026-03-09T06:30:00")]
    hours = [ms for ms in fired(p, "q2") if utc_ms("2026-03-08T04:00:00") <= ms
             <= utc_ms("2026-03-08T09:00:00")]
    # 23:00, 00:00, 01:00 EST, then 03:00, 04:00 EDT: one run per real hour, none lost
    assert hours == [utc_ms(f"2026-03-08T0{h}:00:00") for h in (4, 5, 6, 7, 8, 9)]


def test_fall_back_day_new_york():
    """2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice. The reference fires
    a 01:30 schedule once, at the first 01:30 (05:30Z), then 01:30 EST the next day (06:30Z)."""
    clock, p = port_at("2026-10-31T12:00:00")
    v, _ = p.cron_set("q", "0130", JOB, schedule="30 1 * * *", timezone="America/New_York")
    assert v.next_run_ms == utc_ms("2026-11-01T05:30:00")
    advance_to(clock, p, "2026-11-02T12:00:00")
    assert fired(p) == [utc_ms("2026-11-01T05:30:00"), utc_ms("2026-11-02T06:30:00")]
    assert p.cron_get("0130").executions == 2


# --------------------------------------------------------------------------- durability
def test_a_run_and_its_schedule_row_are_in_the_same_batch():
    n = Node(utc_ms("2026-05-01T10:00:00"))
    p = Port.of(n.engine)
    p.cron_set("q", "every", JOB, repeat_every_ms=1000)
    b = n.journal.take(n.engine.next_id)
    assert [(t, k) for t, k, _ in b.records] == [("cron_schedules", "every")]
    n.step(1000)
    b = n.journal.take(n.engine.next_id)
    assert len(b.inserts) == 1 and b.inserts[0][2] == "q"
    [(table, key, row)] = b.records
    assert (table, key, row["executions"], row["next_run_ms"]) == (
        "cron_schedules", "every", 1, utc_ms("2026-05-01T10:00:02"))


@pytest.fixture
def sqlite_store(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/cron.db")
    upgrade(s.engine)
    yield s
    s.close()


def _restart(store, wall_ms: int):
    clock = ManualClock(wall_ms)
    p = Port.create(clock, durable=True)
    p.restore(store)
    return clock, p


def _flush(p, store) -> None:
    b = p.persistence.take()
    store.write(b)
    p.persistence.done(b)


@pytest.mark.parametrize("skip_missed, expect_runs", [(True, 0), (False, 1)])
def test_restart_with_several_missed_runs(sqlite_store, skip_missed, expect_runs):
    """Down for 5 hours across 5 hourly runs and 25 repeatEvery runs: with skip-missed (the
    reference's default) none of them fires, the next run is the first one after the restart;
    without it they collapse into one run at the first tick (reference: cron next from the
    execution time; repeatEvery's overlap guard)."""
    t0 = utc_ms("2026-05-01T10:10:00")
    clock = ManualClock(t0)
    p = Port.create(clock, durable=True)
    p.restore(sqlite_store)
    p.cron_set("q", "hourly", JOB, schedule="0 * * * *", skip_missed_on_restart=skip_missed)
    p.cron_set("q", "every", JOB, repeat_every_ms=12 * 60_000,
               skip_missed_on_restart=skip_missed, info={"jobName": "x", "priority": 2})
    advance_to(clock, p, "2026-05-01T11:30:00")    # hourly: 11:00; every: 10:22 ... 11:22
    _flush(p, sqlite_store)
    before = {v.name: v.executions for v in p.cron_list()}
    assert before == {"hourly": 1, "every": 6}
    jobs_before = len(p.jobs("q"))

    clock, p2 = _restart(sqlite_store, utc_ms("2026-05-01T16:45:00"))
    views = {v.name: v for v in p2.cron_list()}
    assert [v.name for v in p2.cron_list()] == ["hourly", "every"]
    assert views["every"].info == {"jobName": "x", "priority": 2}
    assert len(p2.jobs("q")) == jobs_before
    p2.tick()
    assert len(p2.jobs("q")) == jobs_before + 2 * expect_runs
    views = {v.name: v for v in p2.cron_list()}
    assert views["hourly"].next_run_ms == utc_ms("2026-05-01T17:00:00")
    assert views["hourly"].executions == 1 + expect_runs
    assert views["every"].executions == 6 + expect_runs
    nxt = views["every"].next_run_ms
    assert utc_ms("2026-05-01T16:45:00") < nxt <= utc_ms("2026-05-01T16:57:00")
    _flush(p2, sqlite_store)
    # and a third generation sees exactly what the second committed
    _, p3 = _restart(sqlite_store, utc_ms("2026-05-01T16:46:00"))
    assert {v.name: (v.executions, v.next_run_ms) for v in p3.cron_list()} == {
        v.name: (v.executions, v.next_run_ms) for v in p2.cron_list()}
    assert len(p3.jobs("q")) == len(p2.jobs("q"))


def test_deleted_schedule_stays_deleted_after_restart(sqlite_store):
    clock = ManualClock(utc_ms("2026-05-01T10:00:00"))
    p = Port.create(clock, durable=True)
    p.restore(sqlite_store)
    p.cron_set("q", "a", JOB, repeat_every_ms=1000)
    p.cron_set("q", "b", JOB, repeat_every_ms=1000)
    _flush(p, sqlite_store)
    p.cron_delete("a")
    _flush(p, sqlite_store)
    _, p2 = _restart(sqlite_store, utc_ms("2026-05-01T10:00:00"))
    assert [v.name for v in p2.cron_list()] == ["b"]


def test_a_scoped_port_sees_only_the_schedules_of_its_queues():
    from core.api import AccessDenied, Principal
    clock, p = port_at("2026-05-01T10:00:00")
    p.cron_set("a1", "mine", JOB, repeat_every_ms=1000)
    p.cron_set("b1", "theirs", JOB, repeat_every_ms=1000)
    sp = p.scoped(Principal("t", "token", ["a*"]))
    assert [v.name for v in sp.cron_list()] == ["mine"]
    assert sp.cron_get("theirs") is None and sp.cron_get("mine").queue == "a1"
    assert sp.cron_delete("theirs") is False and p.cron_get("theirs") is not None
    with pytest.raises(AccessDenied):
        sp.cron_set("b2", "x", JOB, repeat_every_ms=1000)
    assert sp.cron_delete("mine") is True and p.cron_get("mine") is None


def test_a_run_is_a_push_in_the_history():
    n = Node(utc_ms("2026-05-01T10:00:00"))
    p = Port.of(n.engine)
    p.cron_set("q", "h", JOB._replace(event="push", uuid7=True), repeat_every_ms=1000)
    n.journal.take(n.engine.next_id)
    n.step(1000)
    b = n.journal.take(n.engine.next_id)
    assert [(e[1], e[2], e[3]) for e in b.events] == [("q", "bunqueue", "push")]
    uid = b.inserts[0][1]
    assert len(uid) == 36 and uid[14] == "7"


#: (zone, expression, from, Bun.cron.parse's answer): measured on Bun 1.4.5 (the reference's
#: runtime, `Bun.cron.parse(expr, from, {tz})`) around the 2026 transitions of New York
#: (fall-back 11-01 06:00Z, spring-forward 03-08 07:00Z) and Lord Howe (a 30-minute shift,
#: 04-04 15:00Z). Times are UTC.
BUN_DST = [
    ("America/New_York", "0 * * * *", "2026-11-01T04:52", "2026-11-01T05:00"),
    ("America/New_York", "0 * * * *", "2026-11-01T05:29", "2026-11-01T06:00"),
    ("America/New_York", "0 * * * *", "2026-11-01T06:06", "2026-11-01T07:00"),
    ("America/New_York", "0 * * * *", "2026-11-01T06:43", "2026-11-01T07:00"),
    ("America/New_York", "*/20 * * * *", "2026-11-01T04:52", "2026-11-01T05:00"),
    ("America/New_York", "*/20 * * * *", "2026-11-01T05:29", "2026-11-01T05:40"),
    ("America/New_York", "*/20 * * * *", "2026-11-01T06:06", "2026-11-01T06:20"),
    ("America/New_York", "*/20 * * * *", "2026-11-01T06:43", "2026-11-01T07:00"),
    ("America/New_York", "* 1 * * *", "2026-11-01T04:52", "2026-11-01T05:00"),
    ("America/New_York", "* 1 * * *", "2026-11-01T05:29", "2026-11-01T05:30"),
    ("America/New_York", "* 1 * * *", "2026-11-01T06:06", "2026-11-01T06:07"),
    ("America/New_York", "* 1 * * *", "2026-11-01T06:43", "2026-11-01T06:44"),
    ("America/New_York", "30 1 * * *", "2026-11-01T04:52", "2026-11-01T05:30"),
    ("America/New_York", "30 1 * * *", "2026-11-01T05:29", "2026-11-01T05:30"),
    ("America/New_York", "30 1 * * *", "2026-11-01T06:06", "2026-11-02T06:30"),
    ("America/New_York", "30 1 * * *", "2026-11-01T06:43", "2026-11-02T06:30"),
    ("America/New_York", "*/30 1 * * *", "2026-11-01T04:52", "2026-11-01T05:00"),
    ("America/New_York", "*/30 1 * * *", "2026-11-01T05:29", "2026-11-01T05:30"),
    ("America/New_York", "*/30 1 * * *", "2026-11-01T06:06", "2026-11-02T06:00"),
    ("America/New_York", "*/30 1 * * *", "2026-11-01T06:43", "2026-11-02T06:00"),
    ("America/New_York", "0 0-3 * * *", "2026-11-01T04:52", "2026-11-01T05:00"),
    ("America/New_York", "0 0-3 * * *", "2026-11-01T05:29", "2026-11-01T07:00"),
    ("America/New_York", "0 0-3 * * *", "2026-11-01T06:06", "2026-11-01T07:00"),
    ("America/New_York", "0 0-3 * * *", "2026-11-01T06:43", "2026-11-01T07:00"),
    ("America/New_York", "30 2 * * *", "2026-11-01T04:52", "2026-11-01T07:30"),
    ("America/New_York", "30 2 * * *", "2026-11-01T05:29", "2026-11-01T07:30"),
    ("America/New_York", "30 2 * * *", "2026-11-01T06:06", "2026-11-01T07:30"),
    ("America/New_York", "30 2 * * *", "2026-11-01T06:43", "2026-11-01T07:30"),
    ("America/New_York", "* 2 * * *", "2026-11-01T04:52", "2026-11-01T07:00"),
    ("America/New_York", "* 2 * * *", "2026-11-01T05:29", "2026-11-01T07:00"),
    ("America/New_York", "* 2 * * *", "2026-11-01T06:06", "2026-11-01T07:00"),
    ("America/New_York", "* 2 * * *", "2026-11-01T06:43", "2026-11-01T07:00"),
    ("America/New_York", "0 1,2 * * *", "2026-11-01T04:52", "2026-11-01T05:00"),
    ("America/New_York", "0 1,2 * * *", "2026-11-01T05:29", "2026-11-01T07:00"),
    ("America/New_York", "0 1,2 * * *", "2026-11-01T06:06", "2026-11-01T07:00"),
    ("America/New_York", "0 1,2 * * *", "2026-11-01T06:43", "2026-11-01T07:00"),
    ("America/New_York", "0 * * * *", "2026-03-08T05:52", "2026-03-08T06:00"),
    ("America/New_York", "0 * * * *", "2026-03-08T06:29", "2026-03-08T07:00"),
    ("America/New_York", "0 * * * *", "2026-03-08T07:06", "2026-03-08T08:00"),
    ("America/New_York", "*/20 * * * *", "2026-03-08T05:52", "2026-03-08T06:00"),
    ("America/New_York", "*/20 * * * *", "2026-03-08T06:29", "2026-03-08T06:40"),
    ("America/New_York", "*/20 * * * *", "2026-03-08T07:06", "2026-03-08T07:20"),
    ("America/New_York", "* 1 * * *", "2026-03-08T05:52", "2026-03-08T06:00"),
    ("America/New_York", "* 1 * * *", "2026-03-08T06:29", "2026-03-08T06:30"),
    ("America/New_York", "* 1 * * *", "2026-03-08T07:06", "2026-03-09T05:00"),
    ("America/New_York", "30 1 * * *", "2026-03-08T05:52", "2026-03-08T06:30"),
    ("America/New_York", "30 1 * * *", "2026-03-08T06:29", "2026-03-08T06:30"),
    ("America/New_York", "30 1 * * *", "2026-03-08T07:06", "2026-03-09T05:30"),
    ("America/New_York", "*/30 1 * * *", "2026-03-08T05:52", "2026-03-08T06:00"),
    ("America/New_York", "*/30 1 * * *", "2026-03-08T06:29", "2026-03-08T06:30"),
    ("America/New_York", "*/30 1 * * *", "2026-03-08T07:06", "2026-03-09T05:00"),
    ("America/New_York", "0 0-3 * * *", "2026-03-08T05:52", "2026-03-08T06:00"),
    ("America/New_York", "0 0-3 * * *", "2026-03-08T06:29", "2026-03-08T07:00"),
    ("America/New_York", "0 0-3 * * *", "2026-03-08T07:06", "2026-03-09T04:00"),
    ("America/New_York", "30 2 * * *", "2026-03-08T05:52", "2026-03-08T07:30"),
    ("America/New_York", "30 2 * * *", "2026-03-08T06:29", "2026-03-08T07:30"),
    ("America/New_York", "30 2 * * *", "2026-03-08T07:06", "2026-03-09T06:30"),
    ("America/New_York", "* 2 * * *", "2026-03-08T05:52", "2026-03-08T07:00"),
    ("America/New_York", "* 2 * * *", "2026-03-08T06:29", "2026-03-08T07:00"),
    ("America/New_York", "* 2 * * *", "2026-03-08T07:06", "2026-03-09T06:00"),
    ("America/New_York", "0 1,2 * * *", "2026-03-08T05:52", "2026-03-08T06:00"),
    ("America/New_York", "0 1,2 * * *", "2026-03-08T06:29", "2026-03-08T07:00"),
    ("America/New_York", "0 1,2 * * *", "2026-03-08T07:06", "2026-03-09T05:00"),
    ("Australia/Lord_Howe", "0 * * * *", "2026-04-04T14:20", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "0 * * * *", "2026-04-04T14:57", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "0 * * * *", "2026-04-04T15:34", "2026-04-04T16:30"),
    ("Australia/Lord_Howe", "*/20 * * * *", "2026-04-04T14:20", "2026-04-04T14:40"),
    ("Australia/Lord_Howe", "*/20 * * * *", "2026-04-04T14:57", "2026-04-04T15:10"),
    ("Australia/Lord_Howe", "*/20 * * * *", "2026-04-04T15:34", "2026-04-04T15:50"),
    ("Australia/Lord_Howe", "* 1 * * *", "2026-04-04T14:20", "2026-04-04T14:21"),
    ("Australia/Lord_Howe", "* 1 * * *", "2026-04-04T14:57", "2026-04-04T14:58"),
    ("Australia/Lord_Howe", "* 1 * * *", "2026-04-04T15:34", "2026-04-05T14:30"),
    ("Australia/Lord_Howe", "30 1 * * *", "2026-04-04T14:20", "2026-04-04T14:30"),
    ("Australia/Lord_Howe", "30 1 * * *", "2026-04-04T14:57", "2026-04-05T15:00"),
    ("Australia/Lord_Howe", "30 1 * * *", "2026-04-04T15:34", "2026-04-05T15:00"),
    ("Australia/Lord_Howe", "*/30 1 * * *", "2026-04-04T14:20", "2026-04-04T14:30"),
    ("Australia/Lord_Howe", "*/30 1 * * *", "2026-04-04T14:57", "2026-04-05T14:30"),
    ("Australia/Lord_Howe", "*/30 1 * * *", "2026-04-04T15:34", "2026-04-05T14:30"),
    ("Australia/Lord_Howe", "0 0-3 * * *", "2026-04-04T14:20", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "0 0-3 * * *", "2026-04-04T14:57", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "0 0-3 * * *", "2026-04-04T15:34", "2026-04-04T16:30"),
    ("Australia/Lord_Howe", "30 2 * * *", "2026-04-04T14:20", "2026-04-04T16:00"),
    ("Australia/Lord_Howe", "30 2 * * *", "2026-04-04T14:57", "2026-04-04T16:00"),
    ("Australia/Lord_Howe", "30 2 * * *", "2026-04-04T15:34", "2026-04-04T16:00"),
    ("Australia/Lord_Howe", "* 2 * * *", "2026-04-04T14:20", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "* 2 * * *", "2026-04-04T14:57", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "* 2 * * *", "2026-04-04T15:34", "2026-04-04T15:35"),
    ("Australia/Lord_Howe", "0 1,2 * * *", "2026-04-04T14:20", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "0 1,2 * * *", "2026-04-04T14:57", "2026-04-04T15:30"),
    ("Australia/Lord_Howe", "0 1,2 * * *", "2026-04-04T15:34", "2026-04-05T14:30"),

]


@pytest.mark.parametrize("tz, expr, start, want", BUN_DST)
def test_dst_transitions_match_bun_cron(tz, expr, start, want):
    from core.cron import next_run_ms
    assert next_run_ms(expr, utc_ms(start), tz) == utc_ms(want)


def test_fall_back_day_wildcard_hours_fire_in_the_repeated_hour():
    """An hourly schedule fires every real hour across the fall-back (Bun.cron: a wildcard
    hour or minute also matches in the repeated hour), a 01:30 one once (above)."""
    clock, p = port_at("2026-11-01T04:30:00")
    p.cron_set("q", "hourly", JOB, schedule="0 * * * *", timezone="America/New_York")
    advance_to(clock, p, "2026-11-01T08:30:00")
    assert fired(p) == [utc_ms(f"2026-11-01T0{h}:00:00") for h in (5, 6, 7, 8)]
