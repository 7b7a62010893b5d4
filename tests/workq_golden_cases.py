"""The workq golden transcript as data: every case, with what jobgate must answer.

../shared/reference/workq-golden.txt (next to this checkout: the repository's parent directory
holds ``shared/``) is what the reference workq server answered to a raw-socket probe, byte for
byte. It is parsed here at import into `CASES`, in transcript order: section, title, the request
bytes (``C>``), the reference's reply bytes (``S<``, and ``S(c2)<`` / ``S(c3)<`` of helper
connections), whether the reference closed the connection, and the probe's timing.

Each `Case` also says what jobgate must answer (`expected`, `expected_helpers`) and how the
sans-IO replay of tests/test_workq_golden.py reproduces the probe's run:

- `sleep_before_ms`: the probe slept before the case ("after TTR", "after TTL", a second lease
  once the first lease's TTR ran out); the transcript's elapsed times leave these sleeps out, and
  the created timestamps show them. Before "schedule +2s" the sleep puts the replay's clock on
  the transcript's one exact time anchor (see SLEEPS).
- `duration_ms`: how long the case took for the probe (its "(N ms incl. ...)" line); the replay's
  clock moves by that much before the next case (one exception on a TTR boundary: DURATIONS).
- `actions`: what other connections did during the case, which the transcript only names in the
  title (a worker leasing and completing a `run`'s job, a second client completing a job whose
  result is awaited, two `result` waiters): (at ms after the case starts, connection, bytes,
  the reply that connection must get).
- `new_conn`: the case starts on a new connection (the reference closed the previous one).
- `close_after`: helper connections the probe closed only after this case (c3, the second
  `result` waiter, was still open at the first `inspect server`: ``active-clients 2``).

`created` and `started` timestamps are masked (`mask`): they differ per run. Where jobgate
deliberately differs from the reference (its numbered list of workq deviations; see
protocols/workq/replies.py and core/outcomes.py), `expected` holds jobgate's bytes, written out
explicitly, and `diff` the difference's number:

1. max-fails is enforced: `fail` requeues (state 3, fails 1) while fails < max-fails.
2. `inspect server` announces the 3 keys it sends (``server 3``).
3. a payload containing CR or LF is left out of inspect (11 keys) instead of breaking framing.
4. `lease <name> 0` returns a ready job (non-blocking poll).
5. every concurrent `result` waiter gets the result.

Difference 6 (a payload's trailing CRLF is checked whole even when split across reads) is what
the replay's ``bytes`` mode exercises; 7 (derived uids refused) and 8 (lease across names takes
the best job) have no case in the transcript.
"""
from __future__ import annotations

import ast
import calendar
import os
import re
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A copy of ../shared/reference/workq-golden.txt kept in the repository, so a clone anywhere
# runs every case (a missing file is an error, never a silent skip).
GOLDEN = os.path.join(REPO, "tests", "data", "workq-golden.txt")

