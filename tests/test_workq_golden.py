"""Sans-IO golden-bytes tests for the workq parser and session.

Every case of ../shared/reference/workq-golden.txt (what the reference workq server answered,
parsed by tests/workq_golden_cases.py) is replayed through `protocols.workq.Parser` + `Session`
on an `Engine` with a `ManualClock` and an in-memory `Journal`: no sockets, no sleeping. Cases
depend on the state earlier ones left (ids, leases, TTR expiries), so each test replays the
transcript from the start up to its case (fed whole), then feeds the case three ways:

- ``whole``:    the request in one `feed()` call;
- ``bytes``:    one byte per `feed()` call (requests over 64 KiB: their first 4 KiB and last
  256 bytes one byte at a time, the middle in 64 KiB chunks, so the 1 MiB cases stay fast);
- ``trailing``: the request and the next command in one `feed()`: the next case's request when
  it runs on the same connection without a sleep or helper connections first (and the case
  itself sends something), else a neutral probe (`inspect job` of an id never used,
  ``-NOT-FOUND``). Both replies must come out, in order; after a close, nothing.

Time: the clock starts at the transcript's start time and moves as the probe's did: each case
takes its recorded duration, plus the sleeps the transcript leaves out (see workq_golden_cases).
A command that waits (lease, result, run answer WAIT) is driven by advancing the clock to the
engine's next timer (`engine.next_due()`), `engine.tick()`, and, when `session.on_wake` has
fired, `session.take_reply()`, as protocols/sequential.py does; commands after it in the same feed
run after its reply. Helper connections (workers, other `result` waiters) act at their times.

Replies are compared byte for byte with `created` / `started` times masked; jobgate's deliberate
differences (1-5, see workq_golden_cases) are expected explicitly.
"""
from __future__ import annotations

import calendar
import re
import time
from collections import deque

import pytest

from core.clock import ManualClock
from core.engine import Engine
from core.journal import Journal
from protocols.workq import CLOSE, QUIT, WAIT, Parser, Session, WorkqInfo
from protocols.workq.parser import MAX_READ, UNKNOWN, Command, Reply
from protocols.workq.values import MAX_PAYLOAD

from .workq_golden_cases import CASES, CONCURRENT, GOLDEN, KEEP_OPEN, START_MS, mask, uid

#: The most the parser may hold between feeds: an unfinished line or one payload + CRLF.
BUF_BOUND = max(MAX_READ, MAX_PAYLOAD + 2)
PROBE = b"inspect job %s\r\n" % uid(0xff)
PROBE_REPLY = b"-NOT-FOUND\r\n"
#: Longest virtual time one case may wait before the replay gives up (a wait nothing answers).
STUCK_MS = 600_000


def chunks(data: bytes, mode: str) -> list[bytes]:
    """`data` cut for feeding: one piece ("whole"/"trailing") or byte by byte ("bytes")."""
    if mode != "bytes":
        return [data] if data else []
    if len(data) <= 65536:
        return [data[i:i + 1] for i in range(len(data))]
    head, tail = 4096, len(data) - 256
    return ([data[i:i + 1] for i in range(head)]
            + [data[i:min(i + 65536, tail)] for i in range(head, tail, 65536)]
            + [data[i:i + 1] for i in range(tail, len(data))])


