"""workq scenarios from the golden transcript, sections "inspect" and "connection-level":
inspect server (W2), queues, queue, jobs, job (a payload with CRLF: W3), argument errors, and
what closes a connection (bare LF, an over-long line) or does not (a partial line).

The transcript's ``inspect queues 0 100`` listed the 22 queues its earlier cases had left; the
queues scenario recreates exactly those names and lengths with setup steps, so the recorded
reply is expected byte for byte.
"""

from __future__ import annotations

from .scenario import close, sleep
from .workq_scenarios_common import (CE, NOT_FOUND, OK, TIMEOUT, U, at, entry, jobs,
                                     mask_active_clients, queue, scenario, server, timed, wq,
                                     wq_eof, wq_window)

__all__ = ["SCENARIOS"]

DOC_ID = b"6ba7b810-9dad-11d1-80b4-00c04fd430c4"
A255 = "a" * 255

# The transcript's queues when it listed them: (name, ready-len, scheduled-len).
GOLDEN_QUEUES = (
    (A255, 1, 0), ("big", 1, 0), ("crlf", 1, 0), ("failq", 0, 0), ("multi-a", 0, 0),
    ("multi-b", 1, 0), ("multi-c", 0, 0), ("nothing", 0, 0), ("order", 3, 0), ("ping", 5, 0),
    ("prio", 1, 0), ("resq", 0, 0), ("runq", 0, 0), ("runq2", 0, 0), ("sched", 1, 0),
    ("sched2", 1, 1), ("spaces", 1, 0), ("ttlq", 0, 0), ("ttrq", 0, 0), ("ttrq2", 0, 0),
    ("ttrq3", 0, 0), ("zero", 1, 0),
)


def _setup_adds() -> tuple[bytes, bytes]:
    """Pipelined adds giving every golden queue its ready length: (request, replies)."""
    req, n = [], 0
    for name, ready, _ in GOLDEN_QUEUES:
        for _ in range(ready):
            req.append(b"add %s %s 1000 60000 1\r\nq\r\n" % (U(0x200 + n), name.encode()))
            n += 1
    return b"".join(req), OK * n


_ADDS, _ADDS_OK = _setup_adds()
_EMPTY = [name for name, ready, sched in GOLDEN_QUEUES if ready == 0 and sched == 0]
_SCHED_LATER = b"schedule " + U(0x2ff) + b" sched2 1000 60000 %s 1\r\nq\r\n"

QUEUES = scenario(
    "golden-inspect-queues",
    "inspect queues (the transcript's 22 queues, recreated; paging; limit and offset errors) "
    "and inspect queue (unknown, created by a lease, bad name).",
    wq("A", _ADDS, _ADDS_OK, label="setup: add the ready jobs of the golden queues"),
    timed(wq("A", _SCHED_LATER % b"<now+1d>", OK, label="setup: schedule one sched2 job later"),
          at(86400, _SCHED_LATER)),
    wq("A", b"lease " + " ".join(_EMPTY).encode() + b" 0\r\n", TIMEOUT,
       label="setup: create the empty golden queues by leasing from them"),
    wq("A", b"inspect queues 0 100\r\n",
       b"+OK 22\r\n" + b"".join(queue(*q) for q in GOLDEN_QUEUES), label="inspect queues 0 100"),
    wq("A", b"inspect queues 2 2\r\n", b"+OK 2\r\n" + queue("crlf", 1, 0) + queue("failq", 0, 0),
       label="inspect queues 2 2"),
    wq("A", b"inspect queues 1000 10\r\n", b"+OK 0\r\n", label="inspect queues 1000 10 -> OK 0"),
    wq("A", b"inspect queues 0 0\r\n", CE("Invalid limit"), label="inspect queues 0 0"),
    wq("A", b"inspect queues 0 101\r\n", CE("Invalid limit"), label="inspect queues 0 101"),
    wq("A", b"inspect queues -1 10\r\n", CE("Invalid cursor offset"),
       label="inspect queues -1 10"),
    wq("A", b"inspect queue never-seen\r\n", NOT_FOUND, label="inspect queue unknown"),
    wq("A", b"inspect queue nothing\r\n", b"+OK 1\r\n" + queue("nothing", 0, 0),
       label="inspect queue created implicitly by lease"),
    wq("A", b"inspect queue bad!name\r\n", CE("Invalid Name"), label="inspect queue bad name"),
)

