"""Property tests (hypothesis) for the sans-IO workq parser and session.

Properties, for random, valid and hostile byte streams (huge lines, bad sizes, random flags,
payloads with CR/LF, bare LFs, random split points):

- `Parser.feed` never raises, and between feeds `len(parser._buf)` stays within what the
  parser documents: an unfinished line shorter than MAX_READ, or one payload + CRLF;
- feeding a stream whole or cut at random points (down to one byte per feed) yields the same
  items (split invariance); nothing follows a CLOSE;
- well-formed commands parse back to exactly what was encoded;
- `Session.handle` never raises on any parsed item: every reply (immediate, after a wait, or
  after the wait is withdrawn) starts with b"+" or b"-" and ends with CRLF; CLOSE gives QUIT.

Budgets are modest (deadline off: timing is not a property here); the file runs in seconds.
"""
from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine import Engine
from protocols.workq import CLOSE, QUIT, WAIT, Parser, Session, WorkqInfo
from protocols.workq.parser import MAX_READ, PAYLOAD_SIZE, UNKNOWN, Command, Reply
from protocols.workq.values import MAX_PAYLOAD

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: What the parser may hold between feeds: an unfinished line (< MAX_READ) or one payload + CRLF.
BOUND = max(MAX_READ, MAX_PAYLOAD + 2)


# ============================================================================ helpers
def as_tuple(item):
    """A comparable form of a parser item."""
    if item is CLOSE:
        return ("CLOSE",)
    if item.__class__ is Reply:
        return ("reply", item.data)
    assert item.__class__ is Command, item
    return ("cmd", item.name, tuple(item.args), tuple(sorted(item.flags.items())), item.payload)


