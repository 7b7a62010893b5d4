"""Scenarios built from /work/shared/reference/beanstalk-golden-1.12.txt.

Every case of the transcript is here, grouped into self-contained scenarios that each start
from a fresh server (so job ids start at 1; the ids differ from the transcript, which reused
one server across some sections). Step labels are the transcript's case titles. Where the
transcript checked that the connection stayed open with a ``list-tube-used`` probe, the
scenario has a ``<case> / probe`` step too.
"""

from __future__ import annotations

from .beanstalk_replies import job_frame, stats, stats_job, stats_tube, yaml_list
from .scenario import (Scenario, close, eof, read, send, send_eof, send_window, shutwr,
                       signal, sleep, steps)

__all__ = ["SCENARIOS", "put_line"]

USING_ERRS = b"USING errs\r\n"
SETUP_ERRS = b"use errs\r\nwatch empty\r\nignore default\r\n"
SETUP_ERRS_REPLIES = (b"USING errs\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n")
BF = b"BAD_FORMAT\r\n"
UC = b"UNKNOWN_COMMAND\r\n"
NF = b"NOT_FOUND\r\n"


def case(label: str, data: bytes, *replies: bytes, probe: bytes | None = USING_ERRS,
         conn: str = "A", timeout: float = 3.0):
    """A transcript case: send ``data``, expect ``replies``; then (if ``probe``) check the
    connection is still usable with ``list-tube-used``."""
    out = [send(conn, data, *replies, label=label, timeout=timeout)]
    if probe is not None:
        out.append(send(conn, b"list-tube-used\r\n", probe, label=f"{label} / probe"))
    return out


def put_line(n: int) -> bytes:
    """A put command line of exactly ``n`` bytes (without CRLF): pri padded with zeros."""
    return b"put " + b"0" * (n - 12) + b"1 0 60 1"

