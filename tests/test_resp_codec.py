"""RESP request parser (protocols/resp/codec.py), sans-IO: pipelined glide-mq FCALLs, inline
commands, every split of a stream, every protocol error text and bound as redis-server 7.0.15
answers them (probed with raw sockets; literal bytes below), hostile and random bytes, and the
hiredis fast path against the exact pure-Python path. The reply encoder's tests are in
tests/test_resp_encode.py; both files compare with a live scratch redis-server when one is
installed (tests/resp_redis.py)."""
from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocols.resp.codec import INLINE_MAX, ProtocolError, RequestParser, split_args
from tests import resp_redis
from tests.resp_redis import roundtrip

redis_port = resp_redis.redis_port   # the scratch redis-server fixture

T0 = b"1764000000000"
# golden I05: the seed example's addJob (4 keys + 17 args), and its v93 tail of 4 more args
ADDJOB = [b"FCALL", b"glidemq_addJob", b"4", b"glide:{tasks}:id", b"glide:{tasks}:stream",
          b"glide:{tasks}:scheduled", b"glide:{tasks}:events", b"send-email",
          b'{"to": "user@example.com", "subject": "Hello"}', b"{}", T0, b"0", b"0", b"", b"0",
          b"", b"0", b"0", b"0", b"0", b"0", b"0", b"0", b"", b"0", b"", b"", b"0"]


