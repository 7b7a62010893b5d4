"""Scenarios beyond the golden transcript that need no waiting on the server's clock.

Expected replies were recorded from beanstalkd 1.12 (Debian package) and checked by hand
against prot.c's logic; comments point out the non-obvious ones.
"""

from __future__ import annotations

from .beanstalk_replies import job_frame, stats, stats_job, stats_tube, yaml_list
from .scenario import (Scenario, close, eof, read, send, send_eof, send_window, shutwr, sleep,
                       steps)

__all__ = ["SCENARIOS"]

BF = b"BAD_FORMAT\r\n"
UC = b"UNKNOWN_COMMAND\r\n"
NF = b"NOT_FOUND\r\n"


def _ins(*ids: int) -> tuple[bytes, ...]:
    return tuple(b"INSERTED %d\r\n" % i for i in ids)


STATS_AFTER_ERRORS = Scenario(
    "stats-after-errors",
    doc="Which failed commands count in cmd-*: a command counts once its arguments parsed, "
        "so BAD_FORMAT from argument parsing does not count, NOT_FOUND does; put counts "
        "JOB_TOO_BIG, EXPECTED_CRLF and trailing-garbage BAD_FORMAT; pause-tube counts a bad "
        "name (name validity is checked after counting).",
    steps=steps(
        send("A", b"put 0 0 60\r\n", BF, label="put missing field (not counted)"),
        send("A", b"put 0 0 60 1 junk\r\nx\r\n", BF, UC,
             label="put trailing garbage (counted in cmd-put)"),
        send("A", b"put 0 0 60 65536\r\n" + b"b" * 65536 + b"\r\n", b"JOB_TOO_BIG\r\n",
             label="put 65536 bytes -> JOB_TOO_BIG (counted)"),
        send("A", b"put 0 0 60 1\r\nxyz", b"EXPECTED_CRLF\r\n",
             label="put EXPECTED_CRLF (counted; makes the connection a producer)"),
        send("A", b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n",
             label="reserve-with-timeout 0 (counted; makes it a worker)"),
        send("A", b"reservex\r\n", BF, label="reservex (not counted)"),
        send("A", b"kick abc\r\n", BF, label="kick abc (not counted)"),
        send("A", b"pause-tube -foo 1\r\n", BF, label="pause-tube -foo 1 (BAD_FORMAT but counted)"),
        send("A", b"pause-tube nosuch 1\r\n", NF, label="pause-tube nosuch 1 (counted)"),
        send("A", b"pause-tube foo\r\n", BF, label="pause-tube foo (not counted)"),
        send("A", b"stats-tube -x\r\n", BF, label="stats-tube -x (not counted)"),
        send("A", b"stats-tube nosuch\r\n", NF, label="stats-tube nosuch (counted)"),
        send("A", b"use -x\r\nwatch -x\r\nignore -x\r\n", BF, BF, BF,
             label="use/watch/ignore bad name (not counted)"),
        send("A", b"ignore default\r\n", b"NOT_IGNORED\r\n", label="ignore last tube (counted)"),
        send("A", b"delete abc\r\ndelete 999\r\n", BF, NF, label="delete abc / delete 999"),
        send("A", b"release 1 0\r\nrelease 999 0 0\r\n", BF, NF, label="release bad / missing"),
        send("A", b"bury 1\r\nbury 999 0\r\n", BF, NF, label="bury bad / missing"),
        send("A", b"touch x\r\ntouch 999\r\n", BF, NF, label="touch bad / missing"),
        send("A", b"peek x\r\npeek 999\r\n", BF, NF, label="peek bad / missing"),
        send("A", b"peek-ready \r\npeek-ready\r\npeek-delayed\r\npeek-buried\r\n", BF, NF, NF, NF,
             label="peek-ready/-delayed/-buried on empty tube"),
        send("A", b"stats-job x\r\nstats-job 999\r\n", BF, NF, label="stats-job bad / missing"),
        send("A", b"list-tubes \r\nlist-tube-used \r\nlist-tubes-watched \r\n", BF, BF, BF,
             label="list-* with trailing space (not counted)"),
        send("A", b"reserve-job 999\r\nkick-job 999\r\nfoo\r\nstatsx\r\n", NF, NF, UC, BF,
             label="reserve-job/kick-job missing, unknown, statsx"),
        send("A", b"stats\r\n", stats(
            cmd_put=3, cmd_peek=1, cmd_peek_ready=1, cmd_peek_delayed=1, cmd_peek_buried=1,
            cmd_reserve_with_timeout=1, cmd_delete=1, cmd_release=1, cmd_ignore=1, cmd_bury=1,
            cmd_touch=1, cmd_stats=1, cmd_stats_job=1, cmd_stats_tube=1, cmd_pause_tube=2,
            current_producers=1, current_workers=1), label="stats"),
        send("A", b"stats-tube default\r\n", stats_tube("default", using=1, watching=1),
             label="stats-tube default"),
        send("A", b"put 0 0 60 1\r\nx\r\n", b"INSERTED 2\r\n",
             label="put: id 1 was used up by the EXPECTED_CRLF put"),
    ),
)

