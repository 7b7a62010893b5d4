"""RESP reply encoding (protocols/resp/encode.py), RESP2 and RESP3: literal bytes that
redis-server 7.0.15 sent for the same replies (probed with a raw socket: HELLO, HGETALL, HGET,
SMEMBERS, ZSCORE, ZRANGE WITHSCORES, INFO, XREAD, errors), and the same comparisons made live
against a scratch redis-server when one is installed (tests/resp_redis.py)."""
from __future__ import annotations

import hiredis
import pytest

from protocols.resp import encode as E
from protocols.resp.encode import Double, Error, Map, NullArray, Push, Set, Simple, Verbatim, encode
from tests import resp_redis
from tests.resp_redis import RawConnection

redis_port = resp_redis.redis_port   # the scratch redis-server fixture

# ZADD z <score> m; ZSCORE z m -> (RESP2 bulk text; RESP3 is the same text after ',')
SCORES = [("1.1", b"1.1000000000000001"), ("0.1", b"0.10000000000000001"),
          ("1e300", b"1.0000000000000001e+300"), ("inf", b"inf"), ("-inf", b"-inf"),
          ("21990232555520", b"21990232555520"), ("1.5", b"1.5"),
          ("1e-5", b"1.0000000000000001e-05"),
          ("123456789012345678", b"1.2345678901234568e+17"),
          ("0.30000000000000004", b"0.30000000000000004"), ("3", b"3"), ("1e17", b"1e+17"),
          ("1e16", b"10000000000000000"), ("2.5e-310", b"2.5000000000000171e-310"),
          ("-1.25", b"-1.25")]


@pytest.mark.parametrize("score,text", SCORES)
def test_doubles_as_redis_7_0_prints_them(score, text):
    assert encode(Double(float(score)), 2) == b"$%d\r\n%s\r\n" % (len(text), text)
    assert encode(Double(float(score)), 3) == b"," + text + b"\r\n"
    assert encode(float(score), 3) == b"," + text + b"\r\n"


HELLO3 = (b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3"
          b"\r\n$2\r\nid\r\n:39\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster"
          b"\r\n$7\r\nmodules\r\n*0\r\n")
HELLO_MAP = Map([(b"server", b"redis"), (b"version", b"7.0.15"), (b"proto", 3), (b"id", 39),
                 (b"mode", b"standalone"), (b"role", b"master"), (b"modules", [])])