MASK = b"<masked>"
_STAMP = re.compile(rb"\b(created|started) \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def mask(data: bytes) -> bytes:
    """`data` with every `created <time>` / `started <time>` value replaced by <masked>."""
    return _STAMP.sub(rb"\1 " + MASK, data)


@dataclass(frozen=True)
class Action:
    """What a helper connection sends `at_ms` after its case starts, and must get back."""

    at_ms: int
    conn: str
    request: bytes
    reply: bytes


@dataclass
class Case:
    """One transcript case (see the module docstring for the replay fields)."""

    index: int
    section: str
    title: str
    request: bytes | None            # None: only helper connections act in this case
    golden: bytes                     # the reference's reply on the main connection
    closed: bool                      # the reference closed the connection after answering
    elapsed_ms: int | None
    idle_ms: int | None
    golden_helpers: dict = field(default_factory=dict)   # conn -> reference reply bytes
    expected: bytes = b""             # jobgate's reply on the main connection (masked)
    expected_helpers: dict = field(default_factory=dict)  # conn -> jobgate's reply (masked)
    diff: int | None = None           # number of the deliberate difference, if any
    new_conn: bool = False
    sleep_before_ms: int = 0
    duration_ms: int = 0
    actions: tuple = ()
    close_after: tuple = ()

    @property
    def key(self) -> str:
        """A readable, unique test id: index, section and title."""
        sec = self.section.split(" ")[0]
        return f"{self.index:03d}-{sec}-{self.title}"


# =============================================================== transcript parsing
_NODES = (ast.Expression, ast.BinOp, ast.Add, ast.Mult, ast.Constant)


def literal(expr: str) -> bytes:
    """Evaluate a transcript request: bytes literals joined with `+`, repeated with `* int`."""
    tree = ast.parse(expr, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise ValueError(f"unexpected syntax in {expr!r}")
    return eval(compile(tree, "<golden>", "eval"), {"__builtins__": {}})  # noqa: S307 (checked)


_REPLY = re.compile(r"^S(?:\((\w+)\))?< (b'.*')(  \[connection closed by server\])?$")
_ELAPSED = re.compile(r"^\s+\((\d+) ms incl\. (\d+) ms idle-wait\)$")


def parse_golden(path: str = GOLDEN) -> tuple[int, list[Case]]:
    """(start wall ms of the probe run, the cases in transcript order)."""
    with open(path, encoding="ascii") as f:
        lines = f.read().splitlines()
    m = re.search(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})Z", lines[0])
    start_ms = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) * 1000
    cases: list[Case] = []
    section = ""
    for raw in lines[1:]:
        if raw.startswith("################ "):
            section = raw[len("################ "):]
        elif raw.startswith("## "):
            cases.append(Case(len(cases), section, raw[3:], None, b"", False, None, None))
        elif raw.startswith("C> "):
            cases[-1].request = literal(raw[3:])
        elif raw.startswith("S"):
            r = _REPLY.match(raw)
            assert r, raw
            data = ast.literal_eval(r.group(2))
            if r.group(1):
                cases[-1].golden_helpers[r.group(1)] = data
            else:
                cases[-1].golden = data
                cases[-1].closed = bool(r.group(3))
        elif _ELAPSED.match(raw):
            e = _ELAPSED.match(raw)
            cases[-1].elapsed_ms, cases[-1].idle_ms = int(e.group(1)), int(e.group(2))
    return start_ms, cases


# =========================================================== jobgate's expectations
def uid(n: int) -> bytes:
    """The transcript's job id 11111111-1111-4111-8111-<n as 12 hex digits>."""
    return b"11111111-1111-4111-8111-%012x" % n


def _inspect(n: int, keys: list[bytes]) -> bytes:
    return b"+OK 1\r\n%s %d\r\n" % (uid(n), len(keys)) + b"".join(k + b"\r\n" for k in keys)


def _server(clients: int) -> bytes:
    return (b"+OK 1\r\nserver 3\r\nactive-clients %d\r\nevicted-jobs 1\r\nstarted <masked>\r\n"
            % clients)


def _lease(n: int, name: bytes, ttr: int, payload: bytes) -> bytes:
    return b"+OK 1\r\n%s %s %d %d\r\n%s\r\n" % (uid(n), name, ttr, len(payload), payload)


def _result(n: int, ok: int, result: bytes) -> bytes:
    return b"+OK 1\r\n%s %d %d\r\n%s\r\n" % (uid(n), ok, len(result), result)


#: title -> (difference number, jobgate's reply on the main connection).
DIFFERENCES = {
    "inspect: state 2, fails 0": (1, _inspect(0xf, [
        b"name failq", b"ttr 1000", b"ttl 60000", b"payload-size 1", b"payload x",
        b"max-attempts 0", b"attempts 1", b"max-fails 3", b"fails 1", b"priority 0",
        b"state 3", b"created <masked>"])),
    "lease failq again -> TIMEOUT (not retried)": (1, _lease(0xf, b"failq", 1000, b"x")),
    "result failed job": (1, b"-TIMEOUT\r\n"),   # leased again, no result yet
    "inspect server (NB key-count 2 but 3 keys follow)": (2, _server(2)),
    "inspect server after TTL eviction": (2, _server(1)),
    "rest of line": (2, _server(1)),
    "inspect job with payload containing CRLF (breaks framing)": (3, _inspect(0xd, [
        b"name crlf", b"ttr 1000", b"ttl 60000", b"payload-size 6", b"max-attempts 0",
        b"attempts 0", b"max-fails 0", b"fails 0", b"priority 0", b"state 0",
        b"created <masked>"])),
    "add job then lease with timeout 0 (job available)": (
        4, b"+OK\r\n" + _lease(0x13, b"zero", 1000, b"x")),
}

CONCURRENT = "two concurrent 'result <id> 1000' waiters on 2 connections, then complete"
#: title -> (difference number, {helper connection: jobgate's reply}).
HELPER_DIFFERENCES = {CONCURRENT: (5, {"c2": _result(0x22, 1, b"done"),
                                       "c3": _result(0x22, 1, b"done")})}