KICK_ORDER = Scenario(
    "kick-order",
    doc="kick takes buried jobs first, oldest burial first; only when none are buried does it "
        "kick delayed jobs, soonest deadline first; kick-job on buried/delayed/ready.",
    steps=steps(
        send("A", b"use k\r\nwatch k\r\nignore default\r\n", b"USING k\r\n", b"WATCHING 2\r\n",
             b"WATCHING 1\r\n", label="use k / watch k"),
        send("A", b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nput 0 0 60 1\r\nc\r\n", *_ins(1, 2, 3),
             label="put 3"),
        send("A", b"reserve\r\nreserve\r\nreserve\r\n", b"RESERVED 1 1\r\na\r\n",
             b"RESERVED 2 1\r\nb\r\n", b"RESERVED 3 1\r\nc\r\n", label="reserve 3"),
        send("A", b"bury 2 0\r\nbury 3 0\r\nbury 1 0\r\n", b"BURIED\r\n", b"BURIED\r\n", b"BURIED\r\n",
             label="bury 2, 3, 1"),
        send("A", b"peek-buried\r\n", b"FOUND 2 1\r\nb\r\n", label="peek-buried shows first buried"),
        send("A", b"kick 1\r\npeek-buried\r\n", b"KICKED 1\r\n", b"FOUND 3 1\r\nc\r\n",
             label="kick 1 kicks job 2"),
        send("A", b"kick 1\r\npeek-buried\r\n", b"KICKED 1\r\n", b"FOUND 1 1\r\na\r\n",
             label="kick 1 kicks job 3"),
        send("A", b"peek-ready\r\n", b"FOUND 2 1\r\nb\r\n", label="peek-ready: kicked job 2"),
        send("A", b"put 0 300 60 1\r\nd\r\nput 0 100 60 1\r\ne\r\nput 0 200 60 1\r\nf\r\n",
             *_ins(4, 5, 6), label="put delayed 300, 100, 200"),
        send("A", b"kick 10\r\n", b"KICKED 1\r\n", label="kick 10 with 1 buried: only buried"),
        send("A", b"peek-delayed\r\n", b"FOUND 5 1\r\ne\r\n", label="peek-delayed: soonest"),
        send("A", b"kick 1\r\npeek-delayed\r\n", b"KICKED 1\r\n", b"FOUND 6 1\r\nf\r\n",
             label="kick 1 kicks delayed job 5"),
        send("A", b"stats-job 5\r\n", stats_job(5, "k", "ready", delay=100, kicks=1),
             label="stats-job 5 after kick"),
        send("A", b"kick 5\r\n", b"KICKED 2\r\n", label="kick 5 kicks the last 2 delayed"),
        send("A", b"kick 5\r\n", b"KICKED 0\r\n", label="kick 5 nothing left"),
        send("A", b"reserve\r\nbury 1 0\r\nkick-job 1\r\nkick-job 1\r\n", b"RESERVED 1 1\r\na\r\n",
             b"BURIED\r\n", b"KICKED\r\n", NF, label="kick-job buried, then ready -> NOT_FOUND"),
        send("A", b"stats-tube k\r\n", stats_tube("k", urgent=6, ready=6, total=6, using=1,
                                                   watching=1), label="stats-tube k"),
    ),
)

