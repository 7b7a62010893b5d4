"""The glide-mq over RESP conformance suite (conformance/glidemq.py) against jobgate, and
self-checks of the suite: its golden parser covers the whole golden file (228 steps, every
reply form), and its runner judges real replies of a scratch redis-server as PASS / FAIL /
KNOWN, with the CLI's exit status.

The RESP decoder and the comparator: tests/test_conformance_glidemq_compare.py.

The full golden against Redis needs glide-mq's Lua library, which is never committed (so no
test here can run it, and CI allows no skip): by hand, with the LIBRARY_SOURCE text of glide-mq
0.15.4's src/functions/index.ts (``${LIBRARY_VERSION}`` filled as 93) in a file outside the
repository, ``python -m conformance.glidemq --redis --library FILE`` must say 228 pass.
redis-server is a test dependency (.ci/run installs it).

Run: ``.venv/bin/python -m pytest tests/test_conformance_glidemq.py -v``.
"""
from __future__ import annotations

import shutil

import pytest

from conformance import glidemq
from conformance.glidemq_golden import (GoldenFormatError, Node, command_args, load,
                                        parse_golden, parse_python_reply, parse_reply,
                                        parse_scan, split_args, substitute)
from conformance.glidemq_known_differences import JOBGATE_EXPECTS, KNOWN, check_known
from conformance.glidemq_pyclient import describe
from conformance.glidemq_runner import Runner
from conformance.harness import jobgate_env
from conformance.servers import ServerError, ServerProcess

GOLDEN = load()
T0 = 1_764_000_000_000
REDIS = shutil.which("redis-server")


# ---------------------------------------------------------------------------------------------
# jobgate against the whole golden
# ---------------------------------------------------------------------------------------------
def test_jobgate_passes_every_step() -> None:
    """A fresh jobgate with a glidemq listener (SQLite, durability commit) answers every
    step as the golden does, except where glidemq_known_differences says otherwise."""
    problem = ""
    try:
        results, notes = glidemq.run_server(
            glidemq.jobgate_glidemq_cmd, jobgate_env(),
            lambda port: Runner("127.0.0.1", port, golden=GOLDEN).run())
    except ServerError as exc:
        problem = str(exc)
    if problem:
        pytest.fail("jobgate did not start a glidemq listener (is the RESP dialect registered "
                    f"as 'glidemq' in gateway/registry.py?): {problem}", pytrace=False)
    failed = [glidemq.format_result(r) for r in results if r.status == "FAIL"]
    counts = glidemq.summary(results)
    assert not failed, (f"{counts['fail']} of {len(results)} steps FAIL "
                        f"({counts['pass']} pass, {counts['known']} known):\n"
                        + "\n".join(failed + notes))
    assert len(results) == 228


# ---------------------------------------------------------------------------------------------
# the golden parser
# ---------------------------------------------------------------------------------------------
def test_golden_parses_every_step() -> None:
    steps = GOLDEN.steps
    assert len(steps) == 228
    assert len({s.id for s in steps}) == 228
    assert list(GOLDEN.sections) == list("ABCDEFGHIR")
    per = {sec: sum(s.section == sec for s in steps) for sec in GOLDEN.sections}
    assert per == {"A": 17, "B": 13, "C": 22, "D": 13, "E": 13, "F": 9, "G": 73, "H": 25,
                   "I": 25, "R": 18}
    assert "v93" in GOLDEN.header[0]
    for s in steps:
        assert s.commands and len(s.commands) == len(s.replies), s.id
        if s.python:
            assert describe(s.id) == s.commands[0], s.id
            for r in s.replies:
                parse_python_reply(substitute(r, T0))
        elif s.looped:
            parse_scan(s.replies[0])
        else:
            for c in s.commands:
                assert command_args(c, T0)
            for r in s.replies:
                parse_reply(substitute(r, T0))
    assert [s.id for s in steps if len(s.commands) > 1] == ["A17", "C22", "G73"]
    assert [s.id for s in steps if s.looped] == ["G64", "G65"]
    assert {s.id: s.order_check for s in steps if s.order_check} == {
        "E08": "increasing", "F09": "decreasing", "G26": "increasing", "G27": "increasing",
        "G46": "increasing", "I16": "increasing"}