JOBS = scenario(
    "golden-inspect-jobs",
    "inspect jobs (priority order, paging, unknown queue, bad limit), inspect job (unknown, "
    "non-v4, bad id; a payload with CRLF: W3), inspect argument errors, inspect "
    "scheduled-jobs on a queue without any.",
    wq("A", b"add " + U(13) + b" crlf 1000 60000 6\r\na\r\nb\r\n\r\n", OK,
       label="setup: payload with embedded CRLF ok"),
    wq("A", b"add " + U(35) + b" insq 1000 60000 1\r\na\r\n"
            b"add " + U(36) + b" insq 1000 60000 1 -priority=5\r\nb\r\n", OK + OK,
       label="add two jobs to insq"),
    wq("A", b"inspect jobs insq 0 10\r\n",
       jobs(entry(U(36), "insq", payload=b"b", priority=5), entry(U(35), "insq", payload=b"a")),
       label="inspect jobs insq 0 10"),
    wq("A", b"inspect jobs insq 1 10\r\n", jobs(entry(U(35), "insq", payload=b"a")),
       label="inspect jobs insq 1 10"),
    wq("A", b"inspect jobs insq 5 10\r\n", b"+OK 0\r\n", label="inspect jobs insq 5 10"),
    wq("A", b"inspect jobs nope 0 10\r\n", NOT_FOUND, label="inspect jobs unknown queue"),
    wq("A", b"inspect jobs insq 0 0\r\n", CE("Invalid limit"), label="inspect jobs bad limit"),
    wq("A", b"inspect job " + U(0x47) + b"\r\n", NOT_FOUND, label="inspect job unknown"),
    wq("A", b"inspect job " + DOC_ID + b"\r\n", NOT_FOUND,
       label="inspect job non-v4 (no v4 check here)"),
    wq("A", b"inspect job xyz\r\n", CE("Invalid ID"), label="inspect job bad id"),
    wq("A", b"inspect\r\n", CE("Invalid command args"), label="inspect (no object)"),
    wq("A", b"inspect foo\r\n", CE("Unknown command"), label="inspect foo"),
    # The reference writes the payload's CRLFs raw: the entry's 12 lines end early, and
    # 'state' and 'created' arrive as two stray lines (frames of their own).
    wq("A", b"inspect job " + U(13) + b"\r\n", jobs(entry(U(13), "crlf", payload=b"a\r\nb\r\n")),
       label="inspect job with payload containing CRLF (breaks framing)"),
    wq("A", b"inspect scheduled-jobs insq 0 10\r\n", b"+OK 0\r\n",
       label="inspect scheduled-jobs on queue without scheduled jobs"),
)

SERVER = scenario(
    "golden-inspect-server",
    "inspect server with two clients and one TTL-evicted job (the reference announces 2 keys "
    "and sends 3: W2), its argument error, after a client left, and a command line that "
    "arrives in two parts. active-clients is masked: it depends on when the server notices "
    "the closed connection.",
    wq("A", b"add " + U(24) + b" ttlq 1000 300 1\r\nx\r\n", OK,
       label="setup: add ttl=300 (evicted before inspect server)"),
    sleep(0.6),
    wq("B", b"inspect queues 1000 10\r\n", b"+OK 0\r\n", label="setup: a second client"),
    wq("A", b"inspect server\r\n", server(2, 1, announced=2),
       label="inspect server (NB key-count 2 but 3 keys follow)"),
    wq("A", b"inspect server x\r\n", CE("Invalid command args"), label="inspect server extra arg"),
    close("B"),
    sleep(0.2),
    wq("A", b"inspect server\r\n", server(1, 1, announced=2),
       label="inspect server after TTL eviction"),
    wq_window("A", b"inspect ser", 0.5,
              label="partial line then wait (no timeout on server side; nothing returned)"),
    wq("A", b"ver\r\n", server(1, 1, announced=2), label="rest of line"),
    masks=(mask_active_clients,),
)

CONNECTION = scenario(
    "golden-connection",
    "A line ending in a bare LF and a line longer than 1,058,576 bytes close the connection "
    "without a reply; a CR inside a line does not end it.",
    wq_eof("B", b"inspect server\n",
           label="bare LF terminator -> server closes connection silently"),
    wq("A", b"inspect\rserver\r\n", CE("Unknown command"), label="CR in middle"),
    wq_eof("C", b"a" * 1058586, label="line of 1058586 bytes without newline (MaxRead=1058576)",
           timeout=10.0),
    wq("A", b"inspect queues 1000 10\r\n", b"+OK 0\r\n",
       label="the first connection still works"),
)

SCENARIOS = (QUEUES, JOBS, SERVER, CONNECTION)