PRIORITY_ORDER = Scenario(
    "priority-order",
    doc="reserve takes the smallest priority, ties by id (FIFO); urgent means pri < 1024; "
        "release can change the priority.",
    steps=steps(
        send("A", b"".join(b"put %d 0 60 1\r\n%d\r\n" % (p, i + 1) for i, p in
                           enumerate((5, 1, 5, 1, 0, 4294967295, 1023, 1024))),
             *_ins(1, 2, 3, 4, 5, 6, 7, 8), label="put pri 5,1,5,1,0,2^32-1,1023,1024"),
        send("A", b"stats-tube default\r\n", stats_tube("default", urgent=6, ready=8, total=8,
                                                         using=1, watching=1),
             label="stats-tube: urgent counts pri < 1024"),
        send("A", b"peek-ready\r\n", b"FOUND 5 1\r\n5\r\n", label="peek-ready: pri 0"),
        send("A", b"reserve\r\n" * 8, *(job_frame("RESERVED", i, b"%d" % i)
                                        for i in (5, 2, 4, 1, 3, 7, 8, 6)),
             label="reserve 8: by priority, then id"),
        send("A", b"release 6 0 0\r\nrelease 7 2000 0\r\nrelease 5 7 0\r\n", b"RELEASED\r\n",
             b"RELEASED\r\n", b"RELEASED\r\n", label="release 6 pri 0, 7 pri 2000, 5 pri 7"),
        send("A", b"stats-job 7\r\n", stats_job(7, "default", "ready", pri=2000, reserves=1,
                                                releases=1), label="stats-job 7 new pri"),
        send("A", b"reserve\r\nreserve\r\nreserve\r\n", b"RESERVED 6 1\r\n6\r\n",
             b"RESERVED 5 1\r\n5\r\n", b"RESERVED 7 1\r\n7\r\n", label="reserve again: 6, 5, 7"),
        send("A", b"stats\r\n", stats(current_jobs_reserved=8, cmd_put=8, cmd_peek_ready=1,
                                      cmd_reserve=11, cmd_release=3, cmd_stats=1,
                                      cmd_stats_job=1, cmd_stats_tube=1, total_jobs=8,
                                      current_producers=1, current_workers=1),
             label="stats"),
    ),
)

FIFO_EQUAL_PRIORITY = Scenario(
    "fifo-equal-priority",
    doc="20 jobs of one priority come out in id order; released jobs re-enter by id, not by "
        "release time.",
    steps=steps(
        send("A", b"put 100 0 60 2\r\nxx\r\n" * 20, *_ins(*range(1, 21)), label="put 20 pri 100"),
        send("A", b"reserve\r\n" * 20, *(b"RESERVED %d 2\r\nxx\r\n" % i for i in range(1, 21)),
             label="reserve 20 in id order"),
        send("A", b"release 9 100 0\r\nrelease 4 100 0\r\nrelease 15 100 0\r\n",
             b"RELEASED\r\n", b"RELEASED\r\n", b"RELEASED\r\n", label="release 9, 4, 15"),
        send("A", b"reserve\r\nreserve\r\nreserve\r\n", b"RESERVED 4 2\r\nxx\r\n",
             b"RESERVED 9 2\r\nxx\r\n", b"RESERVED 15 2\r\nxx\r\n", label="reserve: 4, 9, 15"),
    ),
)

WATCH_MULTIPLE = Scenario(
    "watch-multiple-tubes",
    doc="reserve over a watch list takes the smallest (priority, id) across all watched tubes; "
        "ignoring a tube stops it.",
    steps=steps(
        send("A", b"use a\r\nput 5 0 60 1\r\n1\r\nuse b\r\nput 3 0 60 1\r\n2\r\nuse c\r\n"
                  b"put 3 0 60 1\r\n3\r\nput 9 0 60 1\r\n4\r\n",
             b"USING a\r\n", b"INSERTED 1\r\n", b"USING b\r\n", b"INSERTED 2\r\n", b"USING c\r\n",
             b"INSERTED 3\r\n", b"INSERTED 4\r\n", label="A: put into a, b, c"),
        send("B", b"watch c\r\nwatch a\r\nwatch b\r\nignore default\r\nlist-tubes-watched\r\n",
             b"WATCHING 2\r\n", b"WATCHING 3\r\n", b"WATCHING 4\r\n", b"WATCHING 3\r\n",
             yaml_list("b", "c", "a"), label="B: watch c, a, b; ignore default"),
        send("B", b"reserve\r\nreserve\r\nreserve\r\n", b"RESERVED 2 1\r\n2\r\n",
             b"RESERVED 3 1\r\n3\r\n", b"RESERVED 1 1\r\n1\r\n", label="B: reserve 3"),
        send("B", b"ignore c\r\nreserve-with-timeout 0\r\n", b"WATCHING 2\r\n", b"TIMED_OUT\r\n",
             label="B: ignore c; job 4 in c is invisible"),
        send("B", b"watch c\r\nreserve-with-timeout 0\r\n", b"WATCHING 3\r\n",
             b"RESERVED 4 1\r\n4\r\n", label="B: watch c again; job 4"),
        send("A", b"list-tubes\r\n", yaml_list("default", "a", "b", "c"), label="A: list-tubes"),
    ),
)