def test_golden_connections_and_protocols() -> None:
    """A..H: one connection, RESP2 until A01's HELLO 3; I: its own, RESP2 until I24's
    HELLO 3 (I23's HELLO 2 keeps it at 2); R: redis-py."""
    by = {s.id: s for s in GOLDEN.steps}
    assert (by["A01"].connection, by["A01"].proto) == ("main", 2)
    assert all((s.connection, s.proto) == ("main", 3) for s in GOLDEN.steps
               if s.section in "ABCDEFGH" and s.id != "A01")
    assert all((s.connection, s.proto) == ("resp2", 2) for s in GOLDEN.steps
               if s.section == "I" and s.id != "I25")
    assert (by["I25"].connection, by["I25"].proto) == ("resp2", 3)
    assert all(s.connection == "redis-py" for s in GOLDEN.steps if s.section == "R")


def test_known_differences_name_real_steps() -> None:
    assert check_known([s.id for s in GOLDEN.steps]) == []
    for sid, texts in JOBGATE_EXPECTS.items():
        s = GOLDEN.by_id(sid)
        assert len(texts) == len(s.replies), sid
    assert set(KNOWN) >= {"H06", "H13", "H22", "H23", "C20", "D12", "G15"}
    assert check_known(["A01"]) and "Z99" not in KNOWN


def test_commands_and_placeholders() -> None:
    assert substitute("<T0+0> <T0+6000> <T0-5> <3*2^42+T0+30000>", 1000) == (
        "1000 7000 995 " + str(3 * 2 ** 42 + 31000))
    c21 = GOLDEN.by_id("C21").commands[0]
    args = command_args(c21, T0)
    assert args[8] == '{"s": "héllo ☃"}'.encode() and args[10] == str(T0).encode()
    assert args[13] == b"" and len(args) == 28
    assert command_args(GOLDEN.by_id("B07").commands[0], T0, b"#!lua name=x") == [
        b"FUNCTION", b"LOAD", b"REPLACE", b"#!lua name=x"]
    assert split_args('a "b c" "\\x41\\n\\"" \'d e\' ""') == [b"a", b"b c", b'A\n"', b"d e", b""]
    for bad in ('"open', 'x "a"b', "'open"):
        with pytest.raises(GoldenFormatError):
            split_args(bad)


def test_reply_notation_forms() -> None:
    assert parse_reply('bulk "a\\"b"') == Node("bulk", b'a"b')
    assert parse_reply("double 21990232555520") == Node("double", 21990232555520.0)
    assert parse_reply("verbatim txt \"x | y\"") == Node("verbatim", b"x | y", "txt")
    assert parse_reply("<int id>") == Node("wild", "id", "int")
    assert parse_reply("map{0} {}") == Node("map", ())
    m = parse_reply('map{bulk "k": null}')
    assert m == Node("map", ((Node("bulk", b"k"), Node("null")),))
    flat = parse_reply('array[2] [bulk "k": nil-bulk]')
    assert flat == Node("flatmap", ((Node("bulk", b"k"), Node("nil-bulk")),))
    assert parse_reply('array{1} {bulk "k": int 1}').kind == "flatmap"
    assert parse_reply("set[0] []") == Node("set", ())
    for bad in ("array[2] [int 1]", 'map{2} {bulk "k": int 1}', "array[1] [int 1: int 2]",
                'array[3] [int 1: int 2, int 3]', "blob \"x\"", "int 1 trailing", "int",
                'bulk "open', "set{1} {int 1: int 2}", "<bulk>"):
        with pytest.raises(GoldenFormatError):
            parse_reply(bad)
    n, keys = parse_scan('array[2] [bulk, array[..]] -> keys[2] ["a", "b"]')
    assert (n, keys) == (2, (b"a", b"b"))
    with pytest.raises(GoldenFormatError):
        parse_scan('array[2] [bulk, array[..]] -> keys[3] ["a", "b"]')
    assert parse_python_reply("list [('1', 2.0)]") == ("list", [("1", 2.0)])
    assert parse_python_reply("raised ResponseError: x") == ("raised", "ResponseError: x")
    for bad in ("str 93", "dict [1]", "thing 1", "raised nocolon"):
        with pytest.raises(GoldenFormatError):
            parse_python_reply(bad)


