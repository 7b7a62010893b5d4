"""workq scenarios beyond the golden transcript, one per deliberate difference the transcript
does not show: a payload terminator split across reads (W6), ids of the derived form jobgate
reserves for other dialects' jobs (W7), lease over several names (W8).

The expectations written here are the reference server's, derived from its source (iamduo/workq:
int/prot/prot.go readPayload, int/job/controller.go Lease) rather than recorded; jobgate's
answers at the differing steps are in ``workq_known_differences``.
"""

from __future__ import annotations

from .framing import END_EOF
from .scenario import sleep
from .workq_scenarios_common import CE, OK, TIMEOUT, U, at, leased, scenario, timed, wq, wq_window

__all__ = ["SCENARIOS"]

SPLIT = U(0x301)

SPLIT_CRLF = scenario(
    "extra-payload-crlf-split",
    "complete whose result terminator arrives in two writes ('x\\r', then '\\n'). The "
    "reference reads the terminator with one bufio Read, gets only '\\r', answers Invalid "
    "payload size and then closes on the bare '\\n'; jobgate waits for both bytes (W6).",
    wq("A", b"add " + SPLIT + b" split 1000 60000 1\r\nx\r\n", OK, label="setup: add a job"),
    wq_window("A", b"complete " + SPLIT + b" 1\r\nx\r", 0.3, CE("Invalid payload size"),
              label="complete with the result terminator cut after CR"),
    wq_window("A", b"\n", 0.3, end=END_EOF, label="the LF of the terminator"),
    wq("B", b"result " + SPLIT + b" 0\r\n", TIMEOUT, label="result of the job"),
    source="extra",
)

D2, D3, D4 = (b"6a6f6267-6174-4000-8000-00000000000%d" % i for i in (2, 3, 4))
_NOT_DERIVED = b"6a6f6267-6174-4000-9000-000000000002"   # variant 9: not the derived form
_SCHED = b"schedule " + D3 + b" other 1000 60000 %s 1\r\nx\r\n"

DERIVED = scenario(
    "extra-derived-uid",
    "add, schedule and run with ids of the form 6a6f6267-6174-4xxx-8xxx-... (jobgate's uids "
    "for jobs created through other dialects): the reference takes them as any v4 id; "
    "jobgate answers Duplicate job (W7). A v4 id with another variant nibble is accepted.",
    wq("A", b"add " + D2 + b" other 1000 60000 1\r\nx\r\n", OK, label="add with a derived id"),
    timed(wq("A", _SCHED % b"<now+1d>", OK, label="schedule with a derived id"),
          at(86400, _SCHED)),
    wq("A", b"run " + D4 + b" other 1000 100 1\r\nx\r\n", TIMEOUT,
       label="run with a derived id"),
    wq("A", b"add " + _NOT_DERIVED + b" other 1000 60000 1\r\nx\r\n", OK,
       label="add with a similar id that is not derived"),
    source="extra",
)

QA, QB, QC = U(0x401), U(0x402), U(0x403)
_A = leased(QA, "multi-x", 1000, b"a")
_B = leased(QB, "multi-y", 1000, b"b")
_C = leased(QC, "multi-z", 1000, b"c")
_LEASE = b"lease multi-x multi-y multi-z 1000\r\n"

SEVERAL = scenario(
    "extra-lease-several-names",
    "lease over three names that all hold a ready job: the reference takes whichever queue's "
    "goroutine answers first (any of them); jobgate takes the best job across the names: "
    "highest priority, then oldest (W8).",
    wq("A", b"add " + QA + b" multi-x 1000 60000 1 -priority=1\r\na\r\n"
            b"add " + QB + b" multi-y 1000 60000 1 -priority=5\r\nb\r\n", OK + OK,
       label="setup: add priority 1 to multi-x, priority 5 to multi-y"),
    sleep(0.05),   # multi-z's job is younger
    wq("A", b"add " + QC + b" multi-z 1000 60000 1 -priority=5\r\nc\r\n", OK,
       label="setup: add priority 5 to multi-z"),
    wq("A", _LEASE, _B, alt=(_A, _C), label="first lease over three names"),
    wq("A", _LEASE, _C, alt=(_A, _B), label="second lease over three names"),
    wq("A", _LEASE, _A, alt=(_B, _C), label="third lease over three names"),
    wq("A", b"result " + QA + b" 0\r\n", TIMEOUT, label="the leased jobs have no result yet"),
    source="extra",
)

SCENARIOS = (SPLIT_CRLF, DERIVED, SEVERAL)
