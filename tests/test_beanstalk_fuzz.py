"""Property tests (hypothesis) for the sans-IO beanstalk parser and session.

Properties, for random, valid and hostile byte streams:

- `Parser.feed` and `Session.handle` never raise;
- after every `feed`, `Parser.buffered()` <= max(line_max, max_job_size + 2);
- splitting a byte stream at arbitrary points (down to one byte per feed) yields exactly the
  command list of feeding it whole;
- valid command streams parse to exactly the commands that were encoded;
- every reply the session produces is a well-formed beanstalk reply (framing and byte counts).

Settings keep the whole file well under 30 s (deadline off: timing is not a property here).
"""
from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine import Engine
from protocols.beanstalk.parser import (COUNTED, BAD_FORMAT, ERROR, NAME_CHARS, UNKNOWN_COMMAND, U32, U64,
                                        Parser)
from protocols.beanstalk.session import QUIT, WAIT, Session
from protocols.beanstalk.stats import ServerInfo

TOO_BIG = [(COUNTED, b"put", b"", False, False), (ERROR, b"JOB_TOO_BIG\r\n")]
FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ============================================================================ helpers
def bound(p: Parser) -> int:
    """The documented ceiling of the parser's buffer."""
    return max(p.line_max, p.max_job_size + 2)


def split(data: bytes, cuts) -> list[bytes]:
    """`data` cut at the given offsets (any order, duplicates and out-of-range allowed)."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])] or [b""]


def feed_checked(p: Parser, chunks) -> list:
    """Feed each chunk; assert the buffer bound after every feed; return all commands."""
    out = []
    for chunk in chunks:
        out += p.feed(chunk)
        assert p.buffered() <= bound(p), (p.buffered(), bound(p))
    return out


def parse_whole(data: bytes, max_job_size: int, line_max: int = 224) -> list:
    """Commands from feeding `data` in one call to a fresh parser (bound checked)."""
    return feed_checked(Parser(max_job_size, line_max), [data])


def parse_split(data: bytes, cuts, max_job_size: int, line_max: int = 224) -> list:
    """Commands from feeding `data` cut at `cuts` to a fresh parser (bound checked)."""
    return feed_checked(Parser(max_job_size, line_max), split(data, cuts))


def parse_bytewise(data: bytes, max_job_size: int, line_max: int = 224) -> list:
    """Commands from feeding `data` one byte per call to a fresh parser (bound checked)."""
    return feed_checked(Parser(max_job_size, line_max), [data[i:i + 1] for i in range(len(data))])


_SIMPLE_REPLY = re.compile(
    rb"(INSERTED \d+|BURIED \d+|USING [A-Za-z0-9\-+/;.$_()]{1,200}|WATCHING \d+|KICKED \d+|KICKED"
    rb"|DELETED|RELEASED|BURIED|TOUCHED|PAUSED|NOT_FOUND|NOT_IGNORED|TIMED_OUT|DEADLINE_SOON"
    rb"|DRAINING|JOB_TOO_BIG|EXPECTED_CRLF|BAD_FORMAT|UNKNOWN_COMMAND)\r\n")
_FRAMED_REPLY = re.compile(rb"(?:(?:FOUND|RESERVED) \d+|OK) (\d+)\r\n")


def assert_wellformed(reply) -> None:
    """A reply is one beanstalk reply: a known line, or a header whose byte count frames the body."""
    assert isinstance(reply, bytes), reply
    if _SIMPLE_REPLY.fullmatch(reply):
        return
    m = _FRAMED_REPLY.match(reply)
    assert m, reply[:80]
    n = int(m.group(1))
    assert len(reply) == m.end() + n + 2, reply[:80]
    assert reply.endswith(b"\r\n")
    if reply.startswith(b"OK "):
        assert reply[m.end():].startswith(b"---\n")


class Harness:
    """An in-memory engine (ManualClock) with one session; runs commands and checks replies."""

    def __init__(self, max_job_size: int) -> None:
        self.clock = ManualClock()
        self.engine = Engine(clock=self.clock)
        self.info = ServerInfo(self.engine, max_job_size=max_job_size)
        self.session = self._new_session()
        self.replies: list[bytes] = []

    def _new_session(self) -> Session:
        s = Session(self.info)
        s.on_wake = lambda: None
        return s

    def run(self, cmds, advance_ms: int = 0) -> None:
        """Handle every command; a WAIT is resolved by moving the clock and ticking, else
        cancelled (as a half-closing client); QUIT closes the session and opens a new one."""
        for cmd in cmds:
            r = self.session.handle(cmd)
            if r is WAIT:
                self.clock.advance(advance_ms)
                self.engine.tick()
                r = self.session.cancel_wait()
                if r is None:
                    r = self.session.take_reply()
            if r is QUIT:
                self.session.close()
                self.session = self._new_session()
                continue
            if r == b"":   # no reply of its own: a too-big put answers after the skip
                continue
            assert_wellformed(r)
            self.replies.append(r)
        if advance_ms:
            self.clock.advance(advance_ms)
            self.engine.tick()

    def check_counts(self) -> None:
        """`stats` job counts agree with the engine's job table."""
        r = self.session.handle((b"stats",))
        assert_wellformed(r)
        counts = dict(re.findall(rb"\n(current-jobs-\w+): (\d+)", r))
        total = sum(int(counts[k]) for k in (b"current-jobs-ready", b"current-jobs-reserved",
                                             b"current-jobs-delayed", b"current-jobs-buried"))
        assert total == len(self.engine.jobs)

    def close(self) -> None:
        """Close the session (releases its reservations)."""
        self.session.close()