def test_golden_format_errors_name_the_line() -> None:
    good = "################ A s\n## A01 t\nC> PING\nS< simple \"PONG\"\n"
    assert len(parse_golden(good).steps) == 1
    for bad in (good + "C> PING\n",                     # command after a reply
                good + "## A01 again\nC> PING\nS< simple \"PONG\"\n",   # duplicate id
                good.replace("S< simple", "S< simpel"),  # unknown type
                good + "## B01 wrong section\nC> PING\nS< simple \"PONG\"\n",
                good + "junk line\n",
                good.replace('S< simple "PONG"\n', ""),  # no reply
                good.replace("C> PING", "C> PING   (looped)")):   # only SCAN loops
        with pytest.raises(GoldenFormatError):
            parse_golden(bad)


# ---------------------------------------------------------------------------------------------
# the runner and the CLI against a real redis-server
# ---------------------------------------------------------------------------------------------
needs_redis = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")


@pytest.fixture
def redis_port():
    """A scratch redis-server (no persistence) on a free port, stopped by PID."""
    with ServerProcess(glidemq.redis_cmd, (), probe=glidemq.PING) as srv:
        yield srv.port


@needs_redis
def test_runner_against_redis_before_the_library(redis_port: int) -> None:
    """Sections A and B01..B04 need no library: a fresh Redis passes them all."""
    steps = glidemq.select(GOLDEN, "A,B01-B04")
    results = Runner("127.0.0.1", redis_port, golden=GOLDEN, reference=True).run(steps)
    assert [r.status for r in results] == ["PASS"] * 21, [
        glidemq.format_result(r) for r in results if r.status != "PASS"]


_MINI = """################ A mini
## A01 PING
C> PING
S< simple "PANG"

## A02 ECHO
C> ECHO hi
S< bulk "hi"

## A03 HSET then HGETALL (RESP2 pairs, any order)
C> HSET h b 2 a 1
C> HGETALL h
S< int 2
S< array[4] [bulk "a": bulk "1", bulk "b": bulk "2"]
"""


@needs_redis
def test_runner_statuses(redis_port: int) -> None:
    mini = parse_golden(_MINI)

    def run(**kw) -> dict:
        return {r.id: r for r in Runner("127.0.0.1", redis_port, golden=mini, **kw).run()}

    plain = run(known={}, expects={})
    assert plain["A01"].status == "FAIL" and plain["A01"].diffs == [
        'reply: expected simple "PANG", got simple "PONG"']
    assert plain["A02"].status == plain["A03"].status == "PASS"
    known = run(known={"A01": "why", "A02": "why"}, expects={"A02": ['bulk "ho"']})
    assert (known["A01"].status, known["A01"].reason) == ("KNOWN", "why")
    assert (known["A02"].status, known["A02"].expected) == ("FAIL", "jobgate")
    assert run(known={"A02": "why"}, expects={"A02": ['bulk "hi"']})["A02"].status == "PASS"
    ref = run(known={"A01": "why"}, expects={"A02": ['bulk "ho"']}, reference=True)
    assert ref["A01"].status == "FAIL" and ref["A02"].status == "PASS"


@needs_redis
def test_cli_exit_status(redis_port: int, capsys) -> None:
    assert glidemq.main(["--port", str(redis_port), "--only", "A01-A17", "--reference"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS ") == 17 and "17 pass, 0 fail, 0 known" in out
    # FUNCTION LOAD of the stand-in: Redis refuses a library without functions
    assert glidemq.main(["--port", str(redis_port), "--only", "B05", "--reference"]) == 1
    assert "FAIL  B05" in capsys.readouterr().out
    assert glidemq.main(["--port", str(redis_port), "--only", "Z01"]) == 2
    assert glidemq.main(["--redis"]) == 2