def mb(*args: bytes) -> bytes:
    """`args` as a client writes a multibulk request."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def feed_all(pieces, **kw):
    """(items, parser) after feeding each piece in turn."""
    p, items = RequestParser(**kw), []
    for piece in pieces:
        items += p.feed(piece)
    return items, p


def pieces_at(data: bytes, cuts) -> list:
    cuts = sorted({c for c in cuts if 0 < c < len(data)})
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


PATHS = pytest.mark.parametrize("fast", [True, False], ids=["hiredis", "exact"])


# -- commands --------------------------------------------------------------------------------

@PATHS
def test_a_pipeline_of_100_addjob_fcalls_in_one_read(fast):
    cmds = [ADDJOB[:8] + [b'{"n":%d}' % i] + ADDJOB[9:] for i in range(100)]
    items, p = feed_all([b"".join(mb(*c) for c in cmds)], fast=fast)
    assert items == cmds and p.buffered() == 0


MIXED = (mb(*ADDJOB) + b"PING\r\n" + mb(b"SET", b"k\r\nx", b"a\r\n$3\r\n*1\r\n\0\xff+=~|")
         + b'ECHO "a b" \'c d\' ""\r\n' + b"*0\r\n" + mb(b"ECHO", b"") + b"*-1\r\n"
         + mb(b"ECHO", b"x" * 3000) + b"\n  \t\r\n" + mb(b"PING") * 40 + b"ECHO tail\n")
MIXED_CMDS = ([ADDJOB, [b"PING"], [b"SET", b"k\r\nx", b"a\r\n$3\r\n*1\r\n\0\xff+=~|"],
               [b"ECHO", b"a b", b"c d", b""], [b"ECHO", b""], [b"ECHO", b"x" * 3000]]
              + [[b"PING"]] * 40 + [[b"ECHO", b"tail"]])


# no byte that makes the hiredis path check elements one by one: its size accounting is used
CLEAN_CMDS = ([ADDJOB[:8] + [b"j" * n] + ADDJOB[9:] for n in (9, 10, 99, 100, 999, 1000, 5)]
              + [[b"PING"]] * 30 + [ADDJOB] * 3)
CLEAN = (b"".join(mb(*c) for c in CLEAN_CMDS[:20]) + b"*0\r\n" + b"*-1\r\n"
         + b"".join(mb(*c) for c in CLEAN_CMDS[20:]) + b"PING\r\n")


@PATHS
@pytest.mark.parametrize("data,cmds", [(MIXED, MIXED_CMDS), (CLEAN, CLEAN_CMDS + [[b"PING"]])],
                         ids=["mixed", "clean"])
def test_a_stream_split_at_every_byte_boundary_gives_the_same_commands(data, cmds, fast):
    assert feed_all([data], fast=fast)[0] == cmds
    for cut in range(1, len(data)):
        items, p = feed_all([data[:cut], data[cut:]], fast=fast)
        assert items == cmds, cut
        assert p.buffered() == 0


@PATHS
def test_one_byte_at_a_time(fast):
    items, p = feed_all([MIXED[i:i + 1] for i in range(len(MIXED))], fast=fast)
    assert items == MIXED_CMDS and p.buffered() == 0


def test_an_unfinished_request_is_held_and_counted():
    p = RequestParser()
    assert p.feed(mb(*ADDJOB)[:-100]) == []
    assert 0 < p.buffered() < len(mb(*ADDJOB))
    assert p.feed(mb(*ADDJOB)[-100:]) == [ADDJOB] and p.buffered() == 0


@pytest.mark.parametrize("line,argv", [
    (b"PING", [b"PING"]), (b"  SET  k\tv  ", [b"SET", b"k", b"v"]),
    (b'ECHO "x y"', [b"ECHO", b"x y"]), (b'SET k ""', [b"SET", b"k", b""]),
    (b'ECHO "a\\x41\\n\\r\\t\\b\\a\\"\\\\\\q"', [b"ECHO", b'aA\n\r\t\b\x07"\\q']),
    (b'ECHO "\\x4"', [b"ECHO", b"x4"]), (b"ECHO 'it\\'s' '\\n'", [b"ECHO", b"it's", b"\\n"]),
    (b'ECHO a"b c"', [b"ECHO", b"ab c"]), (b"ECHO \x0bx\x0by", [b"ECHO", b"x\x0by"]),
    (b'"" ""', [b"", b""]), (b"\xff\xfe", [b"\xff\xfe"]), (b" \t\x0b", []),
    (b'ECHO "a"x', None), (b"ECHO 'a'x", None), (b'ECHO "a', None), (b"ECHO 'a\\'", None),
    (b'ECHO a"b c"d', None),
])
def test_inline_lines_are_split_as_redis_splits_them(line, argv):
    assert split_args(line) == argv


def test_inline_line_ends_and_blank_lines():
    items, _ = feed_all([b"PING\nPING\r\n\r\n\n \t \r\nECHO a\rb\r\n"])
    assert items == [[b"PING"], [b"PING"], [b"ECHO", b"a", b"b"]]


# -- what redis-server 7.0.15 answered, byte for byte -------------------------------------
# (input, commands Redis ran, protocol error text or None, closed)
REDIS = [
    (b"*-5\r\nPING\r\n", [[b"PING"]], None),
    (b"*0\r\nPING\r\n", [[b"PING"]], None),
    (b"*1\r\n$4\r\nPINGxxPING\r\n", [[b"PING"], [b"PING"]], None),      # 2 bytes skipped unread
    (b"*1\rx$4\r\nPING\r\n", [[b"PING"]], None),                        # \n not checked
    (b"*1\r\n$4\rxPING\r\n", [[b"PING"]], None),
    (b"*2\r\n$4\r\nECHO\r\n$1\r\n\0\r\n", [[b"ECHO", b"\0"]], None),
    (b'ECHO "a\\x41\\n"\r\n', [[b"ECHO", b"aA\n"]], None),
    (b"ECHO 'a\\'b'\r\n", [[b"ECHO", b"a'b"]], None),
    (b"ECHO \x0bx\x0by\r\n", [[b"ECHO", b"x\x0by"]], None),
    (b"*2147483648\r\n", [], "invalid multibulk length"),
    (b"*01\r\n", [], "invalid multibulk length"),
    (b"*1x\r\n", [], "invalid multibulk length"),
    (b"* 1\r\n", [], "invalid multibulk length"),
    (b"*+1\r\n", [], "invalid multibulk length"),
    (b"*-0\r\n", [], "invalid multibulk length"),
    (b"*1\r\n$536870913\r\n", [], "invalid bulk length"),
    (b"*1\r\n$-1\r\n", [], "invalid bulk length"),
    (b"*1\r\n$04\r\n", [], "invalid bulk length"),
    (b"*1\r\n$\r\n", [], "invalid bulk length"),
    (b"*1\r\n$-0\r\n", [], "invalid bulk length"),
    (b"*1\r\n+PING\r\n", [], "expected '$', got '+'"),
    (b"*1\r\n\r\n", [], "expected '$', got ' '"),
    (b"*1\r\n\n\r\n", [], "expected '$', got ' '"),
    (b"*1\r\n\x01\r\n", [], "expected '$', got '\x01'"),
    (b'ECHO "a"x\r\n', [], "unbalanced quotes in request"),
    (b'PING\r\nECHO a"b c"d\r\nPING\r\n', [[b"PING"]], "unbalanced quotes in request"),
]


@PATHS
@pytest.mark.parametrize("data,cmds,error", REDIS)
def test_what_redis_7_0_answered(data, cmds, error, fast):
    items, p = feed_all([data], fast=fast)
    want = cmds + ([ProtocolError(error)] if error else [])
    assert items == want
    if error:
        assert items[-1].reply == b"-ERR Protocol error: " + error.encode("latin-1") + b"\r\n"
        assert p.feed(b"PING\r\n") == [] and p.buffered() == 0   # dead: Redis closed


LIVE = REDIS + [
    (b"*1\r\n*1\r\n$4\r\nPING\r\n", [], "expected '$', got '*'"),
    (b"*1\r\n:1\r\n", [], "expected '$', got ':'"),
    (mb(b"ECHO", b"a+b=c~d") + b"*2\r\n$4\r\nECHO\r\n=5\r\ntxt:a\r\n", [[b"ECHO", b"a+b=c~d"]],
     "expected '$', got '='"),
]


@pytest.mark.parametrize("data,cmds,error", LIVE, ids=[repr(c[0])[:40] for c in LIVE])
def test_live_redis_agrees(redis_port, data, cmds, error):
    """Sends `data` to a scratch redis-server: its reply bytes must be those of the commands we
    cut (only PING/ECHO here) followed by our error reply and a close."""
    want = b"".join(b"+PONG\r\n" if c == [b"PING"] else b"$%d\r\n%s\r\n" % (len(c[1]), c[1])
                    for c in cmds)
    if error:
        want += ProtocolError(error).reply
    assert roundtrip(redis_port, data, closes=bool(error)) == want


# -- bounds ----------------------------------------------------------------------------------

@PATHS
def test_a_declared_bulk_over_max_bulk_is_refused_at_its_header(fast):
    p = RequestParser(max_bulk=1000, fast=fast)
    assert p.feed(mb(b"PING") + b"*2\r\n$4\r\nECHO\r\n$1001\r\n") == [
        [b"PING"], ProtocolError("invalid bulk length")]
    for value in (b"x" * 1001, b"+" * 1001):      # '+' makes the hiredis path walk elements
        p = RequestParser(max_bulk=1000, fast=fast)
        assert p.feed(mb(b"PING") + mb(b"ECHO", value)) == [
            [b"PING"], ProtocolError("invalid bulk length")]
    p = RequestParser(max_bulk=1000, fast=fast)
    assert p.feed(b"*2\r\n$4\r\nECHO\r\n$1000\r\n" + b"x" * 600) == []
    assert p.buffered() == 4 + 600
    assert p.feed(b"x" * 400 + b"\r\n") == [[b"ECHO", b"x" * 1000]]


def test_a_huge_declared_bulk_holds_only_what_arrived():
    p = RequestParser()                       # 512 MiB, as proto-max-bulk-len
    assert p.feed(b"*1\r\n$536870912\r\n") == []
    for _ in range(4):
        assert p.feed(b"\0" * 65536) == []
    assert p.buffered() == 4 * 65536


@pytest.mark.parametrize("head,mark,what", [(b"", b"x", "inline request"),
                                            (b"", b"*", "mbulk count string"),
                                            (b"*1\r\n", b"$", "bulk count string")])
def test_header_and_inline_lines_over_64k(head, mark, what):
    fill = b"x" if mark == b"x" else b"0"
    line = head + mark + fill * (INLINE_MAX - 1)          # a 64 KiB line, its end not yet come
    p = RequestParser()
    assert p.feed(line) == [] and p.buffered() == len(line) - len(head)
    assert p.feed(fill) == [ProtocolError("too big " + what)]
    # decided by bytes, not by reads: the same line in one piece with its end is refused too
    assert RequestParser().feed(line + fill + b"\r\n") == [ProtocolError("too big " + what)]
    if mark == b"x":
        assert RequestParser().feed(line[:-1] + b"\r\n") == [[line[:-1]]]
    else:
        p = RequestParser()
        assert p.feed(line + b"\r") == []     # waits for the byte after \r, as Redis does
        err = "invalid multibulk length" if mark == b"*" else "invalid bulk length"
        assert p.feed(b"\n") == [ProtocolError(err)]


def test_a_64k_line_arriving_one_byte_at_a_time():
    p = RequestParser()
    for _ in range(INLINE_MAX):
        assert p.feed(b"y") == []
    assert p.feed(b"y") == [ProtocolError("too big inline request")]


def test_multibulk_count_bound():
    p = RequestParser()
    assert p.feed(b"*1048576\r\n") == [] and p.buffered() == 0
    assert RequestParser().feed(b"*1048577\r\n") == [ProtocolError("invalid multibulk length")]


def test_a_nul_before_the_line_end_stalls_the_request_as_in_redis():
    """Redis looks for the line end with strchr, which stops at a NUL: such a request never
    completes, and is refused as too big after 64 KiB."""
    for data, what in [(b"PING\0\nPING\r\n", "inline request"),
                       (b"*1\0\r\n" + mb(b"PING"), "mbulk count string"),
                       (b"*2\r\n$4\r\nECHO\r\n$1\0\r\nx\r\n", "bulk count string")]:
        p = RequestParser()
        assert p.feed(data) == []
        assert p.feed(b"z" * INLINE_MAX) == [ProtocolError("too big " + what)]


@PATHS
def test_deep_nesting_is_refused_at_once(fast):
    data = mb(b"PING") + b"*1\r\n" * 200_000 + b"$1\r\nx\r\n"
    want = [[b"PING"], ProtocolError("expected '$', got '*'")]
    assert RequestParser(fast=fast).feed(data) == want


@PATHS
@pytest.mark.parametrize("element", [
    b":1\r\n", b"+x\r\n", b"-ERR x\r\n", b",1.5\r\n", b"#t\r\n", b"_\r\n", b"(12\r\n",
    b"=5\r\ntxt:a\r\n", b"%1\r\n$1\r\na\r\n:1\r\n", b"~1\r\n$1\r\na\r\n", b">1\r\n$1\r\na\r\n",
    b"|1\r\n+a\r\n+b\r\n", b"*1\r\n$1\r\na\r\n", b"*2147483647\r\n", b"!3\r\nabc\r\n"])
def test_a_non_bulk_element_after_a_pipeline(element, fast):
    data = mb(b"PING") * 30 + b"*2\r\n$4\r\nECHO\r\n" + element + mb(b"PING")
    got = RequestParser(fast=fast).feed(data)
    assert got == [[b"PING"]] * 30 + [ProtocolError(f"expected '$', got '{chr(element[0])}'")]


@pytest.mark.parametrize("marker", [b"*", b"~", b">", b"|"])
def test_hiredis_never_sees_a_huge_aggregate_count(marker):
    """hiredis allocates a list for the declared count on sight (8 bytes an element), so a
    buffer holding one goes the exact way, which refuses it: memory stays small."""
    data = mb(b"PING") * 3 + b"*2\r\n$4\r\nECHO\r\n" + marker + b"99999999\r\n"
    tracemalloc.start()
    try:
        got = RequestParser().feed(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [[b"PING"]] * 3 + [ProtocolError(f"expected '$', got '{marker.decode()}'")]
    assert peak < 1_000_000


@PATHS
@pytest.mark.parametrize("data,cmds", [
    (b"~1\r\n$4\r\nPING\r\n>1\r\n|1\r\n%1\r\n", [[b"~1"], [b"$4"], [b"PING"], [b">1"], [b"|1"],
                                                   [b"%1"]]),
    (b"%1\r\n$1\r\na\r\n:1\r\n" + mb(b"PING"), [[b"%1"], [b"$1"], [b"a"], [b":1"], [b"PING"]])])
def test_top_level_resp3_types_are_inline_commands(data, cmds, fast):
    """Only `*` starts a multibulk; `~1`, `%1`, `$4` ... are inline lines, as in Redis."""
    assert RequestParser(fast=fast).feed(mb(b"PING") * 3 + data) == [[b"PING"]] * 3 + cmds


def test_the_query_buffer_limit_closes_without_a_reply():
    p = RequestParser(max_bulk=100, max_query=1000)
    assert p.feed(b"*20\r\n" + b"$100\r\n" + b"x" * 100 + b"\r\n") == []
    assert p.feed((b"$100\r\n" + b"x" * 100 + b"\r\n") * 9) == [] and p.buffered() == 1000
    out = p.feed(b"$1\r\nx")
    assert out == [ProtocolError("max query buffer length reached", silent=True)]
    assert out[0].reply == b"" and p.buffered() == 0


# -- properties ------------------------------------------------------------------------------

TOKENS = [b"*", b"$", b"+", b"-", b":", b",", b"#", b"_", b"(", b"=", b"%", b"~", b">", b"|",
          b"!", b"\r\n", b"\r", b"\n", b"\0", b" ", b'"', b"'", b"\\", b"0", b"1", b"2", b"-1",
          b"3", b"999999", b"65537", b"txt:", b"PING", b"*1\r\n", b"*2\r\n", b"$1\r\n",
          b"$3\r\n", b"*3\r\n$1\r\n", mb(b"PING"), mb(b"ECHO", b"a\r\n")]
hostile = st.lists(st.one_of(st.sampled_from(TOKENS), st.binary(max_size=12)), max_size=40)
argv_st = st.lists(st.one_of(st.binary(max_size=20), st.sampled_from(TOKENS)), min_size=1,
                   max_size=6)
cuts_st = st.lists(st.integers(min_value=1, max_value=3000), max_size=8)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _inline_ok(argv) -> bool:
    return argv[0][:1] != b"*" and all(a and all(c > 32 and c not in b"\"'\x7f" for c in a)
                                       for a in argv)


@FUZZ
@given(st.lists(st.tuples(argv_st, st.booleans()), min_size=1, max_size=12), cuts_st,
       st.booleans())
def test_valid_commands_split_anywhere_parse_to_the_same_argv(cmds, cuts, fast):
    data = b"".join(b" ".join(a) + b"\r\n" if inline and _inline_ok(a) else mb(*a)
                    for a, inline in cmds)
    items, p = feed_all(pieces_at(data, cuts), fast=fast)
    assert items == [a for a, _ in cmds] and p.buffered() == 0


@FUZZ
@given(hostile, cuts_st)
def test_hostile_streams_never_raise_and_stay_bounded(tokens, cuts):
    p, seen_error = RequestParser(max_bulk=64, max_query=4096), False
    for piece in pieces_at(b"".join(tokens), cuts):
        for item in p.feed(piece):
            assert not seen_error
            if isinstance(item, ProtocolError):
                seen_error = True
                assert item.reply.startswith(b"-ERR Protocol error: ") or item.silent
            else:
                assert item and all(type(a) is bytes for a in item)
        assert p.buffered() <= 4096


@FUZZ
@given(hostile, cuts_st)
def test_the_hiredis_path_equals_the_exact_path(tokens, cuts):
    fast, exact = RequestParser(max_bulk=64), RequestParser(max_bulk=64, fast=False)
    for piece in pieces_at(b"".join(tokens), cuts):
        assert fast.feed(piece) == exact.feed(piece)
        assert fast.buffered() == exact.buffered()


clean_arg = st.text(alphabet='abc{}:,"0123456789 \r\n$*-', max_size=1100).map(str.encode)
big_argv = st.lists(st.one_of(st.binary(max_size=400), st.sampled_from(TOKENS), clean_arg,
                              clean_arg), min_size=1, max_size=30)


@FUZZ
@given(st.lists(big_argv, min_size=1, max_size=30), hostile,
       st.lists(st.integers(min_value=1, max_value=60_000), max_size=12))
def test_long_pipelines_with_a_hostile_tail_on_both_paths(cmds, tail, cuts):
    """Pipelines of many KiB (hiredis drops its consumed prefix several times) cut anywhere,
    then hostile bytes: both paths give the pipeline, then the same verdict on the tail."""
    data = b"".join(mb(*a) for a in cmds)
    pieces = pieces_at(data + b"".join(tail), cuts)
    fast, exact = feed_all(pieces, max_bulk=1000), feed_all(pieces, max_bulk=1000, fast=False)
    assert fast[0] == exact[0] and fast[0][:len(cmds)] == cmds
    assert fast[1].buffered() == exact[1].buffered()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), cuts_st)
def test_random_bytes_never_raise(data, cuts):
    fast, exact = RequestParser(), RequestParser(fast=False)
    for piece in pieces_at(data, cuts):
        assert fast.feed(piece) == exact.feed(piece)
