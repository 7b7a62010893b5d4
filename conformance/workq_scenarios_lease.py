"""workq scenarios from the golden transcript, section "lease / complete / fail / result /
delete": a job's way through lease and complete, results, fail (W1 for jobgate), delete, the
lease arguments, priority order and several names.

Steps labelled ``setup: ...`` recreate the state the golden case found on the reference server
(the transcript ran every case on one server); their expectations are the reference's answers
to the same bytes elsewhere in the transcript.
"""

from __future__ import annotations

from .workq_scenarios_common import (CE, NOT_FOUND, OK, TIMEOUT, U, entry, jobs, leased, result,
                                     scenario, waits, wq, wq_eof, wq_window)

__all__ = ["SCENARIOS"]

DOC_ID = b"6ba7b810-9dad-11d1-80b4-00c04fd430c4"   # the spec's example: a UUIDv1
ONE = U(1)

LEASE_COMPLETE = scenario(
    "golden-lease-complete",
    "lease takes the highest priority; inspect while leased and once completed; complete, "
    "duplicate results, result and its argument errors; a result shorter than declared "
    "waits for more bytes; complete of a never-leased job.",
    wq("A", b"add " + U(0x101) + b" ping 1000 60000 1\r\nx\r\n", OK,
       label="setup: add a priority 0 job to ping first"),
    wq("A", b"add " + ONE + b" ping 1000 60000 4 -priority=10 -max-attempts=3 -max-fails=1\r\n"
            b"pong\r\n", OK, label="setup: add ok with flags (priority 10)"),
    wq("A", b"lease ping 1000\r\n", leased(ONE, "ping", 1000, b"pong"),
       label="lease highest priority first"),
    wq("A", b"inspect job " + ONE + b"\r\n",
       jobs(entry(ONE, "ping", payload=b"pong", max_attempts=3, attempts=1, max_fails=1,
                  priority=10, state=4)),
       label="inspect job while leased (state 4, attempts 1)"),
    wq("A", b"complete " + ONE + b" 4\r\npong\r\n", OK, label="complete"),
    wq("A", b"complete " + ONE + b" 4\r\npong\r\n", CE("Duplicate result"),
       label="complete again -> duplicate result"),
    wq("A", b"fail " + ONE + b" 1\r\nx\r\n", CE("Duplicate result"),
       label="fail after complete -> duplicate result"),
    wq("A", b"result " + ONE + b" 1000\r\n", result(ONE, True, b"pong"),
       label="result completed"),
    wq("A", b"result " + U(0x46) + b" 1000\r\n", NOT_FOUND, label="result unknown id"),
    wq("A", b"result " + DOC_ID + b" 1000\r\n", CE("Invalid ID"), label="result non-v4 id"),
    wq("A", b"result " + ONE + b" abc\r\n", CE("Invalid wait timeout"),
       label="result bad timeout"),
    wq("A", b"result " + ONE + b" 86400001\r\n", CE("Invalid wait timeout"),
       label="result timeout 86400001"),
    wq("A", b"result " + ONE + b" 10 -a=1\r\n", CE("Invalid command args"),
       label="result with flag"),
    wq("A", b"complete " + U(0x46) + b" 1\r\nx\r\n", NOT_FOUND, label="complete unknown id"),
    wq("A", b"complete " + DOC_ID + b" 1\r\nx\r\n", CE("Invalid ID"),
       label="complete non-v4 id"),
    # 'x\r\n' is the 3-byte result; the server then waits for the 2 terminator bytes.
    wq_window("A", b"complete " + ONE + b" 3\r\nx\r\n", 0.3,
              label="complete result size mismatch (3 declared, 1 sent): server waits for "
                    "more bytes, no reply"),
    wq("A", b"fail " + ONE + b" x\r\nx\r\n",
       CE("Invalid payload size") + CE("Unknown command") + CE("Unknown command"),
       label="...next bytes 'fa' consumed as the expected CRLF -> complete's error; "
             "rest of line desyncs"),
    wq("A", b"fail " + ONE + b" x\r\nx\r\n", CE("Invalid result size") + CE("Unknown command"),
       label="fail result size not int"),
    # 'abc' is the result, 'd\r' is not CRLF (error), then the bare '\n' closes the connection.
    wq_eof("B", b"fail " + ONE + b" 3\r\nabcd\r\n", CE("Invalid result size"),
           label="fail result size mismatch"),
    wq("A", b"add " + U(10) + b" ping 1000 60000 1 -foo=1\r\nx\r\n", OK,
       label="setup: add a job that is never leased"),
    wq("A", b"complete " + U(10) + b" 2\r\nok\r\n", OK,
       label="complete a NEW (never leased) job -> OK"),
    wq("A", b"result " + U(10) + b" 0\r\n", result(U(10), True, b"ok"), label="result of it"),
    wq("A", b"inspect job " + ONE + b"\r\n",
       jobs(entry(ONE, "ping", payload=b"pong", max_attempts=3, attempts=1, max_fails=1,
                  priority=10, state=1)),
       label="inspect job of completed job (state 1)"),
)