DISCONNECT_RELEASES = Scenario(
    "disconnect-releases",
    doc="Closing a connection releases its reservations (no release counted); its puts and "
        "delayed jobs stay.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nput 0 0 60 1\r\nc\r\n", *_ins(1, 2, 3),
             label="A: put 3"),
        send("B", b"put 0 100 60 1\r\nd\r\nreserve\r\nreserve\r\n", b"INSERTED 4\r\n",
             b"RESERVED 1 1\r\na\r\n", b"RESERVED 2 1\r\nb\r\n", label="B: put delayed, reserve 2"),
        send("A", b"stats\r\n", stats(current_jobs_urgent=1, current_jobs_ready=1,
                                      current_jobs_reserved=2, current_jobs_delayed=1, cmd_put=4,
                                      cmd_reserve=2, cmd_stats=1, total_jobs=4,
                                      current_connections=2, current_producers=2,
                                      current_workers=1, total_connections=3),
             label="A: stats while B holds 2"),
        close("B", label="B disconnects"),
        sleep(0.2),
        send("A", b"stats-job 1\r\n", stats_job(1, "default", "ready", reserves=1),
             label="A: stats-job 1 ready again, no release counted"),
        send("A", b"stats\r\n", stats(current_jobs_urgent=3, current_jobs_ready=3,
                                      current_jobs_delayed=1, cmd_put=4, cmd_reserve=2,
                                      cmd_stats=2, cmd_stats_job=1, total_jobs=4,
                                      current_producers=1, total_connections=3),
             label="A: stats after B left"),
        send("A", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n", label="A: reserve gets job 1"),
    ),
)

QUIT_VARIANTS = Scenario(
    "quit-variants",
    doc="quit closes at once (pipelined commands after it are not answered) and releases "
        "the connection's reservations.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\na\r\nreserve\r\n", b"INSERTED 1\r\n", b"RESERVED 1 1\r\na\r\n",
             label="A: put, reserve"),
        send_eof("A", b"use x\r\nquit\r\nlist-tube-used\r\n", b"USING x\r\n",
                 label="A: use x, quit, list-tube-used"),
        sleep(0.1),
        send("B", b"stats-job 1\r\nlist-tubes\r\n", stats_job(1, "default", "ready", reserves=1),
             yaml_list("default"), label="B: job 1 ready, tube x gone"),
        send_eof("B", b"quit \r\n", label="B: 'quit ' with trailing space also quits"),
    ),
)