class Conn:
    """One client connection, sans-IO: a Parser feeding a Session, run as the gateway does."""

    def __init__(self, name: str, info: WorkqInfo) -> None:
        self.name = name
        self.clock = info.port.clock
        self.woken_at = None   # monotonic ms of the last reply to a command that waited
        self.parser = Parser()
        self.session = Session(info)
        self.session.on_wake = self._on_wake
        self.items: deque = deque()
        self.out: list[bytes] = []
        self.closed = False
        self.waiting = False
        self.wakes = 0

    def _on_wake(self) -> None:
        self.wakes += 1

    def feed(self, data: bytes) -> None:
        """Feed received bytes, check the buffer bound, run what can run."""
        if self.closed:   # the gateway stops reading once it closes
            return
        self.items.extend(self.parser.feed(data))
        assert len(self.parser._buf) <= BUF_BOUND, len(self.parser._buf)
        self.pump()

    def pump(self) -> None:
        """Collect a waiting command's reply once woken, then run the queued items in order."""
        if self.closed:
            return
        if self.waiting:
            if not self.session.has_reply():
                return
            assert self.wakes == 1, f"{self.name}: reply without exactly one on_wake"
            self.wakes = 0
            self.waiting = False
            self.woken_at = self.clock.monotonic_ms()
            self.out.append(self.session.take_reply())
        while self.items:
            r = self.session.handle(self.items.popleft())
            if r is QUIT:
                self.close()
                return
            if r is WAIT:
                self.waiting = True
                return
            assert r.__class__ is bytes, r
            self.out.append(r)

    def close(self) -> None:
        """The connection ends (Session.close withdraws a pending wait)."""
        if not self.closed:
            self.closed = True
            self.items.clear()
            self.session.close()


class Replay:
    """The reference run, sans-IO: engine, clock, and the probe's connections."""

    def __init__(self) -> None:
        self.clock = ManualClock(wall_start_ms=START_MS)
        self.engine = Engine(self.clock, Journal(self.clock))
        self.info = WorkqInfo(self.engine)
        self.conns: dict[str, Conn] = {}
        self.main: Conn | None = None
        self.opened = 0

    def now(self) -> int:
        """The clock's monotonic ms."""
        return self.clock.monotonic_ms()

    def open(self, name: str) -> Conn:
        """Open a connection called `name`."""
        self.conns[name] = c = Conn(name, self.info)
        return c

    def step(self, to: int) -> None:
        """Move the clock to monotonic ms `to` (not backwards), run due timers, wake waiters."""
        if to > self.now():
            self.clock.advance(to - self.now())
        self.engine.tick()
        for c in list(self.conns.values()):
            c.pump()

    def advance(self, ms: int) -> None:
        """Let `ms` ms pass, firing every timer at its own time."""
        end = self.now() + ms
        for _ in range(100_000):
            due = self.engine.next_due()
            if due is None or due > end:
                break
            self.step(due)
        self.step(end)

    def run_case(self, case, mode: str, trailing: bytes = b"") -> tuple[bytes, bool, dict]:
        """Replay one case (request + `trailing` on the main connection, helper actions at
        their times); returns (main connection's replies, closed?, {helper: replies})."""
        if case.sleep_before_ms:
            self.advance(case.sleep_before_ms)
        if case.new_conn or self.main is None:
            if self.main is not None:
                self.main.close()
            self.opened += 1
            self.main = self.open(f"main{self.opened}")
        main = self.main
        main.out = []
        main.woken_at = None
        self.started = start = self.now()
        for piece in chunks((case.request or b"") + trailing, mode):
            main.feed(piece)
        todo = deque(sorted(case.actions, key=lambda a: a.at_ms))
        used = []
        while True:
            while todo and start + todo[0].at_ms <= self.now():
                a = todo.popleft()
                if a.conn not in self.conns or self.conns[a.conn].closed:
                    self.open(a.conn).out = []
                    used.append(a.conn)
                for piece in chunks(a.request, mode):
                    self.conns[a.conn].feed(piece)
                for c in list(self.conns.values()):   # what the action finished wakes others
                    c.pump()
            if not todo and not any(c.waiting for c in self.conns.values() if not c.closed):
                break
            due = [start + todo[0].at_ms] if todo else []
            nxt = self.engine.next_due()
            due += [nxt] if nxt is not None else []
            assert due, "a command waits and nothing will answer it"
            assert self.now() - start < STUCK_MS, "a command waited far too long"
            self.step(min(due))
        rest = start + case.duration_ms - self.now()
        if rest > 0:
            self.advance(rest)
        helpers = {n: b"".join(self.conns[n].out) for n in used}
        for n in used:
            if n not in KEEP_OPEN:
                self.conns[n].close()
        for n in case.close_after:
            self.conns[n].close()
        return b"".join(main.out), main.closed, helpers