F = U(15)

FAIL_DELETE = scenario(
    "golden-fail-delete",
    "fail with max-fails=3 (the reference fails the job for good at once; jobgate requeues "
    "it: W1), then delete and its argument errors.",
    wq("A", b"add " + F + b" failq 1000 60000 1 -max-fails=3\r\nx\r\n", OK,
       label="add for fail test with max-fails=3"),
    wq("A", b"lease failq 1000\r\n", leased(F, "failq", 1000, b"x"), label="lease it"),
    wq("A", b"fail " + F + b" 4\r\noops\r\n", OK,
       label="fail it (max-fails NOT enforced: job becomes FAILED immediately)"),
    wq("A", b"inspect job " + F + b"\r\n",
       jobs(entry(F, "failq", attempts=1, max_fails=3, state=2)),
       label="inspect: state 2, fails 0"),
    wq("A", b"lease failq 200\r\n", TIMEOUT, label="lease failq again -> TIMEOUT (not retried)"),
    wq("A", b"result " + F + b" 0\r\n", result(F, False, b"oops"), label="result failed job"),
    wq("A", b"delete " + F + b"\r\n", OK, label="delete"),
    wq("A", b"delete " + F + b"\r\n", NOT_FOUND, label="delete again"),
    wq("A", b"delete " + DOC_ID + b"\r\n", OK, label="delete non-v4"),
    wq("A", b"delete xyz\r\n", CE("Invalid ID"), label="delete bad id"),
    wq("A", b"delete " + F + b" x\r\n", CE("Invalid command args"), label="delete with 2 args"),
)

LEASE_ARGS = scenario(
    "golden-lease",
    "lease: waiting on an empty queue (300 ms), timeout 0, argument errors, priority order "
    "of pipelined leases, timeout 0 with a job ready (W4), several names.",
    waits("A", b"lease nothing 300\r\n", 0.2, TIMEOUT,
          label="lease no jobs -> TIMEOUT after wait"),
    wq("A", b"lease nothing 0\r\n", TIMEOUT, label="lease timeout 0 on empty"),
    wq("A", b"lease 100\r\n", CE("Invalid command args"), label="lease missing timeout (argc<3)"),
    wq("A", b"lease ping 100 -x=1\r\n", CE("Invalid command args"), label="lease with flag"),
    wq("A", b"lease bad!name 100\r\n", CE("Invalid Name"), label="lease invalid name"),
    wq("A", b"lease ping abc\r\n", CE("Invalid wait timeout"), label="lease timeout abc"),
    wq("A", b"lease ping 86400001\r\n", CE("Invalid wait timeout"),
       label="lease timeout 86400001"),
    wq("A", b"add " + U(16) + b" order 1000 60000 2\r\np0\r\n"
            b"add " + U(17) + b" order 1000 60000 3 -priority=10\r\np10\r\n"
            b"add " + U(18) + b" order 1000 60000 3 -priority=-5\r\np-5\r\n",
       OK + OK + OK, label="add p0,p10,p-5 for ordering"),
    wq("A", b"lease order 100\r\n" * 3,
       leased(U(17), "order", 1000, b"p10") + leased(U(16), "order", 1000, b"p0")
       + leased(U(18), "order", 1000, b"p-5"), label="pipelined 3 leases (priority order)"),
    wq("A", b"add " + U(19) + b" zero 1000 60000 1\r\nx\r\nlease zero 0\r\n", OK + TIMEOUT,
       label="add job then lease with timeout 0 (job available)"),
    wq("A", b"add " + U(20) + b" multi-b 1000 60000 1\r\nb\r\n"
            b"lease multi-a multi-b multi-c 500\r\n",
       OK + leased(U(20), "multi-b", 1000, b"b"), label="lease multiple names"),
)

SCENARIOS = (LEASE_COMPLETE, FAIL_DELETE, LEASE_ARGS)