LIST_TUBES_GC = Scenario(
    "list-tubes-gc",
    doc="Tubes vanish when no connection uses/watches them and they hold no job; beanstalkd "
        "removes a tube from its list by moving the last tube into the hole, so list order "
        "after a removal is not creation order (same for the watch list).",
    steps=steps(
        send("A", b"use t1\r\nwatch t2\r\nwatch t3\r\n", b"USING t1\r\n", b"WATCHING 2\r\n",
             b"WATCHING 3\r\n", label="A: use t1, watch t2 t3"),
        send("B", b"use t4\r\nlist-tubes\r\n", b"USING t4\r\n",
             yaml_list("default", "t1", "t2", "t3", "t4"), label="B: use t4; list-tubes"),
        send("A", b"ignore t2\r\nlist-tubes\r\n", b"WATCHING 2\r\n",
             yaml_list("default", "t1", "t4", "t3"), label="A: ignore t2 -> t4 moves into its slot"),
        send("A", b"use t5\r\nput 0 100 60 1\r\nx\r\nuse default\r\nlist-tubes\r\n", b"USING t5\r\n",
             b"INSERTED 1\r\n", b"USING default\r\n", yaml_list("default", "t5", "t4", "t3"),
             label="A: delayed job keeps t5 alive; t1 gone"),
        send("B", b"use t6\r\nlist-tubes\r\nuse t1\r\nlist-tubes\r\n", b"USING t6\r\n",
             yaml_list("default", "t5", "t6", "t3"), b"USING t1\r\n",
             yaml_list("default", "t5", "t1", "t3"), label="B: use t6, then t1"),
        send("A", b"ignore default\r\nlist-tubes-watched\r\nwatch default\r\nlist-tubes-watched\r\n"
                  b"watch t9\r\nignore t3\r\nlist-tubes-watched\r\n",
             b"WATCHING 1\r\n", yaml_list("t3"), b"WATCHING 2\r\n", yaml_list("t3", "default"),
             b"WATCHING 3\r\n", b"WATCHING 2\r\n", yaml_list("t9", "default"),
             label="A: watch list order after ignore"),
        send("B", b"use t7\r\nput 0 0 60 1\r\ny\r\nwatch t7\r\nreserve-job 2\r\nuse default\r\n"
                  b"ignore t7\r\nlist-tubes\r\n",
             b"USING t7\r\n", b"INSERTED 2\r\n", b"WATCHING 2\r\n", b"RESERVED 2 1\r\ny\r\n",
             b"USING default\r\n", b"WATCHING 1\r\n", yaml_list("default", "t5", "t7", "t9"),
             label="B: a reserved job keeps t7 alive"),
        send("B", b"delete 2\r\nlist-tubes\r\n", b"DELETED\r\n", yaml_list("default", "t5", "t9"),
             label="B: delete it; t7 gone"),
        send("A", b"stats\r\n", stats(current_jobs_delayed=1, cmd_put=2, cmd_delete=1, cmd_use=8,
                                      cmd_watch=5, cmd_ignore=4, cmd_stats=1, cmd_list_tubes=7,
                                      cmd_list_tubes_watched=3, total_jobs=2, current_tubes=3,
                                      current_connections=2, current_producers=2,
                                      current_workers=1, total_connections=3),
             label="A: stats current-tubes"),
    ),
)

PEEK_SCOPE = Scenario(
    "peek-scope",
    doc="peek-ready/-delayed/-buried look at the used tube only (not the watch list); peek <id> "
        "and stats-job work across tubes; delete works on ready, delayed and buried jobs from "
        "any connection.",
    steps=steps(
        send("A", b"use a\r\nput 0 0 60 1\r\nr\r\nput 0 100 60 1\r\nd\r\nput 0 0 60 1\r\nb\r\n",
             b"USING a\r\n", *_ins(1, 2, 3), label="A: use a; put ready, delayed, ready"),
        send("A", b"watch a\r\nreserve-job 3\r\nbury 3 9\r\n", b"WATCHING 2\r\n",
             b"RESERVED 3 1\r\nb\r\n", b"BURIED\r\n", label="A: bury job 3"),
        send("B", b"watch a\r\npeek-ready\r\npeek-delayed\r\npeek-buried\r\n", b"WATCHING 2\r\n",
             NF, NF, NF, label="B (uses default, watches a): peek-* NOT_FOUND"),
        send("B", b"use a\r\npeek-ready\r\npeek-delayed\r\npeek-buried\r\n", b"USING a\r\n",
             b"FOUND 1 1\r\nr\r\n", b"FOUND 2 1\r\nd\r\n", b"FOUND 3 1\r\nb\r\n",
             label="B: use a; peek-* FOUND"),
        send("B", b"use default\r\npeek 2\r\nstats-job 3\r\n", b"USING default\r\n",
             b"FOUND 2 1\r\nd\r\n", stats_job(3, "a", "buried", pri=9, reserves=1, buries=1),
             label="B: peek / stats-job across tubes"),
        send("B", b"delete 1\r\ndelete 2\r\ndelete 3\r\n", b"DELETED\r\n", b"DELETED\r\n",
             b"DELETED\r\n", label="B: delete ready, delayed, buried jobs of A's tube"),
        send("A", b"stats-tube a\r\n", stats_tube("a", total=3, using=1, watching=2, deletes=3),
             label="A: stats-tube a"),
    ),
)

