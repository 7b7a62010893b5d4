"""Sans-IO unit tests of the beanstalk parser (protocols.beanstalk.parser) and session.

Command tuple shapes, line-length edges, stray CR, NUL, LF-only, JOB_TOO_BIG skipping,
EXPECTED_CRLF, put spacing and zeros, u32/u64 bounds. The golden-bytes replay of the reference
transcripts is in test_beanstalk_golden.py.
"""
from __future__ import annotations

import pytest

from core.clock import ManualClock
from core.engine import Engine
from protocols.beanstalk.parser import (COUNTED, BAD_FORMAT, ERROR, EXPECTED_CRLF, UNKNOWN_COMMAND,
                                        Parser, parse_line)
from protocols.beanstalk.session import WAIT, Session
from protocols.beanstalk.stats import ServerInfo

from .beanstalk_support import Conn


BF = (ERROR, BAD_FORMAT)
UC = (ERROR, UNKNOWN_COMMAND)
XC = (COUNTED, b"put", EXPECTED_CRLF, True, True)   # counted, producer, uses a job id
TB0 = (COUNTED, b"put", b"", False, False)          # too-big put line: counted, no reply yet
TB = (ERROR, b"JOB_TOO_BIG\r\n")                   # ... answered once the body is skipped
PUT_TRAILING = (COUNTED, b"put", BAD_FORMAT, False, False)
PAUSE_BAD = (COUNTED, b"pause-tube", BAD_FORMAT, False, False)


# ================================================================ parser unit tests
def feed_all(data: bytes, max_job_size: int = 65535) -> list:
    """Parse `data` in one feed on a fresh parser; return the command tuples."""
    return Parser(max_job_size=max_job_size).feed(data)


def feed_bytes(data: bytes, max_job_size: int = 65535) -> list:
    """Parse `data` one byte per feed on a fresh parser; return the command tuples."""
    p = Parser(max_job_size=max_job_size)
    out = []
    for i in range(len(data)):
        out += p.feed(data[i:i + 1])
    return out


def one(line: bytes):
    """The single command parsed from `line` + CRLF, checked whole and byte by byte."""
    whole = feed_all(line + b"\r\n")
    assert feed_bytes(line + b"\r\n") == whole
    assert len(whole) == 1, whole
    return whole[0]


COMMAND_SHAPES = [
    (b"put 1 2 3 4\r\nbody\r\n", (b"put", 1, 2, 3, b"body")),
    (b"reserve\r\n", (b"reserve",)),
    (b"reserve-with-timeout 7\r\n", (b"reserve-with-timeout", 7)),
    (b"reserve-job 9\r\n", (b"reserve-job", 9)),
    (b"delete 5\r\n", (b"delete", 5)),
    (b"release 5 6 7\r\n", (b"release", 5, 6, 7)),
    (b"bury 5 6\r\n", (b"bury", 5, 6)),
    (b"touch 5\r\n", (b"touch", 5)),
    (b"watch tube-a\r\n", (b"watch", "tube-a")),
    (b"ignore tube-a\r\n", (b"ignore", "tube-a")),
    (b"use tube-a\r\n", (b"use", "tube-a")),
    (b"peek 5\r\n", (b"peek", 5)),
    (b"peek-ready\r\n", (b"peek-ready",)),
    (b"peek-delayed\r\n", (b"peek-delayed",)),
    (b"peek-buried\r\n", (b"peek-buried",)),
    (b"kick 3\r\n", (b"kick", 3)),
    (b"kick-job 5\r\n", (b"kick-job", 5)),
    (b"stats\r\n", (b"stats",)),
    (b"stats-job 5\r\n", (b"stats-job", 5)),
    (b"stats-tube tube-a\r\n", (b"stats-tube", "tube-a")),
    (b"list-tubes\r\n", (b"list-tubes",)),
    (b"list-tube-used\r\n", (b"list-tube-used",)),
    (b"list-tubes-watched\r\n", (b"list-tubes-watched",)),
    (b"pause-tube tube-a 30\r\n", (b"pause-tube", "tube-a", 30)),
    (b"quit\r\n", (b"quit",)),
]


def test_too_big_put_shape():
    """A too-big put: counted when its line is read, JOB_TOO_BIG once the body is skipped."""
    data = b"put 0 0 1 11\r\n" + b"x" * 11 + b"\r\n"
    assert feed_all(data, 10) == [TB0, TB]
    assert feed_bytes(data, 10) == [TB0, TB]


