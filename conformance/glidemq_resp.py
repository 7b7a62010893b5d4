"""A small typed RESP2/RESP3 client for the glide-mq conformance runner: commands out as RESP
arrays of bulk strings, replies in as ``Node`` trees that keep the wire type (hiredis and
redis-py fold bulk/simple/verbatim and null/nil-bulk together, which the golden tells apart).

``decode(buf, pos)`` is sans-IO: it returns ``(node, next_pos)`` or raises ``Incomplete`` when
``buf`` ends inside a reply, ``ProtocolError`` on bytes that are no RESP. ``Connection`` is the
blocking socket around it. RESP3 attributes (``|``) are read and dropped (kept on
``Connection.attributes``); pushes (``>``) come back as a ``push`` node like any reply.
"""

from __future__ import annotations

import socket

from .glidemq_golden import Node

__all__ = ["Incomplete", "ProtocolError", "decode", "encode_command", "encode_node",
           "Connection"]

_MAX_LEN = 512 * 1024 * 1024      # a bulk longer than Redis's proto-max-bulk-len is no reply


class Incomplete(Exception):
    """The buffer ends inside a reply: read more bytes and decode again from the start."""


class ProtocolError(ValueError):
    """Bytes that are not a RESP2/RESP3 reply (the message says where and what)."""


def encode_command(args: list[bytes]) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _line(buf: bytes, pos: int) -> tuple[bytes, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        if len(buf) - pos > 64 * 1024:
            raise ProtocolError(f"no CRLF within 64 KiB at offset {pos}")
        raise Incomplete
    return buf[pos:end], end + 2


def _int(text: bytes, pos: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise ProtocolError(f"bad number {text[:40]!r} at offset {pos}") from None


def _blob(buf: bytes, pos: int, n: int) -> tuple[bytes, int]:
    if n < 0 or n > _MAX_LEN:
        raise ProtocolError(f"bad length {n} at offset {pos}")
    if len(buf) < pos + n + 2:
        raise Incomplete
    if buf[pos + n:pos + n + 2] != b"\r\n":
        raise ProtocolError(f"blob of {n} bytes not followed by CRLF at offset {pos}")
    return buf[pos:pos + n], pos + n + 2


def decode(buf: bytes, pos: int = 0, attributes: list | None = None) -> tuple[Node, int]:
    """Decode one reply starting at ``buf[pos]``: ``(Node, position after it)``. Attributes
    before the reply are appended to ``attributes`` (when given) and skipped.
    Raises Incomplete or ProtocolError."""
    if pos >= len(buf):
        raise Incomplete
    t = buf[pos:pos + 1]
    head, nxt = _line(buf, pos + 1)
    if t == b"+":
        return Node("simple", head), nxt
    if t == b"-":
        return Node("error", head), nxt
    if t == b":":
        return Node("int", _int(head, pos)), nxt
    if t == b"_":
        if head:
            raise ProtocolError(f"null with text {head[:40]!r} at offset {pos}")
        return Node("null"), nxt
    if t == b",":
        try:
            return Node("double", float(head)), nxt
        except ValueError:
            raise ProtocolError(f"bad double {head[:40]!r} at offset {pos}") from None
    if t == b"#":
        if head not in (b"t", b"f"):
            raise ProtocolError(f"bad boolean {head[:40]!r} at offset {pos}")
        return Node("bool", head == b"t"), nxt
    if t == b"(":
        if not head.lstrip(b"-").isdigit():
            raise ProtocolError(f"bad big number {head[:40]!r} at offset {pos}")
        return Node("bignum", head), nxt
    if t in (b"$", b"!", b"="):
        n = _int(head, pos)
        if n == -1 and t == b"$":
            return Node("nil-bulk"), nxt
        body, nxt = _blob(buf, nxt, n)
        if t == b"$":
            return Node("bulk", body), nxt
        if t == b"!":
            return Node("error", body), nxt
        if len(body) < 4 or body[3:4] != b":":
            raise ProtocolError(f"verbatim string without 'fmt:' at offset {pos}")
        return Node("verbatim", body[4:], body[:3].decode("latin-1")), nxt
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = _int(head, pos)
        if n == -1 and t == b"*":
            return Node("nil-array"), nxt
        if n < 0 or n > 1 << 32:
            raise ProtocolError(f"bad count {n} at offset {pos}")
        items: list = []
        for _ in range(n if t in (b"*", b"~", b">") else 2 * n):
            node, nxt = decode(buf, nxt, attributes)
            items.append(node)
        if t in (b"%", b"|"):
            pairs = tuple(zip(items[0::2], items[1::2]))
            if t == b"|":
                if attributes is not None:
                    attributes.append(Node("map", pairs))
                return decode(buf, nxt, attributes)
            return Node("map", pairs), nxt
        kind = {b"*": "array", b"~": "set", b">": "push"}[t]
        return Node(kind, tuple(items)), nxt
    raise ProtocolError(f"unknown reply type {t!r} at offset {pos}")


def encode_node(node: Node) -> bytes:
    """The RESP bytes of a concrete Node (RESP3 types as RESP3; a flatmap as a flat array).
    Used by the self-checks to write golden replies onto the wire. Raises ValueError for a
    wildcard."""
    k, v = node.kind, node.value
    if k == "simple":
        return b"+" + v + b"\r\n"
    if k == "error":
        return b"-" + v + b"\r\n"
    if k == "int":
        return b":%d\r\n" % v
    if k == "bulk":
        return b"$%d\r\n%s\r\n" % (len(v), v)
    if k == "verbatim":
        body = node.fmt.encode() + b":" + v
        return b"=%d\r\n%s\r\n" % (len(body), body)
    if k == "double":
        return b"," + (repr(v).encode() if v != int(v) else b"%d" % int(v)) + b"\r\n"
    if k == "bool":
        return b"#t\r\n" if v else b"#f\r\n"
    if k == "bignum":
        return b"(" + v + b"\r\n"
    if k == "null":
        return b"_\r\n"
    if k == "nil-bulk":
        return b"$-1\r\n"
    if k == "nil-array":
        return b"*-1\r\n"
    if k in ("array", "set", "push"):
        mark = {"array": b"*", "set": b"~", "push": b">"}[k]
        return mark + b"%d\r\n" % len(v) + b"".join(encode_node(x) for x in v)
    if k == "map":
        return b"%%%d\r\n" % len(v) + b"".join(encode_node(a) + encode_node(b) for a, b in v)
    if k == "flatmap":
        return b"*%d\r\n" % (2 * len(v)) + b"".join(encode_node(a) + encode_node(b)
                                                     for a, b in v)
    raise ValueError(f"cannot write a {k} node")


class Connection:
    """A blocking RESP connection to ``host:port`` (``timeout`` seconds per read).
    ``proto`` is the protocol this side believes is in effect (2 until a HELLO succeeds).
    Raises OSError (including socket.timeout) and ProtocolError from ``reply``."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.proto = 2
        self.attributes: list[Node] = []

    def send(self, *commands: list[bytes]) -> None:
        """Write the commands in one write (a pipeline when more than one)."""
        self.sock.sendall(b"".join(encode_command(c) for c in commands))

    def reply(self) -> Node:
        """The next reply."""
        while True:
            try:
                node, used = decode(self.buf, 0, self.attributes)
            except Incomplete:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("connection closed by the server")
                self.buf += data
                continue
            self.buf = self.buf[used:]
            return node

    def call(self, *args: bytes) -> Node:
        """Send one command and read its reply."""
        self.send(list(args))
        return self.reply()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