STATS_TUBE_COUNTERS = Scenario(
    "stats-tube-counters",
    doc="current-using / -watching / -waiting per tube and in stats, while a reserver waits.",
    steps=steps(
        send("A", b"use t\r\n", b"USING t\r\n", label="A: use t"),
        send("B", b"use t\r\nwatch t\r\n", b"USING t\r\n", b"WATCHING 2\r\n", label="B: use t, watch t"),
        send("C", b"watch t\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
             label="C: watch t only"),
        send_window("C", b"reserve\r\n", 0.3, label="C: reserve (waits)"),
        send("A", b"stats-tube t\r\nstats-tube default\r\n",
             stats_tube("t", using=2, watching=2, waiting=1),
             stats_tube("default", using=1, watching=2), label="A: stats-tube t / default"),
        send("A", b"stats\r\n", stats(cmd_reserve=1, cmd_use=2, cmd_watch=2, cmd_ignore=1,
                                      cmd_stats=1, cmd_stats_tube=2, current_tubes=2,
                                      current_connections=3, current_workers=1,
                                      current_waiting=1, total_connections=4),
             label="A: stats while C waits"),
        send("A", b"put 1024 0 60 1\r\nj\r\n", b"INSERTED 1\r\n", label="A: put (not urgent)"),
        read("C", b"RESERVED 1 1\r\nj\r\n", label="C: gets job 1"),
        send("A", b"stats-tube t\r\n", stats_tube("t", reserved=1, total=1, using=2, watching=2),
             label="A: stats-tube t after"),
    ),
)

WHITESPACE_INTEGERS = Scenario(
    "whitespace-integers",
    doc="1.12 skips extra spaces before integer arguments (as with put in the transcript); "
        "jobgate must too.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\n", *_ins(1, 2), label="put 2"),
        send("A", b"reserve-job  1\r\ntouch  1\r\nrelease  1  5  0\r\npeek  1\r\nstats-job  1\r\n",
             b"RESERVED 1 1\r\na\r\n", b"TOUCHED\r\n", b"RELEASED\r\n", b"FOUND 1 1\r\na\r\n",
             stats_job(1, "default", "ready", pri=5, reserves=1, releases=1),
             label="reserve-job/touch/release/peek/stats-job with two spaces"),
        send("A", b"reserve-job 1\r\nbury  1  3\r\nkick  5\r\nkick-job  1\r\ndelete  2\r\n",
             b"RESERVED 1 1\r\na\r\n", b"BURIED\r\n", b"KICKED 1\r\n", NF, b"DELETED\r\n",
             label="bury/kick/kick-job/delete with two spaces"),
        send("A", b"use t\r\npause-tube  t  0\r\nreserve-with-timeout  0\r\n", b"USING t\r\n",
             b"PAUSED\r\n", b"RESERVED 1 1\r\na\r\n",
             label="pause-tube / reserve-with-timeout with two spaces"),
    ),
)

LOOSE_INTEGERS_EXTRA = Scenario(
    "loose-integers-extra",
    doc="More reserve-with-timeout / kick arguments that 1.12 parses with strtol/strtoul "
        "(sign, trailing space, empty); jobgate's strict integers answer BAD_FORMAT (D2).",
    steps=steps(
        send("A", b"watch empty\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
             label="watch only an empty tube"),
        send("A", b"reserve-with-timeout 0 \r\n", b"TIMED_OUT\r\n",
             label="reserve-with-timeout 0 with trailing space"),
        send("A", b"reserve-with-timeout +0\r\n", b"TIMED_OUT\r\n", label="reserve-with-timeout +0"),
        send("A", b"reserve-with-timeout \r\n", b"TIMED_OUT\r\n",
             label="reserve-with-timeout with empty argument"),
        send("A", b"kick 1 \r\n", b"KICKED 0\r\n", label="kick 1 with trailing space"),
        send("A", b"kick +1\r\n", b"KICKED 0\r\n", label="kick +1"),
        send("A", b"kick 1 2\r\n", b"KICKED 0\r\n", label="kick with a second argument"),
        send("A", b"kick 0x10\r\n", b"KICKED 0\r\n", label="kick 0x10 (1.12 reads the 0)"),
        send("A", b"kick 18446744073709551615\r\n", b"KICKED 0\r\n",
             label="kick 2^64-1 (1.12 truncates to 2^32-1)"),
        send("A", b"reserve-with-timeout  \r\n", b"TIMED_OUT\r\n",
             label="reserve-with-timeout with only spaces"),
        send("A", b"reserve-with-timeout 0x10\r\n", b"TIMED_OUT\r\n",
             label="reserve-with-timeout 0x10 (1.12 reads the 0)"),
        send("A", b"list-tube-used\r\n", b"USING default\r\n", label="connection still usable"),
    ),
)

