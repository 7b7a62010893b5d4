"""Self-checks of the glide-mq conformance suite's wire side (conformance/glidemq_resp.py,
glidemq_compare.py, glidemq_pyclient.py): the RESP decoder keeps wire types and refuses hostile
bytes; every golden reply, written on the wire and read back, passes the comparator; the
comparator catches a wrong value, a wrong type and a wrong stream-id order, and applies the
golden's normalisation (map and set order, KEYS, INFO, SCAN) and nothing more.

The golden's parser and the runner against real servers: tests/test_conformance_glidemq.py.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from conformance.glidemq_compare import (Rules, check_order, compare, compare_scan, render,
                                         rules_for)
from conformance.glidemq_golden import (SID, Node, command_args, load, parse_python_reply,
                                        parse_reply, substitute)
from conformance.glidemq_pyclient import compare_py
from conformance.glidemq_resp import (Incomplete, ProtocolError, decode, encode_command,
                                      encode_node)

GOLDEN = load()
T0 = 1_764_000_000_000


def _live(data: bytes) -> Node:
    node, used = decode(data)
    assert used == len(data)
    return node


# ---------------------------------------------------------------------------------------------
# the RESP decoder
# ---------------------------------------------------------------------------------------------
def test_decoder_keeps_wire_types() -> None:
    data = (b"+OK\r\n-ERR x\r\n:-3\r\n$4\r\na\r\nb\r\n$-1\r\n_\r\n,1.5\r\n,inf\r\n#t\r\n"
            b"(12345678901234567890\r\n=7\r\ntxt:a b\r\n*-1\r\n!3\r\nbad\r\n"
            b"*2\r\n:1\r\n$0\r\n\r\n~1\r\n+m\r\n%1\r\n+k\r\n:2\r\n>1\r\n+p\r\n"
            b"|1\r\n+a\r\n+b\r\n:9\r\n")
    got, pos = [], 0
    while pos < len(data):
        node, pos = decode(data, pos)
        got.append(node)
    assert got == [
        Node("simple", b"OK"), Node("error", b"ERR x"), Node("int", -3),
        Node("bulk", b"a\r\nb"), Node("nil-bulk"), Node("null"), Node("double", 1.5),
        Node("double", float("inf")), Node("bool", True),
        Node("bignum", b"12345678901234567890"), Node("verbatim", b"a b", "txt"),
        Node("nil-array"), Node("error", b"bad"),
        Node("array", (Node("int", 1), Node("bulk", b""))), Node("set", (Node("simple", b"m"),)),
        Node("map", ((Node("simple", b"k"), Node("int", 2)),)),
        Node("push", (Node("simple", b"p"),)), Node("int", 9)]      # attribute skipped


def test_decoder_waits_for_a_whole_reply() -> None:
    data = b"*3\r\n$5\r\nhello\r\n%1\r\n+k\r\n,2.5\r\n=8\r\ntxt:abcd\r\n"
    for cut in range(len(data)):
        with pytest.raises(Incomplete):
            decode(data[:cut])
    assert decode(data)[1] == len(data)


@pytest.mark.parametrize("data", [
    b"?x\r\n", b":12a\r\n", b"$3\r\nabcde\r\n", b"$-5\r\n", b"*-2\r\n", b"_x\r\n", b",one\r\n",
    b"#x\r\n", b"(1.5\r\n", b"=3\r\nabc\r\n", b"*1\r\n?\r\n", b"$99999999999\r\n",
    b"+" + b"a" * 70000])
def test_decoder_refuses_hostile_bytes(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(data)


def test_encode_command() -> None:
    assert encode_command([b"SET", b"k", b""]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"


# ---------------------------------------------------------------------------------------------
# the comparator
# ---------------------------------------------------------------------------------------------
def _concrete(node: Node, sids) -> Node:
    """A golden node made concrete: wildcards filled with a value of their type, ``<SID>``
    with the next id of ``sids``, INFO's ``a | b`` written as lines."""
    if node.kind == "wild":
        return {"bulk": Node("bulk", b"any"), "int": Node("int", 7),
                "array": Node("array", ())}[node.fmt]
    if node.kind in ("bulk", "verbatim") and node.value == SID:
        return replace(node, value=next(sids))
    if node.kind in ("array", "set", "push"):
        return replace(node, value=tuple(_concrete(x, sids) for x in node.value))
    if node.kind in ("map", "flatmap"):
        return replace(node, value=tuple((_concrete(a, sids), _concrete(b, sids))
                                         for a, b in node.value))
    return node