@pytest.mark.parametrize("data,shape", COMMAND_SHAPES, ids=[shape[0].decode() for _, shape in COMMAND_SHAPES])
def test_command_tuple_shape(data, shape):
    """Each command parses to its documented tuple, whole and byte by byte, with types."""
    max_job = 10
    whole = feed_all(data, max_job)
    assert whole == [shape]
    assert [tuple(map(type, c)) for c in whole] == [tuple(map(type, shape))]
    assert feed_bytes(data, max_job) == [shape]


def test_all_commands_in_one_feed_equal_one_by_one():
    """All commands concatenated parse to the same list as fed separately."""
    data = b"".join(d for d, _ in COMMAND_SHAPES)
    assert feed_all(data, 10) == [s for _, s in COMMAND_SHAPES]


@pytest.mark.parametrize("line,expected", [
    (b"foo", UC), (b"", UC), (b"PUT 0 0 60 1", UC), (b" list-tubes", UC),
    (b"list-tubes ", BF), (b"reservex", BF), (b"statsx", BF), (b"peek-ready ", BF),
    (b"put", UC), (b"put 0 0 60", BF), (b"put 0\t0 60 1", BF), (b"put -1 0 60 1", BF),
    (b"put +1 0 60 1", BF), (b"put abc 0 60 1", BF), (b"put 0 0 60 1 ", PUT_TRAILING),
    (b"delete abc", BF), (b"delete -1", BF), (b"delete 1 ", BF), (b"delete 1 2", BF),
    (b"delete", UC), (b"peek", UC), (b"kick", UC), (b"stats-job", BF),
    (b"release 1 0", BF), (b"bury 1", BF), (b"touch x", BF), (b"peek x", BF),
    (b"reserve-with-timeout", BF), (b"reserve-job x", BF),
    (b"pause-tube foo", BF), (b"pause-tube foo 1x", BF), (b"pause-tube -foo 1", PAUSE_BAD),
    (b"pause-tubefoo 1", (b"pause-tube", "foo", 1)),
    (b"use -foo", BF), (b"use foo bar", BF), (b"use foo!", BF), (b"use caf\xc3\xa9", BF),
    (b"use ", BF), (b"use  foo", BF), (b"watch a*", BF), (b"stats-tube -x", BF),
    (b"use foo-", (b"use", "foo-")), (b"use a+/;.$_()-", (b"use", "a+/;.$_()-")),
    (b"quitx", (b"quit",)), (b"list-tubesx", BF), (b"list-tube-usedx", BF),
    (b"list-tubes-watchedx", BF),
])
def test_error_lines(line, expected):
    """Malformed lines become (ERROR, reply) with beanstalkd's reply, never an exception."""
    assert one(line) == expected


@pytest.mark.parametrize("line", [
    b"reserve-with-timeout abc", b"reserve-with-timeout 0abc", b"reserve-with-timeout -1",
    b"reserve-with-timeout 4294967296", b"reserve-with-timeout 99999999999999999999",
    b"kick -1", b"kick 5abc", b"kick 4294967296", b"kick abc",
])
def test_d2_strict_integers(line):
    """D2: integers are strict decimal; sign, junk and overflow are BAD_FORMAT."""
    assert one(line) == BF


@pytest.mark.parametrize("op,arg_line", [
    (b"delete", b"delete %d"), (b"peek", b"peek %d"), (b"touch", b"touch %d"),
    (b"kick-job", b"kick-job %d"), (b"stats-job", b"stats-job %d"), (b"reserve-job", b"reserve-job %d"),
])
def test_u64_id_bounds(op, arg_line):
    """Ids are u64: 0 and 2^64-1 parse, 2^64 is BAD_FORMAT."""
    assert one(arg_line % 0) == (op, 0)
    assert one(arg_line % (2**64 - 1)) == (op, 2**64 - 1)
    assert one(arg_line % 2**64) == BF


def test_u32_bounds_of_put_fields():
    """pri, delay, ttr and bytes are u32: 2^32-1 parses (body size aside), 2^32 and 2^64 do not."""
    m = 2**32 - 1
    assert feed_all(b"put %d 0 60 1\r\nx\r\n" % m) == [(b"put", m, 0, 60, b"x")]
    assert feed_all(b"put 0 %d 60 1\r\nx\r\n" % m) == [(b"put", 0, m, 60, b"x")]
    assert feed_all(b"put 0 0 %d 1\r\nx\r\n" % m) == [(b"put", 0, 0, m, b"x")]
    for i in range(4):
        for big in (2**32, 2**64):
            fields = [b"0", b"0", b"60", b"1"]
            fields[i] = b"%d" % big
            out = feed_all(b"put " + b" ".join(fields) + b"\r\nx\r\n")
            assert out == [BF, UC], (i, big)


