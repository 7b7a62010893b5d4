"""The reply notation of the glide-mq golden (glidemq_golden describes the file): typed RESP
values written as text, parsed into ``Node`` trees, and the R section's Python reprs.

Forms (after glidemq_golden.substitute filled the T0 placeholders): ``bulk "s"``,
``simple "s"``, ``error "s"``, ``int n``, ``double x``, ``bool true``, ``null`` (RESP3 ``_``),
``nil-bulk`` (RESP2 ``$-1``), ``nil-array``, ``verbatim txt "s"``, ``array[n] [v, ...]``,
``set[n] [...]``, ``push[n] [...]``, ``map{n} {k: v, ...}`` or ``map{k: v, ...}``,
``array{n} {k: v, ...}`` or ``array{k: v}`` (a RESP2 map: flat array of n pairs),
``array[2n] [k: v, ...]`` (flat array of 2n elements written as pairs), typed wildcards
``<bulk server>``, and the looped SCAN form (``parse_scan``). Strings take ``\\"``
``\\\\`` ``\\n`` ``\\r`` ``\\t`` ``\\xHH`` (a byte) escapes; other text is UTF-8.
Every parser raises ``GoldenFormatError`` for text outside the grammar.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["GoldenFormatError", "Node", "ESCAPES", "parse_reply", "parse_scan",
           "parse_python_reply"]

ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a", '"': '"', "\\": "\\"}


class GoldenFormatError(ValueError):
    """The golden text (or a reply in its notation) does not follow the grammar above."""


@dataclass(frozen=True)
class Node:
    """One typed RESP value, from the golden notation or from the wire.

    ``kind``: simple, error, bulk, verbatim, int, double, bool, bignum, null (RESP3 ``_``),
    nil-bulk (``$-1``), nil-array (``*-1``), array, set, map, push; golden-only: wild (a typed
    wildcard: ``fmt`` = the type, ``value`` = its name) and flatmap (a RESP2 array of pairs).
    ``value``: bytes (strings, verbatim body, bignum digits), int, float (double), bool,
    tuple[Node, ...] (array/set/push), tuple[tuple[Node, Node], ...] (map/flatmap), None.
    ``fmt``: the verbatim format (``txt``) or the wildcard's type.
    """
    kind: str
    value: Any = None
    fmt: str = ""


_WORD = re.compile(r"[a-z][a-z-]*")
_WILD = re.compile(r"<([a-z]+) ([A-Za-z0-9_-]+)>")
_INT = re.compile(r"-?\d+")
_DOUBLE = re.compile(r"-?(?:inf|nan|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)")
_COUNT = re.compile(r"[\[{](\d+)[\]}] ")
_SCAN = re.compile(r"^array\[2\] \[bulk, array\[\.\.\]\] -> keys\[(\d+)\] \[(.*)\]$")


class _Parser:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def fail(self, what: str) -> GoldenFormatError:
        return GoldenFormatError(f"{what} at column {self.i} of {self.s[:120]!r}")

    def expect(self, token: str) -> None:
        if not self.s.startswith(token, self.i):
            raise self.fail(f"expected {token!r}")
        self.i += len(token)

    def match(self, rx: re.Pattern) -> re.Match:
        m = rx.match(self.s, self.i)
        if not m:
            raise self.fail(f"expected {rx.pattern}")
        self.i = m.end()
        return m

    def string(self) -> bytes:
        self.expect('"')
        out = bytearray()
        while True:
            if self.i >= len(self.s):
                raise self.fail("unterminated string")
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return bytes(out)
            if c == "\\":
                e = self.s[self.i + 1:self.i + 2]
                if e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", self.s[self.i + 2:self.i + 4]):
                    out.append(int(self.s[self.i + 2:self.i + 4], 16))
                    self.i += 4
                    continue
                out += ESCAPES.get(e, e).encode("utf-8")
                self.i += 2
                continue
            out += c.encode("utf-8")
            self.i += 1

    def value(self) -> Node:
        if self.s.startswith("<", self.i):
            m = self.match(_WILD)
            return Node("wild", m.group(2), m.group(1))
        word = self.match(_WORD).group(0)
        if word in ("bulk", "simple", "error"):
            self.expect(" ")
            return Node(word, self.string())
        if word == "verbatim":
            fmt = self.match(re.compile(r" ([a-z]{3}) ")).group(1)
            return Node("verbatim", self.string(), fmt)
        if word == "int":
            self.expect(" ")
            return Node("int", int(self.match(_INT).group(0)))
        if word == "double":
            self.expect(" ")
            return Node("double", float(self.match(_DOUBLE).group(0)))
        if word == "bool":
            self.expect(" ")
            return Node("bool", self.match(re.compile(r"true|false")).group(0) == "true")
        if word in ("null", "nil-bulk", "nil-array"):
            return Node(word)
        if word in ("array", "set", "map", "push"):
            return self.aggregate(word)
        raise self.fail(f"unknown type {word!r}")

    def aggregate(self, word: str) -> Node:
        count = None
        m = _COUNT.match(self.s, self.i)
        if m:
            count = int(m.group(1))
            brace = self.s[self.i]
            self.i = m.end()
        else:
            brace = self.s[self.i:self.i + 1]
            if brace != "{":
                raise self.fail("expected a count")
        if brace == "{" and word not in ("map", "array"):
            raise self.fail(f"{word} cannot be written with braces")
        self.expect("{" if brace == "{" else "[")
        close = "}" if brace == "{" else "]"
        items: list = []
        pairs = 0
        while not self.s.startswith(close, self.i):
            if items:
                self.expect(", ")
            v = self.value()
            if self.s.startswith(": ", self.i):
                self.i += 2
                items.append((v, self.value()))
                pairs += 1
            else:
                items.append(v)
        self.i += 1
        if pairs and pairs != len(items):
            raise self.fail("a list mixes pairs and single values")
        if brace == "{":
            if len(items) != pairs:
                raise self.fail("a map needs key: value pairs")
            if count is not None and count != pairs:
                raise self.fail(f"{word}{{{count}}} holds {pairs} pairs")
            return Node("map" if word == "map" else "flatmap", tuple(items))
        if pairs:
            if word != "array" or count != 2 * pairs:
                raise self.fail(f"{word}[{count}] of {pairs} pairs")
            return Node("flatmap", tuple(items))
        if count != len(items):
            raise self.fail(f"{word}[{count}] holds {len(items)} values")
        return Node(word, tuple(items))


def parse_reply(text: str) -> Node:
    """One ``S<`` reply (placeholders already filled by ``substitute``) as a Node.
    Raises GoldenFormatError."""
    p = _Parser(text)
    node = p.value()
    if p.i != len(text):
        raise p.fail("trailing text")
    return node


def parse_scan(text: str) -> tuple[int, tuple[bytes, ...]]:
    """The looped SCAN form ``array[2] [bulk, array[..]] -> keys[n] ["k", ...]``: (n, keys).
    Raises GoldenFormatError."""
    m = _SCAN.match(text)
    if not m:
        raise GoldenFormatError(f"not the looped SCAN form: {text[:80]!r}")
    p = _Parser(m.group(2))
    keys: list[bytes] = []
    while p.i < len(p.s):
        if keys:
            p.expect(", ")
        keys.append(p.string())
    if len(keys) != int(m.group(1)):
        raise GoldenFormatError(f"keys[{m.group(1)}] holds {len(keys)} keys")
    return int(m.group(1)), tuple(keys)


_PY_LABELS = {"str": str, "dict": dict, "list": list, "int": int, "float": float,
              "tuple": tuple, "NoneType": type(None), "bool": bool}


def parse_python_reply(text: str) -> tuple[str, Any]:
    """An R-section reply: ``(label, value)`` where label is a Python type name and value
    the literal (``'<SID>'`` strings stand for any stream id), or ``("raised", "Type: msg")``.
    Raises GoldenFormatError when the literal does not parse or is not of its label's type."""
    label, _, rest = text.partition(" ")
    if label == "raised":
        if ": " not in rest:
            raise GoldenFormatError(f"raised without 'Type: message': {text!r}")
        return label, rest
    if label not in _PY_LABELS:
        raise GoldenFormatError(f"unknown Python type label {label!r}")
    try:
        value = ast.literal_eval(rest)
    except (ValueError, SyntaxError) as exc:
        raise GoldenFormatError(f"not a Python literal ({exc}): {rest[:80]!r}") from None
    if type(value) is not _PY_LABELS[label]:
        raise GoldenFormatError(f"{label} label on a {type(value).__name__}: {rest[:80]!r}")
    return label, value