def split(data: bytes, cuts) -> list[bytes]:
    """`data` cut at the given offsets (any order, duplicates and out-of-range allowed)."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])] or [b""]


def parse(chunks) -> list:
    """Feed `chunks` to a fresh Parser, checking the buffer bound after every feed; return the
    items as tuples (and check that nothing follows a CLOSE)."""
    p = Parser()
    out = []
    for chunk in chunks:
        out += p.feed(chunk)
        assert len(p._buf) <= BOUND, len(p._buf)
        assert len(p._buf) < MAX_READ, len(p._buf)   # the tighter bound the parser documents
    assert CLOSE not in out[:-1]
    return [as_tuple(i) for i in out]


# ========================================================================= strategies
UIDS = [b"11111111-1111-4111-8111-00000000000%d" % i for i in range(4)]
ids = st.one_of(st.sampled_from(UIDS), st.uuids().map(lambda u: str(u).encode()),
                st.sampled_from([b"not-a-uuid", b"6ba7b810-9dad-11d1-80b4-00c04fd430c4", b"",
                                 b"{11111111-1111-4111-8111-000000000001}"]))
NAME_CHARS = b"abcXYZ019_.-"
names = st.one_of(st.sampled_from([b"q", b"ping", b"a.b-c_d", b"bad!name", b"x" * 256]),
                  st.binary(min_size=1, max_size=12).map(
                      lambda b: bytes(NAME_CHARS[c % len(NAME_CHARS)] for c in b)))
numbers = st.one_of(st.integers(-5, 5000).map(lambda n: b"%d" % n),
                    st.integers(-(2**70), 2**70).map(lambda n: b"%d" % n),
                    st.sampled_from([b"", b"abc", b"+1", b"-0", b"007", b"1e3", b"0x10",
                                     b"86400001", b"4294967296", b"2026-11-22T02:42:48Z"]))
flag = st.builds(lambda k, v, eq: b"-" + k + (b"=" * eq) + v,
                 st.sampled_from([b"priority", b"max-attempts", b"max-fails", b"foo", b"", b"-"]),
                 st.one_of(numbers, st.binary(max_size=4)), st.integers(0, 2))
tokens = st.one_of(ids, names, numbers, flag,
                   st.sampled_from([b"add", b"schedule", b"run", b"lease", b"complete", b"fail",
                                    b"delete", b"result", b"inspect", b"server", b"job",
                                    b"jobs", b"queue", b"queues", b"scheduled-jobs", b"ADD"]))
seps = st.sampled_from([b" ", b"  ", b"\r", b"\t"])


@st.composite
def garbage_line(draw):
    """A line of random tokens (maybe a bare LF or CR inside)."""
    toks = draw(st.lists(tokens, max_size=9))
    line = b"".join(t + draw(seps) for t in toks)
    return line + draw(st.sampled_from([b"\r\n"] * 6 + [b"\n", b"", b"\r\r\n"]))


@st.composite
def payload_command(draw):
    """add/schedule/run/complete/fail with a random (often wrong) size and payload."""
    verb = draw(st.sampled_from([b"add", b"schedule", b"run", b"complete", b"fail"]))
    body = draw(st.one_of(st.binary(max_size=40), st.sampled_from([b"a\r\nb", b"\r\n", b"\n"])))
    size = draw(st.one_of(st.just(b"%d" % len(body)), numbers))
    head = {b"add": [draw(ids), draw(names), b"1000", b"60000"],
            b"schedule": [draw(ids), draw(names), b"1000", b"60000", b"2030-01-01T00:00:00Z"],
            b"run": [draw(ids), draw(names), b"1000", b"10"],
            b"complete": [draw(ids)], b"fail": [draw(ids)]}[verb]
    extra = draw(st.lists(flag, max_size=4))
    line = b" ".join([verb, *head, size, *extra])
    tail = draw(st.sampled_from([b"\r\n"] * 5 + [b"", b"\n", b"xx", b"\r"]))
    return line + b"\r\n" + body + tail


@st.composite
def huge(draw):
    """(bytes, the first item they must parse to, or None when that depends on what follows):
    a line around MAX_READ (with CRLF, bare LF or no end), or a payload around MAX_PAYLOAD."""
    if draw(st.booleans()):
        n = draw(st.sampled_from([MAX_READ - 2, MAX_READ - 1, MAX_READ, MAX_READ + 7]))
        end = draw(st.sampled_from([b"", b"\r\n", b"\n"]))
        if n == MAX_READ - 2 and end == b"\r\n":   # MAX_READ bytes with CRLF: still a line
            want = ("reply", UNKNOWN)
        elif n >= MAX_READ or end:                  # too long, or a bare LF
            want = ("CLOSE",)
        else:
            want = None
        return b"a" * n + end, want
    n = draw(st.sampled_from([MAX_PAYLOAD - 1, MAX_PAYLOAD, MAX_PAYLOAD + 1]))
    size = draw(st.sampled_from([n, n - 1, n + 1]))
    tail = draw(st.sampled_from([b"\r\n", b"", b"zz"]))
    want = None
    if size > MAX_PAYLOAD:
        want = ("reply", PAYLOAD_SIZE)
    elif size == n and tail == b"\r\n":
        want = ("cmd", b"add", (UIDS[0], b"big", b"1000", b"60000", b"%d" % n), (), b"z" * n)
    return b"add %s big 1000 60000 %d\r\n" % (UIDS[0], size) + b"z" * n + tail, want


fragment = st.one_of(garbage_line(), payload_command(), st.binary(max_size=60),
                     st.sampled_from([b"\r\n", b"\n", b"inspect server\r\n", b"inspect ser"]))
cuts = st.lists(st.integers(0, 2000), max_size=25)


vids = st.one_of(st.sampled_from(UIDS), st.uuids().map(lambda u: str(u).encode()))
vnames = names.filter(lambda n: n[:1] != b"-")   # a piece starting with "-" and "=" is a flag


@st.composite
def valid_command(draw):
    """(bytes, expected item tuple) for one well-formed command."""
    verb = draw(st.sampled_from([b"add", b"schedule", b"run", b"complete", b"fail", b"lease",
                                 b"delete", b"result", b"inspect"]))
    sp = draw(st.sampled_from([b" ", b"  "]))
    fl = draw(st.dictionaries(st.sampled_from([b"priority", b"max-attempts", b"max-fails"]),
                              st.integers(-9999, 9999).map(lambda n: b"%d" % n), max_size=3))
    flags = [b"-%s=%s" % kv for kv in fl.items()]
    if verb in (b"add", b"schedule", b"run", b"complete", b"fail"):
        body = draw(st.binary(max_size=50))
        args = {b"add": [draw(vids), draw(vnames), b"1000", b"60000"],
                b"schedule": [draw(vids), draw(vnames), b"1", b"2", b"2030-01-01T00:00:00Z"],
                b"run": [draw(vids), draw(vnames), b"1000", b"5"]}.get(verb, [draw(vids)])
        args.append(b"%d" % len(body))
        line = sp.join([verb, *args, *flags])
        want = ("cmd", verb, tuple(args), tuple(sorted(fl.items())), body)
        return line + b"\r\n" + body + b"\r\n", want
    args = {b"lease": [draw(vnames), draw(vnames), b"100"], b"delete": [draw(vids)],
            b"result": [draw(vids), b"0"],
            b"inspect": draw(st.sampled_from([[b"server"], [b"job", UIDS[3]],
                                              [b"queues", b"0", b"10"]]))}[verb]
    return (sp.join([verb, *args, *flags]) + b"\r\n",
            ("cmd", verb, tuple(args), tuple(sorted(fl.items())), None))


# ====================================================================== parser tests
@FAST
@given(st.binary(max_size=3000), cuts)
@example(b"\n", [])
@example(b"\r\n\r\n\r", [1])
@example(b"add a b 1 1 -1\r\nx\r\n", [3])
@example(b"complete 11111111-1111-4111-8111-000000000001 3\r\nx\r\nfa", [50, 51])
def test_random_bytes(data, at):
    """Random bytes never raise, keep the buffer bounded, and split the same as whole."""
    assert parse(split(data, at)) == parse([data])


@FAST
@given(st.lists(fragment, max_size=12), cuts)
def test_hostile_streams_split_invariant(frags, at):
    """Streams of hostile lines and payload commands: bounded, and any split (random cuts, or
    one byte per feed) gives the items of the whole stream."""
    data = b"".join(frags)
    whole = parse([data])
    assert parse(split(data, at)) == whole
    assert parse([data[i:i + 1] for i in range(len(data))]) == whole


@SLOW
@given(huge(), st.lists(fragment, max_size=3), st.integers(0, 3),
       st.lists(st.integers(0, 2 * MAX_READ + 100), max_size=8))
@example((b"a" * MAX_READ, ("CLOSE",)), [b"inspect server\r\n"], 0, [MAX_READ - 1])
@example((b"a" * (MAX_READ - 2) + b"\r\n", ("reply", UNKNOWN)), [b"inspect server\r\n"], 0,
         [MAX_READ - 1])
def test_huge_lines_and_payloads(big, frags, pos, at):
    """Lines and payloads at and around their limits, among other commands: bounded, split
    invariant, and parsed as the limits say (checked when the big piece comes first)."""
    big, want = big
    frags.insert(min(pos, len(frags)), big)
    data = b"".join(frags)
    whole = parse([data])
    assert parse(split(data, at)) == whole
    if frags[0] is big and want is not None:
        assert whole[0] == want
        if want == ("CLOSE",):
            assert whole == [want]


@FAST
@given(st.lists(valid_command(), min_size=1, max_size=8), cuts)
def test_valid_commands_round_trip(cmds, at):
    """Well-formed commands (flags, payloads with any bytes) parse back exactly."""
    data = b"".join(c for c, _ in cmds)
    want = [w for _, w in cmds]
    assert parse([data]) == want
    assert parse(split(data, at)) == want


# ===================================================================== session tests
class Harness:
    """One Session on an in-memory engine (ManualClock); checks every reply's framing."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.engine = Engine(self.clock)
        self.info = WorkqInfo(self.engine)
        self.session = self._open()
        self.replies = 0

    def _open(self) -> Session:
        s = Session(self.info)
        s.on_wake = lambda: None
        return s

    def run(self, items, advance_ms: int) -> None:
        """Handle every item; a WAIT is resolved by moving the clock, else withdrawn (as a
        client that went away); QUIT closes the session and opens a new one."""
        for item in items:
            r = self.session.handle(item)
            if r is WAIT:
                self.clock.advance(advance_ms)
                self.engine.tick()
                r = self.session.take_reply() if self.session.has_reply() else None
                if r is None:
                    r = self.session.cancel_wait()
                assert not self.session.has_reply()
            if r is QUIT:
                assert item is CLOSE
                self.session.close()
                self.session = self._open()
                continue
            assert r.__class__ is bytes and r[:1] in (b"+", b"-") and r.endswith(b"\r\n"), r
            self.replies += 1