def test_u32_bounds_of_other_commands():
    """release pri/delay, bury pri, kick bound, pause-tube delay and reserve timeout are u32."""
    m = 2**32 - 1
    assert one(b"release 1 %d %d" % (m, m)) == (b"release", 1, m, m)
    assert one(b"release 1 %d 0" % (m + 1)) == BF
    assert one(b"release 1 0 %d" % (m + 1)) == BF
    assert one(b"release %d 0 0" % (2**64 - 1)) == (b"release", 2**64 - 1, 0, 0)
    assert one(b"release %d 0 0" % 2**64) == BF
    assert one(b"bury 1 %d" % m) == (b"bury", 1, m)
    assert one(b"bury 1 %d" % (m + 1)) == BF
    assert one(b"kick %d" % m) == (b"kick", m)
    assert one(b"pause-tube foo %d" % m) == (b"pause-tube", "foo", m)
    assert one(b"pause-tube foo %d" % (m + 1)) == BF
    assert one(b"reserve-with-timeout %d" % m) == (b"reserve-with-timeout", m)


def test_put_double_spaces_and_leading_zeros():
    """put accepts several spaces between fields and leading zeros (beanstalkd read_u32)."""
    assert feed_all(b"put  0  0  60  1\r\nx\r\n") == [(b"put", 0, 0, 60, b"x")]
    assert feed_all(b"put 000001 00 0060 0001\r\nx\r\n") == [(b"put", 1, 0, 60, b"x")]
    assert feed_all(b"put 0 0 60 00\r\n\r\n") == [(b"put", 0, 0, 60, b"")]
    # other commands accept extra leading spaces before an integer too
    assert one(b"delete   007") == (b"delete", 7)
    assert one(b"release  1  2  3") == (b"release", 1, 2, 3)


def test_put_body_may_hold_crlf_nul_and_high_bytes():
    """The body is exactly `bytes` bytes, whatever they are."""
    body = b"a\r\n\x00b\xff"
    assert feed_all(b"put 0 0 60 6\r\n" + body + b"\r\n") == [(b"put", 0, 0, 60, body)]
    assert feed_bytes(b"put 0 0 60 6\r\n" + body + b"\r\n") == [(b"put", 0, 0, 60, body)]


def put_line(n: int) -> bytes:
    """A put command line of exactly n bytes (without CRLF) for job pri 1, body size 1."""
    return b"put " + b"0" * (n - 12) + b"1 0 60 1"


@pytest.mark.parametrize("n,expected", [
    (221, [(b"put", 1, 0, 60, b"x"), (b"list-tube-used",)]),
    (222, [(b"put", 1, 0, 60, b"x"), (b"list-tube-used",)]),
    # 223 + CRLF = 225: the CR is the 224th byte, outside beanstalkd's search window
    (223, [BF, (b"list-tube-used",)]),
    (224, [BF, UC, (b"list-tube-used",)]),
    (225, [BF, UC, (b"list-tube-used",)]),
    (300, [BF, UC, (b"list-tube-used",)]),
    (5000, [BF, UC, (b"list-tube-used",)]),
])
def test_put_line_length(n, expected):
    """put lines of 221..225, 300 and 5000 bytes, each followed by body 'x' and a command."""
    line = put_line(n)
    assert len(line) == n
    data = line + b"\r\nx\r\nlist-tube-used\r\n"
    assert feed_all(data) == expected
    assert feed_bytes(data) == expected


@pytest.mark.parametrize("n,expected", [
    (221, [UC, (b"list-tube-used",)]),
    (222, [UC, (b"list-tube-used",)]),
    (223, [BF]),     # the discard skips to the next CRLF, swallowing list-tube-used
    (224, [BF, (b"list-tube-used",)]),
    (225, [BF, (b"list-tube-used",)]),
    (1000, [BF, (b"list-tube-used",)]),
    (5000, [BF, (b"list-tube-used",)]),
])
def test_unknown_line_length(n, expected):
    """An unknown command of n bytes + CRLF, then list-tube-used (beanstalkd's 224 window)."""
    data = b"z" * n + b"\r\nlist-tube-used\r\n"
    assert feed_all(data) == expected
    assert feed_bytes(data) == expected