def _wire(step, text: str) -> tuple[Node, Node, Rules]:
    """(golden node, that reply written on the wire and read back, rules)."""
    argv = command_args(step.commands[0], T0)
    golden = parse_reply(substitute(text, T0))
    order = range(100, 0, -1) if step.order_check == "decreasing" else itertools.count(1)
    sids = (f"{T0}-{i}".encode() for i in order)
    node = _concrete(golden, sids)
    if argv[0].upper() == b"INFO":
        node = replace(node, value=node.value.replace(b" | ", b"\r\nother:1\r\n") + b"\r\n")
    return golden, _live(encode_node(node)), rules_for(argv)


def test_every_golden_reply_passes_written_on_the_wire() -> None:
    checked = 0
    for s in GOLDEN.steps:
        if s.python or s.looped:
            continue
        for text in s.replies:
            golden, live, rules = _wire(s, text)
            assert compare(golden, live, rules) == [], s.id
            checked += 1
        if s.order_check:
            assert check_order(_wire(s, s.replies[0])[1], s.order_check) == [], s.id
    assert checked == 210 + 5


def test_comparator_catches_a_wrong_value() -> None:
    g = parse_reply(substitute(GOLDEN.by_id("G01").replies[0], T0))
    live = _live(encode_node(g).replace(b"send-email", b"send-emaiL"))
    assert compare(g, live) == [
        '{name}: expected bulk "send-email", got bulk "send-emaiL"']
    live = _live(encode_node(g).replace(str(T0).encode(), str(T0 + 1).encode()))
    assert compare(g, live) == [f'{{timestamp}}: expected bulk "{T0}", got bulk "{T0 + 1}"']
    g30 = parse_reply(substitute(GOLDEN.by_id("G30").replies[0], T0))
    wrong = _live(encode_node(g30).replace(b",21990232555520", b",21990232555521"))
    assert compare(g30, wrong) == [
        "[3][1]: expected double 21990232555520, got double 21990232555521"]
    swapped = Node("array", (g30.value[1], g30.value[0], *g30.value[2:]))
    assert len(compare(g30, swapped)) == 4                      # ZRANGE order matters
    assert compare(parse_reply("int 22"), _live(b":21\r\n")) == [
        "reply: expected int 22, got int 21"]


def test_comparator_catches_a_wrong_type() -> None:
    pairs = [("bulk \"1\"", b"+1\r\n"), ("null", b"$-1\r\n"), ("nil-bulk", b"_\r\n"),
             ("int 1", b"$1\r\n1\r\n"), ("double 5", b"$1\r\n5\r\n"),
             ('set[1] [bulk "a"]', b"*1\r\n$1\r\na\r\n"),
             ('verbatim txt "a"', b"$1\r\na\r\n"), ('error "E"', b"+E\r\n"),
             ('map{1} {bulk "k": bulk "v"}', b"*2\r\n$1\r\nk\r\n$1\r\nv\r\n"),
             ('array{1} {bulk "k": bulk "v"}', b"%1\r\n$1\r\nk\r\n$1\r\nv\r\n"),
             ("<int id>", b"$1\r\n1\r\n")]
    for text, data in pairs:
        diffs = compare(parse_reply(text), _live(data))
        assert len(diffs) == 1 and "expected" in diffs[0], (text, diffs)
    # a key's type counts too
    diffs = compare(parse_reply('map{1} {bulk "k": int 1}'), _live(b"%1\r\n+k\r\n:1\r\n"))
    assert diffs == ['reply: missing key bulk "k" (expected value int 1)',
                     'reply: unexpected key simple "k": int 1']