# (value, RESP2 bytes, RESP3 bytes), each as redis-server 7.0.15 sent it; ... = same as RESP2,
# None = that protocol's form is another value (ZRANGE WITHSCORES) or not sent (HELLO 3)
CASES = [
    (HELLO_MAP, None, HELLO3),
    (Map({b"a": b"1", b"b": b"2"}), b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
     b"%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n"),                          # HGETALL
    (None, b"$-1\r\n", b"_\r\n"),                                                   # HGET, GET
    (NullArray, b"*-1\r\n", b"_\r\n"),                                              # XREAD, BLPOP
    (Set([b"x"]), b"*1\r\n$1\r\nx\r\n", b"~1\r\n$1\r\nx\r\n"),                      # SMEMBERS
    ([b"m4", Double(float("-inf")), b"m15", Double(-1.25), b"m7", Double(0.0)],
     b"*6\r\n$2\r\nm4\r\n$4\r\n-inf\r\n$3\r\nm15\r\n$5\r\n-1.25\r\n$2\r\nm7\r\n$1\r\n0\r\n", None),
    ([[b"m4", Double(float("-inf"))], [b"m15", Double(-1.25)], [b"m7", Double(0.0)]], None,
     b"*3\r\n*2\r\n$2\r\nm4\r\n,-inf\r\n*2\r\n$3\r\nm15\r\n,-1.25\r\n*2\r\n$2\r\nm7\r\n,0\r\n"),
    (Verbatim("txt", b"# Server\r\nredis_mode:standalone\r\n"),
     b"$33\r\n# Server\r\nredis_mode:standalone\r\n\r\n",
     b"=37\r\ntxt:# Server\r\nredis_mode:standalone\r\n\r\n"),                      # INFO
    (Error("WRONGTYPE Operation against a key holding the wrong kind of value"),
     b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", ...),
    (Error("ERR EXEC without MULTI"), b"-ERR EXEC without MULTI\r\n", ...),
    (Simple("PONG"), b"+PONG\r\n", ...), (3, b":3\r\n", ...), ([], b"*0\r\n", ...),
    (b"hello", b"$5\r\nhello\r\n", ...), ("x y", b"$3\r\nx y\r\n", ...),
    (b"", b"$0\r\n\r\n", ...), (-7, b":-7\r\n", ...),
]


@pytest.mark.parametrize("value,resp2,resp3", CASES)
def test_bytes_redis_sent(value, resp2, resp3):
    if resp2 is not None:
        assert encode(value, 2) == resp2
    if resp3 is not None:
        assert encode(value, 3) == (resp2 if resp3 is ... else resp3)


def test_the_other_resp3_types_and_their_resp2_forms():
    assert encode(True, 3) == b"#t\r\n" and encode(False, 3) == b"#f\r\n"
    assert encode(True, 2) == b":1\r\n" and encode(False, 2) == b":0\r\n"
    assert encode(Push([b"message", b"ch", b"hi"]), 3) == \
        b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
    assert encode(Push([b"m"]), 2) == b"*1\r\n$1\r\nm\r\n"
    assert encode(Verbatim("mkd", "é"), 3) == b"=6\r\nmkd:\xc3\xa9\r\n"
    assert encode(Map([(b"k", Map([(b"n", None)]))]), 2) == \
        b"*2\r\n$1\r\nk\r\n*2\r\n$1\r\nn\r\n$-1\r\n"
    assert encode(Map([(b"k", Set([]))]), 3) == b"%1\r\n$1\r\nk\r\n~0\r\n"
    assert encode((b"a", 1, None), 2) == b"*3\r\n$1\r\na\r\n:1\r\n$-1\r\n"
    assert encode(bytearray(b"ab"), 2) == b"$2\r\nab\r\n"
    assert encode(Double(float("nan")), 3) == b",nan\r\n"
    with pytest.raises(TypeError):
        encode(object(), 2)
    with pytest.raises(ValueError):
        encode(Verbatim("text", b"x"), 3)


def test_fast_paths():
    assert E.bulk(b"a" * 1500) == b"$1500\r\n" + b"a" * 1500 + b"\r\n"
    assert E.bulk(b"42") == b"$2\r\n42\r\n" and E.bulk("é") == b"$2\r\n\xc3\xa9\r\n"
    assert E.simple("OK") == E.OK and E.simple(b"PONG") == E.PONG
    assert E.error("ERR Function not found") == b"-ERR Function not found\r\n"
    assert E.integer(21990232555520) == b":21990232555520\r\n"
    assert E.null(2) == b"$-1\r\n" and E.null(3) == b"_\r\n"
    for n in (0, 1, 9, 10, 1023, 1024, 70000):
        assert E.bulk(b"z" * n) == b"$%d\r\n%s\r\n" % (n, b"z" * n)


def test_status_and_error_texts_cannot_break_the_framing():
    assert E.error("ERR bad\r\nthing") == b"-ERR bad  thing\r\n"
    assert encode(Simple("a\nb"), 3) == b"+a b\r\n"
    raw = b"ERR unknown command '\xff'"                 # raw request bytes carried as str
    assert E.error(raw.decode("utf-8", "surrogateescape")) == b"-" + raw + b"\r\n"


# -- live: the same replies from a scratch redis-server ------------------------------------

@pytest.mark.parametrize("proto", [2, 3])
def test_live_redis_sends_what_we_encode(redis_port, proto):
    c = RawConnection(redis_port)
    try:
        if proto == 3:
            hello = c.call("HELLO", 3)
            r = hiredis.Reader()
            r.feed(hello)
            assert encode(Map(r.gets().items()), 3) == hello
        c.call("FLUSHALL")
        for i, (score, _) in enumerate(SCORES):
            c.call("ZADD", "z", score, f"m{i}")
        for i, (score, _) in enumerate(SCORES):
            assert c.call("ZSCORE", "z", f"m{i}") == encode(Double(float(score)), proto)
        c.call("ZADD", "z2", "1.5", "a", "-2", "b")
        pairs = [[b"b", Double(-2.0)], [b"a", Double(1.5)]]
        want = pairs if proto == 3 else [x for p in pairs for x in p]
        assert c.call("ZRANGE", "z2", 0, -1, "WITHSCORES") == encode(want, proto)
        c.call("HSET", "h", "name", "send-email", "data", '{"to": "x\r\n"}')
        assert c.call("HGETALL", "h") == encode(
            Map([(b"name", b"send-email"), (b"data", b'{"to": "x\r\n"}')]), proto)
        assert c.call("HGET", "h", "nope") == encode(None, proto)
        c.call("SADD", "s", "only")
        assert c.call("SMEMBERS", "s") == encode(Set([b"only"]), proto)
        assert c.call("XREAD", "COUNT", 1, "STREAMS", "nostream", "0") == encode(NullArray, proto)
        assert c.call("LPOS", "h", "x") == encode(
            Error("WRONGTYPE Operation against a key holding the wrong kind of value"), proto)
        assert c.call("PING") == encode(Simple("PONG"), proto)
        assert c.call("HLEN", "h") == encode(2, proto)
        info = c.call("INFO", "keyspace")
        r = hiredis.Reader()
        r.feed(info)
        body = r.gets()
        assert info == encode(Verbatim("txt", body), proto)
    finally:
        c.close()