# ========================================================================= strategies
NAME_ALPHABET = bytes(sorted(NAME_CHARS))
tube_names = st.one_of(
    st.sampled_from(["default", "a", "b", "tube-x", "t(1)"]),
    st.text(alphabet=NAME_ALPHABET.decode(), min_size=1, max_size=200).filter(
        lambda s: not s.startswith("-")),
)
small_ids = st.integers(0, 30)
ids = st.one_of(small_ids, st.integers(0, U64))
u32s = st.one_of(st.integers(0, 100), st.integers(0, U32))
MAX_JOB = 64


def _num(draw, v: int) -> bytes:
    """Encode an integer, sometimes with leading zeros (still a valid encoding)."""
    return b"0" * draw(st.integers(0, 3)) + b"%d" % v


@st.composite
def _valid_command(draw):
    """(bytes, expected command tuples) for one well-formed command (max_job_size = MAX_JOB).

    Most commands parse to one tuple; a too-big put parses to two (counted, then JOB_TOO_BIG)."""
    kind = draw(st.sampled_from([
        "put", "put-too-big", "reserve", "reserve-with-timeout", "reserve-job", "delete",
        "release", "bury", "touch", "watch", "ignore", "use", "peek", "peek-ready",
        "peek-delayed", "peek-buried", "kick", "kick-job", "stats", "stats-job", "stats-tube",
        "list-tubes", "list-tube-used", "list-tubes-watched", "pause-tube", "quit",
    ]))
    k = kind.encode()
    sp = b" " * draw(st.integers(1, 2))
    if kind == "put":
        pri, delay, ttr = draw(u32s), draw(st.integers(0, 5)), draw(u32s)
        body = draw(st.binary(max_size=MAX_JOB))
        line = b"put" + sp + sp.join([_num(draw, pri), _num(draw, delay), _num(draw, ttr),
                                      _num(draw, len(body))])
        return line + b"\r\n" + body + b"\r\n", (b"put", pri, delay, ttr, body)
    if kind == "put-too-big":   # counted at once, answered after the skip: two tuples
        size = draw(st.integers(MAX_JOB + 1, 300))
        body = draw(st.binary(min_size=size + 2, max_size=size + 2))
        return b"put 0 0 60 %d\r\n" % size + body, TOO_BIG
    if kind in ("reserve", "peek-ready", "peek-delayed", "peek-buried", "stats", "list-tubes",
                "list-tube-used", "list-tubes-watched", "quit"):
        return k + b"\r\n", (k,)
    if kind in ("reserve-with-timeout", "kick"):
        v = draw(st.integers(0, 3)) if kind == "reserve-with-timeout" else draw(u32s)
        return k + sp + _num(draw, v) + b"\r\n", (k, v)
    if kind in ("reserve-job", "delete", "touch", "peek", "kick-job", "stats-job"):
        i = draw(ids)
        return k + sp + _num(draw, i) + b"\r\n", (k, i)
    if kind == "release":
        i, pri, delay = draw(ids), draw(u32s), draw(st.integers(0, 5))
        return (k + b" " + b"%d %d %d" % (i, pri, delay) + b"\r\n", (k, i, pri, delay))
    if kind == "bury":
        i, pri = draw(ids), draw(u32s)
        return k + b" %d %d\r\n" % (i, pri), (k, i, pri)
    if kind == "pause-tube":
        name, delay = draw(tube_names), draw(st.integers(0, 5))
        return k + b" " + name.encode() + sp + b"%d" % delay + b"\r\n", (k, name, delay)
    # watch, ignore, use, stats-tube: exactly one space before the name
    name = draw(tube_names)
    return k + b" " + name.encode() + b"\r\n", (k, name)