HAPPY = Scenario(
    "golden-happy-path",
    doc="Transcript section 'happy path': one connection through every command.",
    source="golden",
    steps=steps(
        send("A", b"list-tube-used\r\n", b"USING default\r\n", label="list-tube-used initial"),
        send("A", b"list-tubes-watched\r\n", yaml_list("default"), label="list-tubes-watched initial"),
        send("A", b"list-tubes\r\n", yaml_list("default"), label="list-tubes initial"),
        send("A", b"use foo\r\n", b"USING foo\r\n", label="use foo"),
        send("A", b"put 10 0 60 5\r\nhello\r\n", b"INSERTED 1\r\n", label="put"),
        send("A", b"put 0 0 60 0\r\n\r\n", b"INSERTED 2\r\n", label="put empty body"),
        send("A", b"put 0 0 60 6\r\na\r\n\x00b\xff\r\n", b"INSERTED 3\r\n",
             label="put binary body with CRLF and NUL inside"),
        send("A", b"list-tube-used\r\n", b"USING foo\r\n", label="list-tube-used"),
        send("A", b"list-tubes\r\n", yaml_list("default", "foo"), label="list-tubes"),
        send("A", b"watch foo\r\n", b"WATCHING 2\r\n", label="watch foo"),
        send("A", b"watch foo\r\n", b"WATCHING 2\r\n", label="watch foo again (idempotent count)"),
        send("A", b"ignore default\r\n", b"WATCHING 1\r\n", label="ignore default"),
        send("A", b"ignore foo\r\n", b"NOT_IGNORED\r\n", label="ignore last watched tube"),
        send("A", b"ignore nosuchtube\r\n", b"WATCHING 1\r\n", label="ignore tube not watched"),
        send("A", b"list-tubes-watched\r\n", yaml_list("foo"), label="list-tubes-watched"),
        send("A", b"peek-ready\r\n", b"FOUND 2 0\r\n\r\n",
             label="peek-ready (lowest pri first: job 2 pri 0)"),
        send("A", b"reserve\r\n", b"RESERVED 2 0\r\n\r\n", label="reserve"),
        send("A", b"reserve-with-timeout 0\r\n", job_frame("RESERVED", 3, b"a\r\n\x00b\xff"),
             label="reserve-with-timeout 0"),
        send("A", b"stats-job 2\r\n",
             stats_job(2, "foo", "reserved", time_left=59, reserves=1), label="stats-job reserved"),
        send("A", b"touch 2\r\n", b"TOUCHED\r\n", label="touch"),
        send("A", b"release 2 5 100\r\n", b"RELEASED\r\n", label="release with delay"),
        send("A", b"peek-delayed\r\n", b"FOUND 2 0\r\n\r\n", label="peek-delayed"),
        send("A", b"bury 3 7\r\n", b"BURIED\r\n", label="bury"),
        send("A", b"peek-buried\r\n", job_frame("FOUND", 3, b"a\r\n\x00b\xff"), label="peek-buried"),
        send("A", b"stats-job 3\r\n",
             stats_job(3, "foo", "buried", pri=7, reserves=1, buries=1), label="stats-job buried"),
        send("A", b"kick 1\r\n", b"KICKED 1\r\n", label="kick 1 (buried first)"),
        send("A", b"kick 10\r\n", b"KICKED 1\r\n", label="kick 10 (then delayed, since no buried left)"),
        send("A", b"kick 10\r\n", b"KICKED 0\r\n", label="kick 10 nothing to kick"),
        send("A", b"peek 1\r\n", b"FOUND 1 5\r\nhello\r\n", label="peek job"),
        send("A", b"peek 999\r\n", NF, label="peek missing"),
        send("A", b"reserve-job 1\r\n", b"RESERVED 1 5\r\nhello\r\n", label="reserve-job ready job"),
        send("A", b"reserve-job 1\r\n", NF, label="reserve-job already reserved"),
        send("A", b"delete 1\r\n", b"DELETED\r\n", label="delete reserved"),
        send("A", b"delete 1\r\n", NF, label="delete again"),
        send("A", b"delete 3\r\n", b"DELETED\r\n", label="delete ready job (not reserved)"),
        send("A", b"put 0 100 60 1\r\nd\r\n", b"INSERTED 4\r\n", label="put delayed"),
        send("A", b"kick-job 4\r\n", b"KICKED\r\n", label="kick-job delayed"),
        send("A", b"kick-job 4\r\n", NF, label="kick-job ready -> NOT_FOUND"),
        send("A", b"kick-job 999\r\n", NF, label="kick-job missing"),
        send("A", b"reserve-job 4\r\nbury 4 0\r\nreserve-job 4\r\n", b"RESERVED 4 1\r\nd\r\n",
             b"BURIED\r\n", b"RESERVED 4 1\r\nd\r\n",
             label="reserve-job then bury then reserve-job buried"),
        send("A", b"release 4 0 0\r\n", b"RELEASED\r\n", label="release no delay"),
        send("A", b"put 0 100 60 1\r\ne\r\n", b"INSERTED 5\r\n", label="put delayed 2"),
        send("A", b"reserve-job 5\r\n", b"RESERVED 5 1\r\ne\r\n", label="reserve-job delayed job"),
        send("A", b"touch 2\r\n", NF, label="touch not-reserved job"),
        send("A", b"release 2 0 0\r\n", NF, label="release not-reserved job"),
        send("A", b"bury 2 0\r\n", NF, label="bury not-reserved job"),
        send("A", b"stats-tube foo\r\n",
             stats_tube("foo", urgent=2, ready=2, reserved=1, total=5, using=1, watching=1,
                        deletes=2), label="stats-tube foo"),
        send("A", b"stats-tube nosuch\r\n", NF, label="stats-tube missing"),
        send("A", b"pause-tube foo 0\r\n", b"PAUSED\r\n", label="pause-tube"),
        send("A", b"pause-tube nosuch 10\r\n", NF, label="pause-tube missing tube"),
        send("A", b"pause-tube foo 30\r\nstats-tube foo\r\n", b"PAUSED\r\n",
             stats_tube("foo", urgent=2, ready=2, reserved=1, total=5, using=1, watching=1,
                        deletes=2, pauses=2, pause=30, pause_left=29),
             label="pause-tube 30 then stats-tube"),
        send("A", b"use bar\r\nput 0 0 60 2\r\nhi\r\nlist-tube-used\r\n", b"USING bar\r\n",
             b"INSERTED 6\r\n", b"USING bar\r\n", label="pipelined: 3 commands in one write"),
        send("A", b"stats\r\n", stats(
            current_jobs_urgent=3, current_jobs_ready=3, current_jobs_reserved=1, cmd_put=6,
            cmd_peek=2, cmd_peek_ready=1, cmd_peek_delayed=1, cmd_peek_buried=1, cmd_reserve=1,
            cmd_reserve_with_timeout=1, cmd_delete=3, cmd_release=3, cmd_use=2, cmd_watch=2,
            cmd_ignore=3, cmd_bury=3, cmd_kick=3, cmd_touch=2, cmd_stats=1, cmd_stats_job=2,
            cmd_stats_tube=3, cmd_list_tubes=2, cmd_list_tube_used=3, cmd_list_tubes_watched=2,
            cmd_pause_tube=3, total_jobs=6, current_tubes=3, current_producers=1,
            current_workers=1), label="stats"),
        send_eof("A", b"quit\r\n", label="quit"),
    ),
)