HALF_CLOSE_VARIANTS = Scenario(
    "half-close-variants",
    doc="shutdown(SHUT_WR): pipelined commands are answered, then the server closes; a "
        "half-closed connection's reservation is released.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\na\r\n", b"INSERTED 1\r\n", label="A: put"),
        send("B", b"reserve\r\n", b"RESERVED 1 1\r\na\r\n", label="B: reserve"),
        send("B", b"use foo\r\nlist-tube-used\r\n", b"USING foo\r\n", b"USING foo\r\n",
             label="B: use foo"),
        shutwr("B", label="B: shutdown(SHUT_WR)"),
        eof("B", label="B: server closes"),
        sleep(0.1),
        send("A", b"stats-job 1\r\nlist-tubes\r\n", stats_job(1, "default", "ready", reserves=1),
             yaml_list("default"), label="A: job 1 released, foo gone"),
        send("C", b"list-tube-used\r\n", b"USING default\r\n", label="C: connect"),
        send("C", b"reserve-with-timeout 10\r\n", b"RESERVED 1 1\r\na\r\n", label="C: reserve"),
        send_window("C", b"reserve-with-timeout 10\r\n", 0.3, label="C: reserve-with-timeout 10 waits"),
        shutwr("C", label="C: shutdown(SHUT_WR) while waiting"),
        eof("C", b"TIMED_OUT\r\n", label="C: TIMED_OUT then close"),
        sleep(0.1),
        send("A", b"stats-job 1\r\n", stats_job(1, "default", "ready", reserves=2),
             label="A: job 1 released again"),
    ),
)

BURIED_NOT_URGENT = Scenario(
    "buried-paused-counters",
    doc="A buried job is not counted as urgent; kick works on a paused tube and the kicked job "
        "is visible to peek-ready but not reservable until the pause ends.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\nx\r\nreserve\r\nbury 1 0\r\nstats-tube default\r\n",
             b"INSERTED 1\r\n", b"RESERVED 1 1\r\nx\r\n", b"BURIED\r\n",
             stats_tube("default", buried=1, total=1, using=1, watching=1),
             label="put, reserve, bury; stats-tube"),
        send("A", b"pause-tube default 5\r\nkick 1\r\npeek-ready\r\nreserve-with-timeout 0\r\n"
                  b"stats-tube default\r\n",
             b"PAUSED\r\n", b"KICKED 1\r\n", b"FOUND 1 1\r\nx\r\n", b"TIMED_OUT\r\n",
             stats_tube("default", urgent=1, ready=1, total=1, using=1, watching=1, pauses=1,
                        pause=5, pause_left=4),
             label="pause, kick, peek-ready, reserve-with-timeout 0"),
    ),
)

MAX_JOB_SIZE_ZERO = Scenario(
    "max-job-size-zero",
    doc="With -z 0 only empty bodies are accepted.",
    flags=("-z", "0"),
    steps=steps(
        send("A", b"put 0 0 60 0\r\n\r\nput 0 0 60 1\r\nx\r\n", b"INSERTED 1\r\n",
             b"JOB_TOO_BIG\r\n", label="put 0 bytes, put 1 byte"),
        send("A", b"stats\r\n", stats(current_jobs_urgent=1, current_jobs_ready=1, cmd_put=2,
                                      cmd_stats=1, total_jobs=1, max_job_size=0,
                                      current_producers=1), label="stats max-job-size: 0"),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    STATS_AFTER_ERRORS, KICK_ORDER, PRIORITY_ORDER, FIFO_EQUAL_PRIORITY, WATCH_MULTIPLE,
    DISCONNECT_RELEASES, QUIT_VARIANTS, LIST_TUBES_GC, PEEK_SCOPE, STATS_TUBE_COUNTERS, WHITESPACE_INTEGERS, LOOSE_INTEGERS_EXTRA,
    HALF_CLOSE_VARIANTS, BURIED_NOT_URGENT, MAX_JOB_SIZE_ZERO,
)