def valid_command():
    """Strategy of (bytes, [expected command tuples]) for one well-formed command."""
    return _valid_command().map(lambda c: (c[0], c[1] if isinstance(c[1], list) else [c[1]]))


valid_streams = st.lists(valid_command(), max_size=30)


def flat(cmds) -> list:
    """The command tuples of a drawn stream, in order."""
    return [t for _, ts in cmds for t in ts]

_BIG_INTS = [0, 1, U32 - 1, U32, U32 + 1, U64 - 1, U64, U64 + 1, 10**30]


@st.composite
def hostile_fragment(draw):
    """Bytes meant to hurt a parser: huge lines, lying put sizes, random digits, stray CR/LF/NUL."""
    kind = draw(st.integers(0, 9))
    if kind == 0:   # huge line, maybe without line end
        n = draw(st.integers(200, 6000))
        end = draw(st.sampled_from([b"", b"\r\n", b"\r", b"\n", b"\rx\r\n"]))
        return draw(st.sampled_from([b"z", b"0", b" ", b"\x00"])) * n + end
    if kind == 1:   # put whose body length lies
        n = draw(st.integers(0, 80))
        body = draw(st.binary(max_size=100))
        return b"put 0 0 60 %d\r\n" % n + body + draw(st.sampled_from([b"\r\n", b"", b"\n"]))
    if kind == 2:   # random digits as the size
        digits = draw(st.text(alphabet="0123456789", min_size=1, max_size=25)).encode()
        return b"put 0 0 60 " + digits + b"\r\n" + draw(st.binary(max_size=40))
    if kind == 3:   # boundary integers in any numeric slot
        v = b"%d" % draw(st.sampled_from(_BIG_INTS))
        sign = draw(st.sampled_from([b"", b"-", b"+"]))
        tmpl = draw(st.sampled_from([b"put %s 0 1 1\r\nx\r\n", b"put 0 0 1 %s\r\nx\r\n",
                                     b"delete %s\r\n", b"kick %s\r\n", b"release %s 1 1\r\n",
                                     b"reserve-with-timeout %s\r\n", b"pause-tube a %s\r\n",
                                     b"bury 1 %s\r\n", b"stats-job %s\r\n"]))
        return tmpl % (sign + v)
    if kind == 4:   # stray control bytes
        return draw(st.lists(st.sampled_from([b"\r", b"\n", b"\x00", b" ", b"\t", b"\r\n"]),
                             max_size=10).map(b"".join))
    if kind == 5:   # prefixes of real commands, cut anywhere
        data, _ = draw(valid_command())
        return data[:draw(st.integers(0, len(data)))]
    if kind == 6:   # a declared huge size whose skip swallows what follows
        return b"put 1 2 3 %d\r\n" % draw(st.integers(MAX_JOB + 1, 10**6))
    if kind == 7:   # bad tube names
        name = draw(st.binary(min_size=0, max_size=210))
        return draw(st.sampled_from([b"use ", b"watch ", b"ignore ", b"stats-tube ",
                                     b"pause-tube "])) + name + b"\r\n"
    if kind == 8:   # random bytes
        return draw(st.binary(max_size=300))
    data, _ = draw(valid_command())
    return data