#: title -> ms the probe slept before sending the case (see the module docstring).
SLEEPS = {
    "after TTR: state 2 (FAILED), attempts 1": 300,
    "after TTR: state 3 (PENDING), attempts 1": 300,
    "lease #2": 300,
    "after 2 timeouts: FAILED": 300,
    "after TTL: NOT-FOUND": 400,
    # The one exact anchor: the scheduled lease (due 02:42:48) answered 305 ms after it was sent,
    # so it was sent at 02:42:47.695; the recorded durations before it leave 1361 ms unaccounted.
    "schedule +2s": 1361,
}

#: title -> the case's duration in the replay when the recorded one sits on a TTR boundary:
#: after "lease again" (TTR 200) the reference still showed the job leased 200 ms later (its
#: TTR timer fires a little after the deadline); the replay's clock expires it exactly at 200.
DURATIONS = {"lease again": 150}


def _worker_run(n: int, name: bytes, verb: bytes, result: bytes) -> tuple:
    lease = Action(50, "worker", b"lease %s 1000\r\n" % name, _lease(n, name, 1000, b"ping"))
    done = Action(150, "worker", b"%s %s %d\r\n%s\r\n" % (verb, uid(n), len(result), result),
                  b"+OK\r\n")
    return lease, done


#: title -> what helper connections did during the case (the titles name it).
ACTIONS = {
    "run with worker (worker completes 'pong')": _worker_run(0x1d, b"runq", b"complete", b"pong"),
    "run with worker failing": _worker_run(0x1e, b"runq", b"fail", b"bad"),
    "run ttr=600 wait=200; worker leases but never completes -> TIMEOUT at ~TTR deadline": (
        Action(1, "worker", b"lease runq2 1000\r\n", _lease(0x25, b"runq2", 600, b"x")),),
    "result blocks until completed by another connection (~300ms)": (
        Action(300, "worker", b"complete %s 4\r\ndone\r\n" % uid(0x21), b"+OK\r\n"),),
    CONCURRENT: (
        Action(0, "c2", b"result %s 1000\r\n" % uid(0x22), _result(0x22, 1, b"done")),
        Action(0, "c3", b"result %s 1000\r\n" % uid(0x22), _result(0x22, 1, b"done")),
        Action(100, "worker", b"complete %s 4\r\ndone\r\n" % uid(0x22), b"+OK\r\n")),
}

#: helper connection -> title of the case after which the probe closed it (default: at the
#: end of the case that used it).
KEEP_OPEN = {"c3": "inspect server (NB key-count 2 but 3 keys follow)"}

#: Duration of the concurrent-waiters case, which has no timing line: the reference's second
#: waiter answered -TIMEOUT after its 1000 ms wait.
CONCURRENT_MS = 1100


def _unique_titles(cases: list[Case], titles) -> None:
    for t in titles:
        n = sum(c.title == t for c in cases)
        assert n == 1, f"golden title {t!r} found {n} times"


def build(path: str = GOLDEN) -> tuple[int, list[Case]]:
    """Parse the transcript and fill in jobgate's expectations and the replay fields."""
    start_ms, cases = parse_golden(path)
    _unique_titles(cases, [*DIFFERENCES, *HELPER_DIFFERENCES, *SLEEPS, *ACTIONS,
                           *DURATIONS, *KEEP_OPEN.values()])
    closes: dict[str, list[str]] = {}
    for conn, title in KEEP_OPEN.items():
        closes.setdefault(title, []).append(conn)
    prev_closed = True   # the first case opens the first connection
    for c in cases:
        c.new_conn = prev_closed
        prev_closed = c.closed
        c.expected = mask(c.golden)
        c.expected_helpers = {k: mask(v) for k, v in c.golden_helpers.items()}
        if c.title in DIFFERENCES:
            c.diff, c.expected = DIFFERENCES[c.title]
        if c.title in HELPER_DIFFERENCES:
            c.diff, c.expected_helpers = HELPER_DIFFERENCES[c.title]
        c.sleep_before_ms = SLEEPS.get(c.title, 0)
        c.duration_ms = DURATIONS.get(c.title, c.elapsed_ms if c.elapsed_ms is not None
                                      else CONCURRENT_MS if c.title == CONCURRENT else 0)
        c.actions = ACTIONS.get(c.title, ())
        c.close_after = tuple(closes.get(c.title, ()))
    return start_ms, cases


START_MS, CASES = build()
