"""The deliberate differences between jobgate and the reference workq server, as data.

Each difference W1..W8 has an id, a title, the reason, and the exact scenario steps where it
shows, with the bytes jobgate answers there (``Case``: scenario, step label, outcome). The
scenarios themselves hold the reference server's bytes; by default the suite expects jobgate's
bytes at these steps (and nothing else differs), with ``--reference`` it expects the
reference's bytes everywhere (docs/workq-conformance.md).

Nothing is masked or ignored wholesale: at a listed step jobgate must answer exactly the bytes
given here; any other difference is reported as DIFFERENT.
"""

from __future__ import annotations

from .framing import END_OK, END_SILENT, Outcome
from .known_differences import Case, Difference
from .known_differences import check_cases_exist as _check_cases_exist
from .known_differences import overrides_for as _overrides_for
from .workq_scenarios_common import CE, OK, TIMEOUT, U, entry, frames, jobs, leased, result, server

__all__ = ["DIFFERENCES", "overrides_for", "check_cases_exist", "ids"]


def _case(scenario: str, step: str, reply: bytes, end: str = END_OK) -> Case:
    return Case(scenario, step, Outcome(frames(reply), end))


_TWO = "two concurrent 'result <id> 1000' waiters on 2 connections, then complete"
_DONE = result(U(34), True, b"done")
_DUP = CE("Duplicate job")

DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "W1", "max-fails is enforced",
        "The spec documents -max-fails (retry on explicit failures) and the reference ignores "
        "it: every fail is final and fails stays 0. jobgate enforces it: a fail requeues the "
        "job (state 3, fails + 1) while fails < max-fails, and fails it for good (state 2, with "
        "the result) once fails reaches max-fails (max-fails 0 or 1: at the first fail). Here "
        "max-fails=3: the job is leased again and has no result yet.",
        cases=(
            _case("golden-fail-delete", "inspect: state 2, fails 0",
                  jobs(entry(U(15), "failq", attempts=1, max_fails=3, fails=1, state=3))),
            _case("golden-fail-delete", "lease failq again -> TIMEOUT (not retried)",
                  leased(U(15), "failq", 1000, b"x")),
            _case("golden-fail-delete", "result failed job", TIMEOUT),
        ),
    ),
    Difference(
        "W2", "inspect server announces its 3 keys",
        "The reference announces `server 2` and sends 3 keys (active-clients, evicted-jobs, "
        "started), so a client honouring the key count reads `started` as the next reply. "
        "jobgate announces `server 3`.",
        cases=(
            _case("golden-inspect-server", "inspect server (NB key-count 2 but 3 keys follow)",
                  server(2, 1)),
            _case("golden-inspect-server", "inspect server after TTL eviction", server(1, 1)),
            _case("golden-inspect-server", "rest of line", server(1, 1)),
        ),
    ),
    Difference(
        "W3", "inspect leaves out a payload that holds CR or LF",
        "The reference writes `payload <bytes>` raw, so a payload with CRLF breaks the line "
        "framing (the entry's key lines end early and the rest arrives as stray lines). The "
        "`payload` key line cannot carry such bytes: jobgate leaves it out (key count 11, or 12 "
        "with `time`); payload-size is still there and lease returns the payload intact.",
        cases=(
            _case("golden-inspect-jobs",
                  "inspect job with payload containing CRLF (breaks framing)",
                  jobs(entry(U(13), "crlf", payload=b"a\r\nb\r\n", show_payload=False))),
        ),
    ),
    Difference(
        "W4", "lease with wait-timeout 0 is a non-blocking poll",
        "The reference answers `lease <name> 0` with -TIMEOUT even when a job is ready (its "
        "timer fires before the queue is read). jobgate returns a ready job and answers "
        "-TIMEOUT only when there is none.",
        cases=(
            _case("golden-lease", "add job then lease with timeout 0 (job available)",
                  OK + leased(U(19), "zero", 1000, b"x")),
        ),
    ),
    Difference(
        "W5", "every result waiter gets the result",
        "With two connections waiting on `result <id> <timeout>`, the reference hands the "
        "result to one of them (through a one-slot Go channel: the first waiter) and the "
        "other times out. jobgate answers every waiter.",
        cases=(
            _case("golden-result-two-waiters", _TWO + " (c3)", _DONE),
        ),
    ),
    Difference(
        "W6", "a payload terminator split across reads is still read as CRLF",
        "The reference checks the 2 bytes after a payload with a single bufio Read, which "
        "returns only what is buffered: when the CR and the LF arrive in different reads it "
        "answers Invalid payload size (then the lone LF closes the connection). jobgate waits "
        "for both bytes, so the outcome does not depend on TCP segmentation.",
        cases=(
            _case("extra-payload-crlf-split", "complete with the result terminator cut after CR",
                  b"", END_SILENT),
            _case("extra-payload-crlf-split", "the LF of the terminator", OK, END_SILENT),
            _case("extra-payload-crlf-split", "result of the job", result(U(0x301), True, b"x")),
        ),
    ),
    Difference(
        "W7", "derived ids are reserved",
        "jobgate addresses jobs created through other dialects (which have no client uid) by "
        "a derived uid 6a6f6267-6174-4xxx-8xxx-xxxxxxxxxxxx encoding the job id "
        "(core/model.py derived_uid). add, schedule and run with an id of that form answer "
        "Duplicate job, so a workq client can never take the uid of another dialect's job. "
        "The reference accepts them as any v4 id.",
        cases=(
            _case("extra-derived-uid", "add with a derived id", _DUP),
            _case("extra-derived-uid", "schedule with a derived id", _DUP),
            _case("extra-derived-uid", "run with a derived id", _DUP),
        ),
    ),
    Difference(
        "W8", "lease over several names takes the best job",
        "Not a reference bug: the spec says several names are served 'uniformly by random "
        "selection' and the reference takes whichever queue answers first. jobgate takes the "
        "best job across the names (highest priority, then oldest), deterministically.",
        cases=(
            _case("extra-lease-several-names", "first lease over three names",
                  leased(U(0x402), "multi-y", 1000, b"b")),
            _case("extra-lease-several-names", "second lease over three names",
                  leased(U(0x403), "multi-z", 1000, b"c")),
            _case("extra-lease-several-names", "third lease over three names",
                  leased(U(0x401), "multi-x", 1000, b"a")),
        ),
    ),
)


def ids() -> list[str]:
    """The difference ids, in order (W1..W8)."""
    return [d.id for d in DIFFERENCES]


def overrides_for(scenario: str) -> dict[str, tuple[str, Outcome]]:
    """jobgate's expectations in ``scenario``: step label -> (difference id, outcome)."""
    return _overrides_for(scenario, DIFFERENCES)


def check_cases_exist(scenarios) -> list[str]:
    """Problems with the case list (a case naming a missing scenario or step, or a step that
    reads nothing); empty when every case refers to a real reading step."""
    return _check_cases_exist(scenarios, DIFFERENCES)