def test_comparator_checks_stream_ids_and_their_order() -> None:
    s = GOLDEN.by_id("I16")
    golden, live, _ = _wire(s, s.replies[0])
    assert compare(golden, live) == [] and check_order(live, "increasing") == []
    backwards = Node("array", tuple(reversed(live.value)))
    assert compare(golden, backwards) != []      # the entries' contents differ too
    same = Node("array", tuple(replace(e, value=(replace(e.value[0], value=i),) + e.value[1:])
                               for e, i in zip(live.value, (b"5-1", b"5-0"))))
    assert compare(golden, same) == []
    assert check_order(same, "increasing") == [
        "entry order: ids not increasing: [0] 5-1, [1] 5-0"]
    assert check_order(same, "decreasing") == []
    bad = Node("array", (replace(same.value[0], value=(Node("bulk", b"5"),)
                                 + same.value[0].value[1:]),))
    assert '[0][0]: expected a stream id, got bulk "5"' in compare(golden, bad)
    assert "not [stream id, fields]" in check_order(bad, "increasing")[0]


def test_comparator_normalisation() -> None:
    g = parse_reply('map{2} {bulk "a": bulk "1", bulk "b": bulk "2"}')
    assert compare(g, _live(b"%2\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n")) == []
    assert compare(g, _live(b"%1\r\n$1\r\nb\r\n$1\r\n2\r\n")) == [
        'reply: missing key bulk "a" (expected value bulk "1")']
    keys = parse_reply('array[2] [bulk "x", bulk "y"]')
    reordered = _live(b"*2\r\n$1\r\ny\r\n$1\r\nx\r\n")
    assert compare(keys, reordered, rules_for([b"KEYS", b"*"])) == []
    assert compare(keys, reordered, rules_for([b"LRANGE", b"l", b"0", b"-1"])) != []
    info = parse_reply('verbatim txt "# Server | redis_mode:standalone"')
    body = b"# Server\r\nredis_version:7\r\nredis_mode:standalone\r\n"
    assert compare(info, _live(b"=%d\r\ntxt:%s\r\n" % (len(body) + 4, body)),
                   rules_for([b"INFO", b"SERVER"])) == []
    body = b"# Server\r\nredis_mode:cluster\r\n"
    assert compare(info, _live(b"=%d\r\ntxt:%s\r\n" % (len(body) + 4, body)),
                   rules_for([b"INFO", b"SERVER"])) == [
        'reply: INFO body lacks the line "redis_mode:standalone"']
    assert compare_scan((b"a", b"b"), [b"b", b"a", b"a"]) == []
    assert compare_scan((b"a", b"b"), [b"a", b"c"]) == ['SCAN: missing key "b"',
                                                        'SCAN: unexpected key "c"']
    assert render(Node("bulk", b"\xff\n")) == 'bulk "\\xff\\n"'


def test_python_comparison() -> None:
    r26 = parse_python_reply(substitute(GOLDEN.by_id("R26").replies[0], T0))[1]
    r36 = parse_python_reply(substitute(GOLDEN.by_id("R36").replies[0], T0))[1]
    assert compare_py(r26, r26) == [] and compare_py(r26, r36) != []   # tuple vs list
    r27 = parse_python_reply(GOLDEN.by_id("R27").replies[0])[1]
    assert compare_py(r27, [("1-0", {"jobId": "1", "name": "send-email"})]) == []
    assert compare_py(r27, [("x", {"jobId": "1", "name": "send-email"})]) == [
        "[0][0]: expected a stream id, got 'x'"]
    assert compare_py({"a": "1"}, {"a": 1}) == ["['a']: expected str '1', got int 1"]