JOB_TOO_BIG = Scenario(
    "golden-job-too-big",
    doc="Transcript 'JOB_TOO_BIG' with -z 10; JOB_TOO_BIG counts in cmd-put.",
    source="golden",
    flags=("-z", "10"),
    steps=steps(
        send("A", b"put 0 0 60 10\r\n0123456789\r\n", b"INSERTED 1\r\n",
             label="put 10 bytes (limit) ok"),
        case("put 11 bytes -> JOB_TOO_BIG (body skipped)", b"put 0 0 60 11\r\n0123456789A\r\n",
             b"JOB_TOO_BIG\r\n", probe=b"USING default\r\n"),
        case("put too big with trailing garbage in cmd", b"put 0 0 60 11 junk\r\n0123456789A\r\n",
             b"JOB_TOO_BIG\r\n", probe=b"USING default\r\n"),
        send_window("A", b"put 0 0 60 4294967295\r\n", 0.5,
                    label="put too big, declared 2^32-1 bytes (server waits to skip 4GiB)"),
        close("A"),
        sleep(0.2),
        send("B", b"stats\r\n", stats(current_jobs_urgent=1, current_jobs_ready=1, cmd_put=4,
                                      cmd_stats=1, cmd_list_tube_used=2, total_jobs=1,
                                      max_job_size=10, total_connections=3),
             label="stats max-job-size"),
    ),
)