def trailing_for(index: int) -> tuple[bytes, bytes, bool]:
    """(bytes to append to case `index`, the replies they must add, whether they close)."""
    case = CASES[index]
    nxt = CASES[index + 1] if index + 1 < len(CASES) else None
    if case.closed:
        return PROBE, b"", False   # nothing after the close counts
    if (case.request is not None and nxt is not None and not nxt.new_conn
            and nxt.request is not None and not nxt.sleep_before_ms and not nxt.actions):
        return nxt.request, nxt.expected, nxt.closed
    return PROBE, PROBE_REPLY, False


def replay_prefix(index: int) -> Replay:
    """A fresh replay with cases [0, index) run whole."""
    r = Replay()
    for case in CASES[:index]:
        r.run_case(case, "whole")
    return r


def _expected_helpers(case) -> dict:
    """What each helper connection of `case` must receive: the replies of its actions, or
    for connections the transcript shows, jobgate's expected bytes for them."""
    want: dict = {}
    for a in case.actions:
        want[a.conn] = want.get(a.conn, b"") + a.reply
    return {**want, **case.expected_helpers}


needs_golden = pytest.mark.skipif(not CASES, reason=f"golden transcript not found: {GOLDEN}")

PARAMS = [pytest.param(i, mode, id=f"{c.key}{f'-D{c.diff}' if c.diff else ''}-{mode}"
                       .replace(" ", "_"))
          for i, c in enumerate(CASES) for mode in ("whole", "bytes", "trailing")]


# ============================================================================ tests
@needs_golden
def test_transcript_parsed_completely():
    """160 cases, each with bytes to send (or helper actions) and an answer (or a reason for
    none); the differences 1-5 all occur, and each really changes the expected bytes."""
    assert len(CASES) == 160
    assert all(c.request or c.actions for c in CASES)
    silent = {c.title for c in CASES if not c.golden and not c.closed}
    assert silent == {"complete result size mismatch (3 declared, 1 sent): server waits for "
                      "more bytes, no reply",
                      "partial line then wait (no timeout on server side; nothing returned)",
                      CONCURRENT}
    assert [c.index for c in CASES if c.closed] == [34, 59, 155, 157]
    assert {c.diff for c in CASES if c.diff} == {1, 2, 3, 4, 5}
    for c in CASES:
        if c.diff and c.title != CONCURRENT:
            assert c.expected != mask(c.golden), c.title
        if c.golden_helpers:
            acts = _expected_helpers(c)
            assert c.expected_helpers == {k: acts[k] for k in c.golden_helpers}, c.title
    assert len({c.key for c in CASES}) == len(CASES)


@needs_golden
@pytest.mark.parametrize("index,mode", PARAMS)
def test_golden_case(index, mode):
    """Replay case `index` after its prefix and compare replies byte for byte."""
    r = replay_prefix(index)
    case = CASES[index]
    want, want_closed = case.expected, case.closed
    trailing = b""
    if mode == "trailing":
        trailing, more, closes = trailing_for(index)
        want, want_closed = want + more, want_closed or closes
    got, closed, helpers = r.run_case(case, mode, trailing)
    assert (mask(got), closed) == (want, want_closed)
    assert {k: mask(v) for k, v in helpers.items()} == _expected_helpers(case)


@needs_golden
def test_whole_transcript_in_one_run():
    """One replay of every case in order, checked step by step. The replay's clock follows the
    probe's: every `created` time the reference showed is within 1 s of the replay's, and a
    command that waited on the main connection answered when the reference did (its elapsed
    time minus the probe's idle wait, up to 10 ms earlier: the probe's own latency)."""
    r = Replay()
    stamps = waits = 0
    for case in CASES:
        got, closed, _ = r.run_case(case, "whole")
        assert (mask(got), closed) == (case.expected, case.closed), case.key
        for theirs, ours in zip(_created(case.golden), _created(got)):
            assert abs(theirs - ours) <= 1, (case.key, theirs, ours)
            stamps += 1
        woken = r.main.woken_at
        if woken is not None:
            waits += 1
            took, theirs = woken - r.started, case.elapsed_ms - case.idle_ms
            assert theirs - 10 <= took <= theirs, (case.key, took, theirs)
    assert stamps >= 15
    assert waits == 10
    assert r.info.connections == 1   # the last main connection


