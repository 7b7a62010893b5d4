"""Compare a live RESP reply (a ``Node`` from glidemq_resp) with a golden one (a ``Node``
from glidemq_golden.parse_reply), with the golden's normalisation (glide-mq-NOTES.md, "How the
goldens were made"):

- the wire type is part of the value: ``bulk "1"`` is not ``simple "1"``, ``null`` is not
  ``nil-bulk``, a ``map`` is not a flat ``array``, ``double 5`` is not ``bulk "5"``;
- maps (and RESP2 flat pair arrays, ``flatmap``) are compared as multisets of key/value pairs
  (hash-field order is the server's business); sets likewise as multisets of members;
- arrays are ordered, except the whole reply of KEYS and SMEMBERS (a set sent as a RESP2 array),
  and the ``functions`` list of FUNCTION LIST (``Rules``);
- ``bulk "<SID>"`` is any valid stream id (``ms-seq``, both below 2^64), and
  ``check_order`` checks the "entry ids increasing/decreasing: yes" comment lines;
- typed wildcards ``<bulk server>`` match any value of their type (HELLO's server, version,
  id, modules);
- INFO bodies ``header | line | ...``: the first line is the header, and each other listed line
  is one of the reply's lines (the reply may have more);
- doubles compare as numbers; everything else byte for byte.

Every function returns a list of human-readable differences (empty = equal); ``render`` writes a
Node in the golden's notation for those messages.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .glidemq_golden import SID, Node

__all__ = ["Rules", "rules_for", "compare", "check_order", "compare_scan", "render",
           "is_stream_id"]

_SID = re.compile(rb"(\d{1,20})-(\d{1,20})")
_UNORDERED_COMMANDS = {b"KEYS", b"SMEMBERS", b"SINTER", b"SUNION", b"SDIFF", b"HKEYS",
                       b"HVALS"}


@dataclass(frozen=True)
class Rules:
    """Which normalisations apply to one command's reply: ``unordered_top`` (the reply is a
    collection in server order: KEYS, SMEMBERS...), ``unordered_keys`` (map keys whose array
    values are unordered: FUNCTION LIST's ``functions``), ``info`` (INFO body rule)."""
    unordered_top: bool = False
    unordered_keys: frozenset = frozenset()
    info: bool = False


def rules_for(args: list[bytes]) -> Rules:
    """The Rules of a command (its argv)."""
    name = args[0].upper() if args else b""
    if name == b"INFO":
        return Rules(info=True)
    if name == b"FUNCTION" and len(args) > 1 and args[1].upper() == b"LIST":
        return Rules(unordered_keys=frozenset({b"functions"}))
    return Rules(unordered_top=name in _UNORDERED_COMMANDS)


def is_stream_id(value: bytes) -> bool:
    """True for ``ms-seq`` with both parts decimal and below 2^64."""
    m = _SID.fullmatch(value)
    return bool(m) and all(int(x) < 1 << 64 for x in m.groups())


# ------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------
_SHOWN = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r",
          ord("\t"): "\\t"}


def _quote(b: bytes) -> str:
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        return '"' + "".join(_SHOWN.get(c, chr(c) if 32 <= c < 127 else f"\\x{c:02x}")
                             for c in b) + '"'
    return '"' + "".join(_SHOWN.get(ord(c), c if ord(c) >= 32 and ord(c) != 127
                                    else f"\\x{ord(c):02x}") for c in text) + '"'


def render(node: Node, limit: int = 400) -> str:
    """``node`` in the golden's notation, cut to ``limit`` characters."""
    text = _render(node)
    return text if len(text) <= limit else text[:limit] + "..."


def _num(v: float) -> str:
    if math.isfinite(v) and v == int(v):
        return str(int(v))
    return repr(v)


def _render(n: Node) -> str:
    k, v = n.kind, n.value
    if k in ("bulk", "simple", "error"):
        return f"{k} {_quote(v)}"
    if k == "verbatim":
        return f"verbatim {n.fmt} {_quote(v)}"
    if k == "int":
        return f"int {v}"
    if k == "double":
        return f"double {_num(v)}"
    if k == "bool":
        return f"bool {'true' if v else 'false'}"
    if k == "bignum":
        return f"bignum {v.decode()}"
    if k == "wild":
        return f"<{n.fmt} {v}>"
    if k in ("null", "nil-bulk", "nil-array"):
        return k
    if k in ("array", "set", "push"):
        return f"{k}[{len(v)}] [" + ", ".join(_render(x) for x in v) + "]"
    if k == "map":
        return f"map{{{len(v)}}} {{" + ", ".join(f"{_render(a)}: {_render(b)}"
                                                 for a, b in v) + "}"
    if k == "flatmap":
        return f"array{{{len(v)}}} {{" + ", ".join(f"{_render(a)}: {_render(b)}"
                                                   for a, b in v) + "}"
    return repr(n)