def test_long_line_buffer_stays_small():
    """Feeding a 1 MB line without CRLF never holds more than line_max bytes."""
    p = Parser()
    for _ in range(1000):
        assert p.feed(b"z" * 1000) == []
        assert p.buffered() <= p.line_max
    assert p.feed(b"\r\nstats\r\n") == [BF, (b"stats",)]
    assert p.buffered() == 0


def test_stray_cr_keeps_buffering_until_window_full():
    """A CR not followed by LF: the line is incomplete until 224 bytes, then discarded to EOL."""
    p = Parser()
    assert p.feed(b"use fo\ro\r\n") == []
    assert p.feed(b"list-tube-used\r\n") == []
    assert p.buffered() == 26
    filler = b"z" * (224 - 26)
    assert p.feed(filler) == []
    assert p.feed(b"zz\r\nlist-tube-used\r\n") == [BF, (b"list-tube-used",)]
    assert p.buffered() == 0


def test_stray_cr_only_first_cr_counts():
    """Only the first CR in the window counts: a CR followed by LF later is not seen."""
    assert feed_all(b"use a\rb\r\n") == []
    assert feed_all(b"use a\r\n") == [(b"use", "a")]
    assert feed_all(b"\r\r\n") == []


def test_nul_in_command_line():
    """A NUL byte in a command line is BAD_FORMAT (beanstalkd's strlen check)."""
    assert one(b"use fo\x00o") == BF
    assert one(b"\x00") == BF
    assert one(b"put 0 0 60\x00 1") == BF
    assert feed_all(b"put 0 0 60 1\x00\r\nx\r\n") == [BF, UC]


def test_lf_only_line_end():
    """LF alone is not a line end: it joins the next line, which is then BAD_FORMAT."""
    p = Parser()
    assert p.feed(b"list-tube-used\n") == []
    assert p.feed(b"list-tube-used\r\n") == [BF]
    assert feed_all(b"stats\nfoo\r\n") == [BF]
    assert feed_all(b"\nstats\r\n") == [UC]


def test_expected_crlf():
    """A body whose last two bytes (at bytes+2) are not CRLF is EXPECTED_CRLF; the rest is
    parsed as commands."""
    assert feed_all(b"put 0 0 60 2\r\nabc\r\n") == [XC]
    p = Parser()
    assert p.feed(b"put 0 0 60 2\r\nabc\r\n") == [XC]
    assert p.buffered() == 1
    assert p.feed(b"list-tube-used\r\n") == [UC]   # "\nlist-tube-used"
    p = Parser()
    assert p.feed(b"put 0 0 60 5\r\nab\r\n") == []
    assert p.feed(b"list-tube-used\r\n") == [XC, UC]
    assert feed_all(b"put 0 0 60 1\r\nxyz") == [XC]
    assert feed_all(b"put 0 0 60 0\r\nxy") == [XC]
    assert feed_bytes(b"put 0 0 60 1\r\nx\n\r") == [XC]


def test_job_too_big_skips_exactly_size_plus_2():
    """JOB_TOO_BIG: the parser skips exactly bytes+2 bytes, whatever they are, then parses on."""
    for feeder in (feed_all, feed_bytes):
        assert feeder(b"put 0 0 60 11\r\n0123456789A\r\nstats\r\n", 10) == [
            TB0, TB, (b"stats",)]
        # the skipped bytes need not end in CRLF: exactly 13 bytes go, 'D' starts the next line
        assert feeder(b"put 0 0 60 11\r\n0123456789ABCDstats\r\n", 10) == [TB0, TB, UC]
        assert feeder(b"put 0 0 60 11 junk\r\n0123456789A\r\nstats\r\n", 10) == [
            TB0, TB, (b"stats",)]
    assert feed_all(b"put 0 0 60 10\r\n0123456789\r\n", 10) == [(b"put", 0, 0, 60, b"0123456789")]


def test_put_bad_format_does_not_read_a_body():
    """A put BAD_FORMAT (missing field) does not enter the body state: the body is a command."""
    assert feed_all(b"put 0 0 60\r\nstats\r\n", 10) == [BF, (b"stats",)]


def test_job_too_big_declared_u32_max_fed_in_chunks():
    """A declared size of 2^32-1 with a small limit: 4 GiB are skipped in chunks, the buffer
    stays empty, then the next command is parsed."""
    p = Parser(max_job_size=10)
    assert p.feed(b"put 0 0 60 4294967295\r\n") == [TB0]
    assert p.buffered() == 0
    chunk = b"\x00" * (1 << 20)
    total = 4294967295 + 2
    sent = 0
    while total - sent > len(chunk):
        assert p.feed(chunk) == []
        assert p.buffered() == 0
        sent += len(chunk)
    rest = total - sent
    assert p.feed(b"\r" * (rest - 1)) == []
    assert p.feed(b"\nstats\r\n") == [TB, (b"stats",)]
    assert p.buffered() == 0