def _created(reply: bytes) -> list[int]:
    """The `created` times of an inspect reply, in epoch seconds."""
    return [calendar.timegm(time.strptime(m.decode(), "%Y-%m-%dT%H:%M:%SZ"))
            for m in re.findall(rb"created (\S+)\r\n", reply)]


# ==================================================== connection-level, on the parser
def _case(prefix: str):
    return next(c for c in CASES if c.title.startswith(prefix))


@needs_golden
def test_bare_lf_closes_silently():
    """`inspect server\\n`: a CLOSE item and nothing else; later bytes are ignored."""
    p = Parser()
    assert p.feed(_case("bare LF terminator").request) == [CLOSE]
    assert p.feed(b"inspect server\r\n") == []
    p = Parser()
    items = p.feed(b"inspect server\r\ninspect server\n")
    assert [i.__class__ for i in items[:1]] == [Command] and items[1:] == [CLOSE]


@needs_golden
def test_line_without_lf_closes_at_max_read():
    """A line with no LF closes the connection once MAX_READ bytes (the reference's MaxRead)
    are buffered; one byte fewer is still waited on, with nothing emitted."""
    case = _case("line of 1058586 bytes without newline")
    assert f"MaxRead={MAX_READ})" in case.title
    assert Parser().feed(case.request) == [CLOSE]
    p = Parser()
    assert p.feed(b"a" * (MAX_READ - 1)) == []
    assert len(p._buf) == MAX_READ - 1
    assert p.feed(b"a") == [CLOSE]
    assert len(p._buf) == 0


@needs_golden
def test_line_of_max_read_with_crlf_is_a_command():
    """A line of exactly MAX_READ bytes including CRLF is still read (as an unknown command)."""
    p = Parser()
    items = p.feed(b"a" * (MAX_READ - 2) + b"\r\n")
    assert len(items) == 1 and items[0].__class__ is Reply and items[0].data == UNKNOWN


@needs_golden
def test_partial_line_then_rest():
    """`inspect ser` emits nothing and is kept; `ver\\r\\n` completes `inspect server`."""
    part = _case("partial line then wait").request
    rest = _case("rest of line").request
    p = Parser()
    assert p.feed(part) == []
    assert bytes(p._buf) == part
    (cmd,) = p.feed(rest)
    assert (cmd.name, cmd.args, cmd.flags, cmd.payload) == (b"inspect", [b"server"], {}, None)


@needs_golden
def test_cr_inside_a_line_is_not_a_terminator():
    """`inspect\\rserver\\r\\n` is one line whose command name is `inspect\\rserver`."""
    (item,) = Parser().feed(_case("CR in middle").request)
    assert item.__class__ is Reply and item.data == UNKNOWN


@needs_golden
def test_payload_crlf_split_across_feeds():
    """Difference 6: the 2 bytes after a payload are checked together even when they arrive in
    separate reads (the reference's check depends on how its read was cut). The golden's
    "size 3, 4 bytes sent" request fed in every 2-way split answers the same."""
    ok = b"complete %s 1\r\nx\r\n" % uid(1)
    for cut in range(1, len(ok)):
        p = Parser()
        (cmd,) = p.feed(ok[:cut]) + p.feed(ok[cut:])
        assert (cmd.name, cmd.payload) == (b"complete", b"x"), cut
    bad = _case("add payload shorter than size").request
    for cut in range(1, len(bad)):
        p = Parser()
        items = p.feed(bad[:cut]) + p.feed(bad[cut:])
        assert [i.data if i.__class__ is Reply else i for i in items] == [
            b"-CLIENT-ERROR Invalid payload size\r\n", CLOSE], cut