# ------------------------------------------------------------------------------------------
# comparison
# ------------------------------------------------------------------------------------------
def compare(golden: Node, live: Node, rules: Rules = Rules(), path: str = "",
            ordered: bool | None = None) -> list[str]:
    """Differences between a golden reply and a live one (empty list = equal). ``path``
    names the place in messages (``[2]``, ``{functions}[3]``); ``ordered`` overrides the
    array order rule for this node (default: unordered only at the top of an unordered
    command)."""
    where = path or "reply"
    if ordered is None:
        ordered = not (rules.unordered_top and not path)
    g, k = golden, golden.kind
    if k == "wild":
        if live.kind != g.fmt:
            return [f"{where}: expected any {g.fmt} ({g.value}), got {render(live)}"]
        return []
    if k == "flatmap":
        if live.kind != "array" or len(live.value) % 2:
            return [f"{where}: expected a flat array of {len(g.value)} pairs "
                    f"({render(g, 120)}), got {render(live)}"]
        return _pairs(g.value, tuple(zip(live.value[0::2], live.value[1::2])), rules, path)
    if live.kind != k or (k == "verbatim" and live.fmt != g.fmt):
        return [f"{where}: expected {render(g)}, got {render(live)}"]
    if k in ("bulk", "verbatim"):
        if g.value == SID:
            return [] if is_stream_id(live.value) else [
                f"{where}: expected a stream id, got {render(live)}"]
        if rules.info:
            return _info(g.value, live.value, where)
        return [] if g.value == live.value else [
            f"{where}: expected {render(g)}, got {render(live)}"]
    if k == "double":
        same = g.value == live.value or (math.isnan(g.value) and math.isnan(live.value))
        return [] if same else [f"{where}: expected {render(g)}, got {render(live)}"]
    if k in ("array", "set", "push"):
        if k == "set" or not ordered:
            return _unordered(g.value, live.value, rules, path)
        return _ordered(g.value, live.value, rules, path)
    if k == "map":
        return _pairs(g.value, live.value, rules, path)
    return [] if g.value == live.value else [f"{where}: expected {render(g)}, got {render(live)}"]


def _ordered(gs: tuple, ls: tuple, rules: Rules, path: str) -> list[str]:
    diffs: list[str] = []
    if len(gs) != len(ls):
        diffs.append(f"{path or 'reply'}: expected {len(gs)} elements, got {len(ls)}")
    for i, (g, x) in enumerate(zip(gs, ls)):
        diffs += compare(g, x, rules, f"{path}[{i}]", True)
    for i in range(len(ls), len(gs)):
        diffs.append(f"{path}[{i}]: missing {render(gs[i])}")
    for i in range(len(gs), len(ls)):
        diffs.append(f"{path}[{i}]: unexpected {render(ls[i])}")
    return diffs


def _unordered(gs: tuple, ls: tuple, rules: Rules, path: str) -> list[str]:
    left = list(ls)
    missing: list[Node] = []
    for g in gs:
        for j, x in enumerate(left):
            if not compare(g, x, rules, path + "[*]", True):
                del left[j]
                break
        else:
            missing.append(g)
    where = path or "reply"
    return ([f"{where}: missing {render(g)} (unordered)" for g in missing]
            + [f"{where}: unexpected {render(x)} (unordered)" for x in left])


def _label(key: Node) -> str:
    if key.kind in ("bulk", "simple"):
        return key.value.decode("utf-8", "replace")
    return render(key, 60)


def _pairs(gp: tuple, lp: tuple, rules: Rules, path: str) -> list[str]:
    """Key/value pairs as a multiset: each golden key finds an equal live key (type
    included), then the values are compared."""
    left = list(lp)
    diffs: list[str] = []
    plain = Rules()
    for gk, gv in gp:
        j = next((j for j, (lk, _) in enumerate(left) if not compare(gk, lk, plain, "x")), None)
        if j is None:
            diffs.append(f"{path or 'reply'}: missing key {render(gk)} "
                         f"(expected value {render(gv, 120)})")
            continue
        _, lv = left.pop(j)
        child_ordered = not (gk.kind == "bulk" and gk.value in rules.unordered_keys)
        diffs += compare(gv, lv, rules, f"{path}{{{_label(gk)}}}", child_ordered)
    diffs += [f"{path or 'reply'}: unexpected key {render(lk)}: {render(lv, 120)}"
              for lk, lv in left]
    return diffs


def _info(want: bytes, got: bytes, where: str) -> list[str]:
    parts = want.split(b" | ")
    lines = got.replace(b"\r\n", b"\n").split(b"\n")
    diffs: list[str] = []
    if not lines or lines[0] != parts[0]:
        diffs.append(f"{where}: INFO body should start with {_quote(parts[0])}, got "
                     f"{_quote(lines[0][:80]) if lines else 'nothing'}")
    diffs += [f"{where}: INFO body lacks the line {_quote(p)}" for p in parts[1:]
              if p not in lines]
    return diffs


def check_order(live: Node, order: str) -> list[str]:
    """The golden's ``entry ids increasing: yes`` (``order`` = increasing) or ``decreasing``
    line: the reply is an array of ``[id, fields]`` entries whose ids are strictly monotone."""
    if live.kind != "array":
        return [f"entry order: expected an array of stream entries, got {render(live, 80)}"]
    ids: list[tuple[int, int]] = []
    for i, e in enumerate(live.value):
        if (e.kind != "array" or not e.value or e.value[0].kind != "bulk"
                or not is_stream_id(e.value[0].value)):
            return [f"entry order: [{i}] is not [stream id, fields]: {render(e, 80)}"]
        ms, seq = e.value[0].value.split(b"-")
        ids.append((int(ms), int(seq)))
    for i in range(1, len(ids)):
        ok = ids[i] > ids[i - 1] if order == "increasing" else ids[i] < ids[i - 1]
        if not ok:
            a, b = ids[i - 1], ids[i]
            return [f"entry order: ids not {order}: [{i - 1}] {a[0]}-{a[1]}, "
                    f"[{i}] {b[0]}-{b[1]}"]
    return []


def compare_scan(expected: tuple[bytes, ...], got: list[bytes]) -> list[str]:
    """The keys a SCAN loop collected against the golden's ``keys[n]`` (as sets: SCAN may
    return a key twice)."""
    want, have = set(expected), set(got)
    return ([f"SCAN: missing key {_quote(k)}" for k in sorted(want - have)]
            + [f"SCAN: unexpected key {_quote(k)}" for k in sorted(have - want)])