hostile_streams = st.lists(hostile_fragment(), max_size=15).map(b"".join)


def draw_cuts(data, stream: bytes) -> list[int]:
    """Draw up to 40 cut offsets inside `stream` (from a hypothesis `st.data()`)."""
    return data.draw(st.lists(st.integers(0, len(stream)), max_size=40), label="cuts")


# ===================================================================== parser properties
@FAST
@given(valid_streams, st.data())
def test_valid_stream_parses_to_its_commands_whatever_the_split(cmds, data):
    """Valid commands encode/decode exactly, fed whole, cut anywhere, or byte by byte."""
    stream = b"".join(d for d, _ in cmds)
    expected = flat(cmds)
    assert parse_whole(stream, MAX_JOB) == expected
    cuts = draw_cuts(data, stream)
    assert parse_split(stream, cuts, MAX_JOB) == expected
    if len(stream) <= 1500:
        assert parse_bytewise(stream, MAX_JOB) == expected
    p = Parser(MAX_JOB)
    feed_checked(p, [stream])
    assert p.buffered() == 0


TOKENS = [b"\r", b"\n", b"\r\n", b" ", b"  ", b"\x00", b"\t", b"0", b"1", b"9", b"-", b"put ",
          b"put 0 0 1 ", b"use a", b"watch ", b"stats", b"reserve", b"-with-timeout ", b"x",
          b"\xff", b"peek", b"kick "]
token_soup = st.lists(st.one_of(st.sampled_from(TOKENS), st.binary(min_size=1, max_size=3)),
                      max_size=300).map(b"".join)


@FAST
@given(st.one_of(st.binary(max_size=3000), token_soup), st.data(), st.integers(0, 400),
       st.integers(2, 300))
def test_random_bytes_split_invariant_and_bounded(blob, data, max_job_size, line_max):
    """Random bytes: no exception, the buffer bound holds, and any split gives the same list."""
    cuts = draw_cuts(data, blob)
    whole = parse_whole(blob, max_job_size, line_max)
    assert parse_split(blob, cuts, max_job_size, line_max) == whole
    for cmd in whole:
        assert isinstance(cmd, tuple) and isinstance(cmd[0], bytes)


@FAST
@given(hostile_streams, st.data(), st.sampled_from([0, 10, MAX_JOB, 1000]))
def test_hostile_stream_split_invariant_and_bounded(stream, data, max_job_size):
    """Hostile input: same commands whole / cut / byte by byte; bounded buffer throughout."""
    cuts = draw_cuts(data, stream)
    whole = parse_whole(stream, max_job_size)
    assert parse_split(stream, cuts, max_job_size) == whole
    if len(stream) <= 3000:
        assert parse_bytewise(stream, max_job_size) == whole
    for cmd in whole:
        if cmd[0] == ERROR:
            assert cmd[1] in (BAD_FORMAT, UNKNOWN_COMMAND, b"JOB_TOO_BIG\r\n")


@FAST
@given(st.text(alphabet="0123456789", min_size=1, max_size=30), st.integers(0, 200),
       st.sampled_from([0, 10, 65535]), st.integers(1, 4096))
def test_random_digit_put_sizes(digits, extra, max_job_size, chunk):
    """put with any digit string as size: u32 sizes above the limit skip size+2 bytes holding
    nothing; larger numbers are BAD_FORMAT; the buffer bound holds while feeding junk."""
    line = b"put 0 0 60 " + digits.encode() + b"\r\n"
    size = int(digits)
    p = Parser(max_job_size)
    out = feed_checked(p, [line])
    if size > U32:
        assert out == [(ERROR, BAD_FORMAT)]
        return
    assert out == ([TOO_BIG[0]] if size > max_job_size else [])
    if size > max_job_size:
        assert p.buffered() == 0
    junk = b"j" * extra
    out = feed_checked(p, [junk[i:i + chunk] for i in range(0, len(junk), chunk)])
    if size > max_job_size:
        if size + 2 <= extra:   # skip done: the rest is an unterminated command line
            assert out == [TOO_BIG[1]]
            assert p.buffered() == extra - (size + 2)
        else:                   # still skipping: nothing held
            assert out == []
            assert p.buffered() == 0


