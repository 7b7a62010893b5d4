"""The calendar of cron schedules (core/cron.py): validation and next runs of 5- and 6-field
expressions in IANA time zones, computed as the reference computes them (bunqueue 2.9.5
scheduler/cronParser.js on Bun 1.4's Bun.cron; docs/bunqueue.md "Cron (issue 16)"). croniter
walks the calendar, zoneinfo places local times on the timeline; nothing here parses a field.

Times: wall ms since the epoch. Errors: CronError (`kind`, `detail`).
"""
from __future__ import annotations

from datetime import datetime, timezone as _utc_tz

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: The largest integer a JavaScript number holds exactly (repeatEvery's bound, reference).
MAX_SAFE_INT = 2**53 - 1
#: The reference's cron shortcuts (cronParser.js CRON_SHORTCUTS), matched case-insensitively.
SHORTCUTS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
             "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
             "@hourly": "0 * * * *"}
#: Longest cron expression accepted (characters): croniter expands lists in Python, and a
#: megabyte of "1,1,1,..." would hold the event loop for seconds.
MAX_EXPRESSION = 1024
MINUTE_MS = 60_000
#: The largest DST shift a wildcard schedule's real-minute scan covers (Bun.cron), minutes.
MAX_DST_SHIFT_MIN = 120
#: Occurrences croniter may skip (impossible local times) before "no future occurrence".
_MAX_SKIPS = 10_000


class CronError(ValueError):
    """Invalid cron timing. `kind`: "timing" (repeat_every_ms not a positive safe integer),
    "missing" (neither schedule nor repeat_every_ms), "fields" (not 5 or 6 fields), "range" (a
    value out of range), "syntax" (anything else croniter refuses), "timezone" (unknown IANA
    name; `detail` is the name), "no_future" (the expression never matches). Dialects turn it
    into their own error text."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


def _zone(tz: str | None):
    if not tz:
        return _utc_tz.utc   # "" too: the reference passes no zone to Bun.cron then
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise CronError("timezone", str(tz)) from None


def _expression(schedule: str) -> tuple[str, bool]:
    """(expression for croniter, has leading seconds); CronError "fields" / "syntax"."""
    s = schedule.strip()
    if len(s) > MAX_EXPRESSION:
        raise CronError("syntax", f"longer than {MAX_EXPRESSION} characters")
    expanded = SHORTCUTS.get(s.lower())
    if expanded is not None:
        return expanded, False
    if s.startswith("@") and not any(c.isspace() for c in s):
        raise CronError("syntax", s)
    n = len(s.split())
    if n not in (5, 6):
        raise CronError("fields")
    return " ".join(s.split()), n == 6


def _offset(z, ms: int):
    return datetime.fromtimestamp(ms / 1000, z).utcoffset()


def _next_minute(expr: str, after_ms: int, z) -> int:
    """Bun.cron.parse(expr, after_ms, {tz}) for a 5-field `expr`: the first matching minute
    strictly after `after_ms`. The calendar is walked in local wall time (croniter on naive
    datetimes); a local match is placed on the timeline with the offset before a change
    (zoneinfo fold 0: a spring-forward gap time is read with the old offset, a repeated
    fall-back time is its first occurrence). When the minute or the hour field is a full
    wildcard, real minutes up to that match (at most MAX_DST_SHIFT_MIN ahead) are scanned for
    an earlier match, so such a schedule also fires in the repeated fall-back hour (Bun's
    resolve_local_match, cronie semantics); a fixed-time schedule fires once."""
    from croniter import croniter   # imported on first use: 46 ms that start-up need not pay
    local = datetime.fromtimestamp(after_ms / 1000, z).replace(tzinfo=None)
    it = croniter(expr, local)
    wild = it.expanded[0] == ["*"] or it.expanded[1] == ["*"]
    if wild:   # the scan can only find something within MAX_DST_SHIFT_MIN of an offset change
        span = (MAX_DST_SHIFT_MIN + 2) * MINUTE_MS
        wild = _offset(z, after_ms - span) != _offset(z, after_ms + span)
    for _ in range(_MAX_SKIPS):
        n = it.get_next(datetime)
        result = int(n.replace(tzinfo=z, fold=0).timestamp()) * 1000
        if wild:
            probe = (after_ms // MINUTE_MS + 1) * MINUTE_MS
            cap = min(result, after_ms + (MAX_DST_SHIFT_MIN + 1) * MINUTE_MS)
            while probe < cap:
                t = datetime.fromtimestamp(probe / 1000, z).replace(tzinfo=None)
                if croniter.match(expr, t):
                    return probe
                probe += MINUTE_MS
        if result > after_ms:
            return result
    raise CronError("no_future")


def next_run_ms(schedule: str, after_ms: int, tz: str | None = None) -> int:
    """The first wall ms strictly after `after_ms` matched by cron expression `schedule` (5
    fields, 6 with leading seconds, or a shortcut such as @daily) in IANA zone `tz` (None:
    UTC), as the reference computes it: Bun.cron for the 5 calendar fields (see
    _next_minute: spring-forward gap times fire once at the old offset, 02:30 -> 03:30; a
    fixed time repeated by a fall-back fires at its first occurrence; wildcard-minute or
    wildcard-hour schedules also fire in the repeated hour), and bunqueue's getNextParsedRun
    for a leading seconds field (the matching seconds of each matching minute). Raises
    CronError."""
    from croniter import (CroniterBadCronError, CroniterBadDateError, CroniterError,
                          croniter)
    expr, six = _expression(schedule)
    z = _zone(tz)
    try:
        if not six:
            return _next_minute(expr, after_ms, z)
        secs, cal = expr.split(" ", 1)
        seconds = croniter(f"{cal} {secs}").expanded[5]
        seconds = list(range(60)) if seconds == ["*"] else sorted(seconds)
        minute = _next_minute(cal, (after_ms // MINUTE_MS) * MINUTE_MS - 1, z)
        for _ in range(_MAX_SKIPS):
            for sec in seconds:
                if minute + sec * 1000 > after_ms:
                    return minute + sec * 1000
            minute = _next_minute(cal, minute, z)
    except CroniterBadDateError:
        raise CronError("no_future") from None
    except CroniterBadCronError as e:
        raise CronError("range" if "out of range" in str(e) else "syntax", str(e)) from None
    except (CroniterError, ValueError, KeyError, IndexError) as e:
        raise CronError("syntax", str(e)) from None
    raise CronError("no_future")


def check_timing(schedule: str | None, repeat_every_ms, tz: str | None, now_ms: int) -> None:
    """Validate a schedule's timing as the reference does, in its order (assertValidCronTiming
    then validateCronExpression): CronError "timing", "missing", then the expression's."""
    if repeat_every_ms is not None:
        if repeat_every_ms.__class__ is not int or not 1 <= repeat_every_ms <= MAX_SAFE_INT:
            raise CronError("timing")
    if not schedule and repeat_every_ms is None:
        raise CronError("missing")
    if schedule:
        next_run_ms(schedule, now_ms, tz)
