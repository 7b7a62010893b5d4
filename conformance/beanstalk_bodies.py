"""Scenarios beyond the golden transcript about bodies and framing: pipelining many commands
in one write, commands and bodies split across writes, a connection closed mid-body, the
65535/65536 size limit, binary bodies, JOB_TOO_BIG skipping with -z.
Expected replies recorded from beanstalkd 1.12.
"""

from __future__ import annotations

from .beanstalk_replies import job_frame, stats, stats_job, stats_tube
from .scenario import (Scenario, close, read, send, send_only, send_window, sleep, steps,
                       window)

__all__ = ["SCENARIOS"]

UC = b"UNKNOWN_COMMAND\r\n"


def _ins(*ids: int) -> tuple[bytes, ...]:
    return tuple(b"INSERTED %d\r\n" % i for i in ids)


_PIPE_N = 100
PIPELINING = Scenario(
    "pipelining-many",
    doc="300+ commands in one write are all answered, in order; a body containing command text "
        "is not parsed as commands.",
    steps=steps(
        send("A", b"put 0 0 60 3\r\nabc\r\n" * _PIPE_N + b"reserve-with-timeout 0\r\n" * _PIPE_N
             + b"".join(b"delete %d\r\n" % i for i in range(1, _PIPE_N + 1))
             + b"stats-tube default\r\n",
             *_ins(*range(1, _PIPE_N + 1)),
             *(b"RESERVED %d 3\r\nabc\r\n" % i for i in range(1, _PIPE_N + 1)),
             *([b"DELETED\r\n"] * _PIPE_N),
             stats_tube("default", total=_PIPE_N, using=1, watching=1, deletes=_PIPE_N),
             label="100 put + 100 reserve + 100 delete + stats-tube in one write"),
        send("A", b"put 0 0 60 15\r\nput 0 0 60 1\r\nx\r\nreserve\r\n", b"INSERTED 101\r\n",
             b"RESERVED 101 15\r\nput 0 0 60 1\r\nx\r\n",
             label="body containing a put command line"),
    ),
)

_PATTERN = bytes(range(256))
_BODY_65535 = (_PATTERN * 256)[:65535]

BIG_BODIES = Scenario(
    "big-bodies",
    doc="A 65535-byte body (the default max) round-trips; 65536 is JOB_TOO_BIG and its body is "
        "skipped exactly.",
    steps=steps(
        send("A", b"put 0 0 60 65535\r\n" + _BODY_65535 + b"\r\n", b"INSERTED 1\r\n",
             label="put 65535 bytes"),
        send("A", b"put 0 0 60 65536\r\n" + _BODY_65535 + b"X\r\nlist-tube-used\r\n",
             b"JOB_TOO_BIG\r\n", b"USING default\r\n", label="put 65536 bytes -> JOB_TOO_BIG"),
        send("A", b"peek 1\r\n", job_frame("FOUND", 1, _BODY_65535), label="peek 1"),
        send("A", b"reserve\r\n", job_frame("RESERVED", 1, _BODY_65535), label="reserve 1"),
        send("A", b"stats-job 1\r\n", stats_job(1, "default", "reserved", time_left=59, reserves=1),
             label="stats-job 1"),
    ),
)

_BINARY = (
    _PATTERN,
    b"\r\n",
    b"RESERVED 9 9\r\nxxxxxxxxx\r\n",
    b"trailing CR\r",
    b"\n\n\n",
    b"\x00" * 32,
    b"\xff\xfe\r\n\x00",
)

BINARY_BODIES = Scenario(
    "binary-bodies",
    doc="Bodies are opaque bytes: every byte value, bare CRLF, reply-like text, stray CR/LF, NUL.",
    steps=steps(
        send("A", b"".join(b"put 0 0 60 %d\r\n" % len(b) + b + b"\r\n" for b in _BINARY),
             *_ins(*range(1, len(_BINARY) + 1)), label="put binary bodies"),
        send("A", b"".join(b"peek %d\r\n" % (i + 1) for i in range(len(_BINARY))),
             *(job_frame("FOUND", i + 1, b) for i, b in enumerate(_BINARY)), label="peek each"),
        send("A", b"reserve\r\n" * len(_BINARY),
             *(job_frame("RESERVED", i + 1, b) for i, b in enumerate(_BINARY)), label="reserve each"),
    ),
)