@SLOW
@given(st.integers(1, 50).map(lambda k: k * 100_000), st.integers(1000, 100_000),
       st.sampled_from([b"", b"q", b"put 0 0 1 1", b"\x00" * 300]))
@example(total=100_000, chunk=5017, tail=b"put 0 0 1 1")  # 100340 + 11 bytes: CR at offset 223
@example(total=100_000, chunk=5017, tail=b"q")
def test_huge_lines_in_chunks_stay_bounded(total, chunk, tail):
    """Megabytes of one line in chunks never grow the buffer past line_max; one BAD_FORMAT.

    The line is discarded in 224-byte windows; when its CR is the last byte of a window
    (offset 223, beanstalkd's 223-byte quirk) the CRLF is missed and the next line is swallowed.
    """
    p = Parser(65535)
    sent = 0
    out = []
    piece = b"q" * chunk
    while sent < total:
        out += p.feed(piece)
        assert p.buffered() <= p.line_max
        sent += chunk
    out += p.feed(tail + b"\r\nstats\r\n")
    out += p.feed(b"stats\r\n")
    swallowed = (sent + len(tail)) % p.line_max == p.line_max - 1
    assert out == [(ERROR, BAD_FORMAT)] + [(b"stats",)] * (1 if swallowed else 2)
    assert p.buffered() == 0


# ==================================================================== session properties
@FAST
@given(valid_streams, st.integers(0, 3000))
def test_session_handles_any_valid_command_sequence(cmds, advance_ms):
    """Valid command sequences run through the session: replies are well-formed, counts agree."""
    h = Harness(MAX_JOB)
    h.run(flat(cmds), advance_ms)
    h.check_counts()
    h.close()


@FAST
@given(hostile_streams, st.integers(0, 3000))
def test_session_handles_hostile_stream(stream, advance_ms):
    """Whatever the parser makes of hostile bytes, the session answers without raising."""
    h = Harness(MAX_JOB)
    cmds = parse_whole(stream, MAX_JOB)
    h.run(cmds, advance_ms)
    assert len(h.replies) <= len(cmds)
    h.check_counts()
    h.close()


@FAST
@given(st.one_of(st.binary(max_size=2000), token_soup), st.integers(0, 3000))
def test_session_handles_random_bytes(blob, advance_ms):
    """Random bytes through parser and session: never an exception, replies well-formed."""
    h = Harness(10)
    h.run(parse_whole(blob, 10), advance_ms)
    h.check_counts()
    h.close()


_PROCESS_STATS = re.compile(rb"^(rusage-utime|rusage-stime|uptime|id): [^\n]*$", re.M)


def stable(reply: bytes) -> bytes:
    """A reply with the process-dependent stats values (rusage, uptime) and its count masked."""
    if reply.startswith(b"OK ") and b"\nrusage-utime: " in reply:
        body = reply[reply.index(b"\r\n") + 2:]
        return b"OK *\r\n" + _PROCESS_STATS.sub(rb"\1: *", body)
    return reply


@FAST
@given(st.lists(valid_command(), max_size=25), st.data())
def test_replies_do_not_depend_on_the_split(items, data):
    """The reply bytes of a session are the same however the client's bytes were split."""
    stream = b"".join(d for d, _ in items)
    cuts = draw_cuts(data, stream)

    def replies(chunks) -> list:
        h = Harness(MAX_JOB)
        p = Parser(MAX_JOB)
        for c in chunks:
            h.run(p.feed(c))
            assert p.buffered() <= bound(p)
        h.close()
        return [stable(r) for r in h.replies]

    assert replies([stream]) == replies(split(stream, cuts))