@FAST
@given(st.lists(st.one_of(valid_command().map(lambda c: c[0]), fragment), max_size=15),
       st.integers(0, 3000))
def test_session_never_raises(frags, advance_ms):
    """Any parsed item, in any order, gets a well-framed reply (or closes)."""
    h = Harness()
    p = Parser()
    h.run(p.feed(b"".join(frags)), advance_ms)
    h.clock.advance(advance_ms)
    h.engine.tick()


@FAST
@given(st.lists(st.sampled_from(UIDS), min_size=1, max_size=6), st.data())
def test_session_on_a_job_lifecycle(uids, data):
    """Adds, leases, completes, fails, results and inspects of a few shared ids, with time
    passing between them: replies stay well framed and the engine's uid index stays exact."""
    h = Harness()
    p = Parser()
    for u in uids:
        ops = [b"add %s q 100 1000 1 -max-fails=2 -max-attempts=3\r\nx\r\n" % u,
               b"schedule %s q 100 1000 2023-11-14T22:13:21Z 1\r\nx\r\n" % u,
               b"lease q 50\r\n", b"lease q 0\r\n", b"complete %s 2\r\nok\r\n" % u,
               b"fail %s 3\r\nbad\r\n" % u, b"result %s 20\r\n" % u, b"delete %s\r\n" % u,
               b"run %s r 30 30 1\r\nx\r\n" % u, b"inspect job %s\r\n" % u,
               b"inspect jobs q 0 10\r\n", b"inspect scheduled-jobs q 0 10\r\n",
               b"inspect queues 0 100\r\n", b"inspect server\r\n"]
        chosen = data.draw(st.lists(st.sampled_from(ops), min_size=1, max_size=6))
        h.run(p.feed(b"".join(chosen)), data.draw(st.integers(0, 400)))
        h.clock.advance(data.draw(st.integers(0, 1500)))
        h.engine.tick()
    for uid, job in h.engine.by_uid.items():
        assert job.id in h.engine.jobs and job.uid == uid
    assert h.replies > 0