JOB_TOO_BIG_SKIP = Scenario(
    "job-too-big-skip",
    doc="With -z 10, JOB_TOO_BIG is sent only after size+2 bytes were skipped; the skip does "
        "not look for CRLF.",
    flags=("-z", "10"),
    steps=steps(
        send_window("A", b"put 0 0 60 20\r\n01234", 0.3, label="put 20 with 5 body bytes: no reply yet"),
        send("A", b"567890123456789\r\nlist-tube-used\r\n", b"JOB_TOO_BIG\r\n",
             b"USING default\r\n", label="rest of the body: JOB_TOO_BIG, then next command"),
        send("A", b"put 0 0 60 11\r\n0123456789ABCD\r\n", b"JOB_TOO_BIG\r\n", UC,
             label="skip is exactly 13 bytes; 'D' starts the next line"),
        send("A", b"put 0 0 60 10\r\n0123456789\r\nstats-job 1\r\n", b"INSERTED 1\r\n",
             stats_job(1, "default", "ready"), label="10 bytes ok"),
        send("A", b"stats\r\n", stats(current_jobs_urgent=1, current_jobs_ready=1, cmd_put=3,
                                      cmd_stats=1, cmd_stats_job=1, cmd_list_tube_used=1,
                                      total_jobs=1, max_job_size=10, current_producers=1),
             label="stats"),
    ),
)



def _pieces(conn: str, label: str, *parts: bytes):
    """Send ``parts`` as separate writes, 50 ms apart (TCP_NODELAY is on)."""
    out = []
    for i, p in enumerate(parts, start=1):
        out.append(send_only(conn, p, label=f"{label} (write {i}/{len(parts)})"))
        out.append(sleep(0.05, label=f"{label} (pause {i})"))
    return out


SPLIT_WRITES = Scenario(
    "split-writes",
    doc="Command lines, CRLFs and bodies split across writes give the same replies as whole "
        "writes; a connection closed in the middle of a body creates no job (the put is "
        "still counted).",
    steps=steps(
        _pieces("A", "list-tube-used split mid-word", b"list-", b"tube-used\r\n"),
        read("A", b"USING default\r\n", label="list-tube-used split mid-word: reply"),
        _pieces("A", "CR and LF in separate writes", b"list-tube-used\r", b"\n"),
        read("A", b"USING default\r\n", label="CR and LF in separate writes: reply"),
        _pieces("A", "put body in two writes", b"put 0 0 60 10\r\n01234", b"56789\r\n"),
        read("A", b"INSERTED 1\r\n", label="put body in two writes: reply"),
        _pieces("A", "put trailer split", b"put 0 0 60 3\r\nabc\r", b"\n"),
        read("A", b"INSERTED 2\r\n", label="put trailer split: reply"),
        _pieces("A", "put line and body split oddly", b"put 0 0 6", b"0 3\r", b"\nab",
                b"c\r\nlist-tube-used\r\n"),
        read("A", b"INSERTED 3\r\n", b"USING default\r\n",
             label="put line and body split oddly: replies"),
        _pieces("A", "peek 1 byte by byte", *[bytes([c]) for c in b"peek 1\r\n"]),
        read("A", b"FOUND 1 10\r\n0123456789\r\n", label="peek 1 byte by byte: reply"),
        _pieces("A", "300-byte line in three writes", b"z" * 100, b"z" * 100, b"z" * 100 + b"\r\n"),
        read("A", b"BAD_FORMAT\r\n", label="300-byte line in three writes: reply"),
        _pieces("A", "223 chars, CR, LF, command as separate writes", b"z" * 223, b"\r", b"\n",
                b"list-tube-used\r\n"),
        window("A", 0.3, b"BAD_FORMAT\r\n",
               label="223 chars, CR, LF, command: one BAD_FORMAT, command swallowed"),
        send("A", b"list-tube-used\r\n", b"USING default\r\n", label="connection still usable"),
        send_window("B", b"put 0 0 60 10\r\n01234", 0.2, label="B: put with half a body"),
        close("B", label="B closes mid-body"),
        sleep(0.2),
        send("A", b"stats\r\n", stats(current_jobs_urgent=3, current_jobs_ready=3, cmd_put=4,
                                      cmd_peek=1, cmd_stats=1, cmd_list_tube_used=4,
                                      total_jobs=3, current_producers=1, total_connections=3),
             label="A: stats (no job from B; its put counted)"),
        send("A", b"put 0 0 60 1\r\nx\r\n", b"INSERTED 5\r\n",
             label="A: put (id 4 was used up by B's unfinished put)"),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (PIPELINING, SPLIT_WRITES, BIG_BODIES, BINARY_BODIES,
                                   JOB_TOO_BIG_SKIP)