def test_job_too_big_with_default_limit():
    """With the default 65535 limit, 65535 is accepted and 65536 is too big."""
    body = b"b" * 65535
    assert feed_all(b"put 0 0 60 65535\r\n" + body + b"\r\n") == [(b"put", 0, 0, 60, body)]
    assert feed_all(b"put 0 0 60 65536\r\n" + body + b"bb\r\n") == [TB0, TB]


def test_buffer_bounded_by_body_size():
    """While reading a body the buffer holds at most max_job_size + 2 bytes."""
    p = Parser(max_job_size=100)
    assert p.feed(b"put 0 0 60 100\r\n") == []
    for _ in range(100):
        assert p.feed(b"x") == []
        assert p.buffered() <= 102
    assert p.feed(b"\r\n") == [(b"put", 0, 0, 60, b"x" * 100)]
    assert p.buffered() == 0


def test_parse_line_never_sees_crlf():
    """parse_line takes a line without CRLF (used by the parser for non-put lines)."""
    assert parse_line(b"reserve") == (b"reserve",)
    assert parse_line(b"watch " + b"a" * 200) == (b"watch", "a" * 200)
    assert parse_line(b"watch " + b"a" * 201) == BF


def test_session_replies_to_every_parser_error_unchanged():
    """Session.handle returns the parser's error reply bytes as they are."""
    s = Session(ServerInfo(Engine(clock=ManualClock())))
    for err in (BF, UC, TB):
        assert s.handle(err) == err[1]
    for counted in (XC, TB0, PUT_TRAILING, PAUSE_BAD):
        assert s.handle(counted) == counted[2]
    s.close()


def test_session_job_too_big_and_draining():
    """A too-big put is counted at once and answers JOB_TOO_BIG after the skip; a put while
    draining answers DRAINING."""
    e = Engine(clock=ManualClock())
    s = Session(ServerInfo(e, max_job_size=10))
    assert s.handle(TB0) == b""
    assert s.handle(TB) == b"JOB_TOO_BIG\r\n"
    e.draining = True
    assert s.handle((b"put", 0, 0, 60, b"x")) == b"DRAINING\r\n"
    e.draining = False
    # beanstalkd made the job (id 1) before refusing it in drain mode: the next put gets id 2
    assert s.handle((b"put", 0, 0, 60, b"x")) == b"INSERTED 2\r\n"
    s.close()


def test_half_close_while_waiting_answers_timed_out():
    """Transcript "half-close while waiting", sans-IO: a reserve that waits (WAIT) and is then
    abandoned by a half-closing client answers TIMED_OUT (what the gateway sends)."""
    e = Engine(clock=ManualClock())
    s = Session(ServerInfo(e))
    p = Parser()
    cmds = p.feed(b"reserve\r\n")
    assert cmds == [(b"reserve",)]
    assert s.handle(cmds[0]) is WAIT
    assert e.waiting == 1
    assert s.cancel_wait() == b"TIMED_OUT\r\n"
    assert e.waiting == 0
    s.close()


def test_expected_crlf_put_consumes_a_job_id():
    """beanstalkd 1.12 creates the job (and its id) when the put line is accepted, before the
    body arrives; a put that ends in EXPECTED_CRLF has used an id (golden: ids 13-15)."""
    c = Conn(ServerInfo(Engine(clock=ManualClock())), 65535)
    assert c.feed(b"put 0 0 60 2\r\nabc\r\n") == [b"EXPECTED_CRLF\r\n"]
    assert c.feed(b"\r\n") == [b"UNKNOWN_COMMAND\r\n"]   # the leftover "\n" + CRLF
    assert c.feed(b"put 0 0 60 1\r\nx\r\n") == [b"INSERTED 2\r\n"]


def test_too_big_put_counts_in_cmd_put_when_its_line_is_parsed():
    """beanstalkd counts cmd-put before skipping a too-big body (golden JOB_TOO_BIG stats: 4)."""
    info = ServerInfo(Engine(clock=ManualClock()), max_job_size=10)
    c = Conn(info, 10)
    assert c.feed(b"put 0 0 60 4294967295\r\n") == []
    other = Conn(info, 10)
    stats = other.feed(b"stats\r\n")[0]
    assert b"\ncmd-put: 1\n" in stats