RESERVE_TIMEOUTS = Scenario(
    "golden-reserve-timeouts",
    doc="Transcript 'timing': reserve-with-timeout 0 and 1 on an empty tube.",
    source="golden",
    steps=steps(
        send("A", b"use t1\r\nwatch t1\r\nignore default\r\n", b"USING t1\r\n", b"WATCHING 2\r\n",
             b"WATCHING 1\r\n", label="use t1 / watch t1 / ignore default"),
        send("A", b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n", label="reserve-with-timeout 0 empty"),
        send_window("A", b"reserve-with-timeout 1\r\n", 0.6,
                    label="reserve-with-timeout 1 empty (still waiting after 0.6s)"),
        read("A", b"TIMED_OUT\r\n", label="reserve-with-timeout 1 empty", timeout=2.0),
    ),
)

DEADLINE_SOON = Scenario(
    "golden-deadline-soon",
    doc="Transcript 'timing': DEADLINE_SOON inside the 1 s safety margin, TTR expiry, touch.",
    source="golden",
    steps=steps(
        send("A", b"use t1\r\nwatch t1\r\nignore default\r\n", b"USING t1\r\n", b"WATCHING 2\r\n",
             b"WATCHING 1\r\n", label="use t1 / watch t1 / ignore default"),
        send("A", b"put 0 0 1 3\r\nttr\r\n", b"INSERTED 1\r\n", label="put ttr 1"),
        send("A", b"reserve\r\n", b"RESERVED 1 3\r\nttr\r\n", label="reserve ttr-1 job"),
        send("A", b"reserve\r\n", b"DEADLINE_SOON\r\n", label="reserve again immediately -> DEADLINE_SOON"),
        send("A", b"reserve-with-timeout 5\r\n", b"DEADLINE_SOON\r\n",
             label="reserve-with-timeout 5 -> DEADLINE_SOON"),
        sleep(1.3, label="wait past the TTR"),
        send("A", b"list-tube-used\r\n", b"USING t1\r\n",
             label="after ttr expiry: any command from the reserving conn re-arms its timer "
                   "(1.12 bug: an idle conn may keep the job reserved forever)"),
        send("A", b"stats-job 1\r\n", stats_job(1, "t1", "ready", age=1, ttr=1, reserves=1,
                                                timeouts=1), label="after ttr expiry: stats-job"),
        send("A", b"reserve\r\n", b"RESERVED 1 3\r\nttr\r\n",
             label="reserve again (job timed out back to ready)"),
        send("A", b"delete 1\r\n", b"DELETED\r\n", label="delete"),
        send("A", b"put 0 0 3 1\r\nq\r\n", b"INSERTED 2\r\n", label="put ttr 3"),
        send("A", b"reserve\r\n", b"RESERVED 2 1\r\nq\r\n", label="reserve"),
        send_window("A", b"reserve\r\n", 1.4,
                    label="reserve (blocks until 1s safety margin: nothing after 1.4s)"),
        read("A", b"DEADLINE_SOON\r\n", timeout=2.0,
             label="reserve (blocks until 1s safety margin -> DEADLINE_SOON)"),
        send("A", b"touch 2\r\n", b"TOUCHED\r\n", label="touch resets ttr"),
        send("A", b"delete 2\r\n", b"DELETED\r\n", label="delete 2"),
    ),
)

PAUSE_RESERVE = Scenario(
    "golden-pause-reserve",
    doc="Transcript 'timing': reserve on a tube paused for 1 s waits for the pause to end.",
    source="golden",
    steps=steps(
        send("A", b"use t1\r\nwatch t1\r\nignore default\r\n", b"USING t1\r\n", b"WATCHING 2\r\n",
             b"WATCHING 1\r\n", label="use t1 / watch t1 / ignore default"),
        send_window("A", b"pause-tube t1 1\r\nput 0 0 60 1\r\np\r\nreserve\r\n", 0.5, b"PAUSED\r\n",
                    b"INSERTED 1\r\n", label="pause-tube t1 1 + put + reserve (waits ~1s)"),
        read("A", b"RESERVED 1 1\r\np\r\n", timeout=2.0, label="reserve returns after the pause"),
    ),
)

CROSS_CONNECTION = Scenario(
    "golden-cross-connection",
    doc="Transcript 'cross-connection ownership': another connection's reservation is NOT_FOUND; "
        "disconnect releases it.",
    source="golden",
    steps=steps(
        send("A", b"use x\r\nwatch x\r\n", b"USING x\r\n", b"WATCHING 2\r\n", label="A: use x / watch x"),
        send("A", b"put 0 0 60 1\r\nA\r\n", b"INSERTED 1\r\n", label="A: put"),
        send("B", b"watch x\r\nignore default\r\nreserve\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
             b"RESERVED 1 1\r\nA\r\n", label="B: watch x / ignore default / reserve"),
        send("A", b"delete 1\r\n", NF, label="A: delete job reserved by B"),
        send("A", b"release 1 0 0\r\n", NF, label="A: release job reserved by B"),
        send("A", b"touch 1\r\n", NF, label="A: touch job reserved by B"),
        send("A", b"bury 1 0\r\n", NF, label="A: bury job reserved by B"),
        send("A", b"kick-job 1\r\n", NF, label="A: kick-job job reserved by B"),
        send("A", b"stats-job 1\r\n", stats_job(1, "x", "reserved", time_left=59, reserves=1),
             label="A: stats-job reserved by B"),
        close("B", label="B disconnects"),
        sleep(0.2),
        send("A", b"stats-job 1\r\n", stats_job(1, "x", "ready", reserves=1),
             label="A: after B disconnects, job is ready again (stats-job)"),
    ),
)

HALF_CLOSE = Scenario(
    "golden-half-close",
    doc="Transcript 'half-close while waiting': shutdown(SHUT_WR) during reserve -> TIMED_OUT.",
    source="golden",
    steps=steps(
        send_window("A", b"reserve\r\n", 0.3, label="reserve (waiting)"),
        shutwr("A", label="client shutdown(SHUT_WR) while waiting"),
        eof("A", b"TIMED_OUT\r\n", label="reserve, then client shutdown(SHUT_WR) while waiting"),
    ),
)

DRAIN = Scenario(
    "golden-drain-mode",
    doc="Transcript 'drain mode': after SIGUSR1, put answers DRAINING (body consumed); "
        "everything else works.",
    source="golden",
    steps=steps(
        send("A", b"use errs\r\nput 0 0 60 1\r\nx\r\n", b"USING errs\r\n", b"INSERTED 1\r\n",
             label="put before draining"),
        signal(label="SIGUSR1 (enter drain mode)"),
        sleep(0.3),
        case("put while draining", b"put 0 0 60 1\r\nx\r\n", b"DRAINING\r\n", probe=USING_ERRS),
        send("A", b"watch errs\r\nignore default\r\nreserve-with-timeout 0\r\n", b"WATCHING 2\r\n",
             b"WATCHING 1\r\n", b"RESERVED 1 1\r\nx\r\n", label="reserve while draining still works"),
        send("A", b"stats\r\n", stats(current_jobs_reserved=1, cmd_put=2, cmd_reserve_with_timeout=1,
                                      cmd_use=1, cmd_watch=1, cmd_ignore=1, cmd_stats=1,
                                      cmd_list_tube_used=1, total_jobs=1, current_tubes=2,
                                      current_producers=1, current_workers=1, draining="true"),
             label="stats shows draining: true"),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    HAPPY, JOB_TOO_BIG, RESERVE_TIMEOUTS, DEADLINE_SOON, PAUSE_RESERVE, CROSS_CONNECTION,
    HALF_CLOSE, DRAIN,
)
