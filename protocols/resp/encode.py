"""TEMPORARY encoder (replaced by the codec branch)."""
from __future__ import annotations


class Simple(str):
    __slots__ = ()


class Error(str):
    __slots__ = ()


class Map:
    __slots__ = ("pairs",)

    def __init__(self, pairs):
        self.pairs = list(pairs.items()) if isinstance(pairs, dict) else pairs


class Set:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items


class Double:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Verbatim:
    __slots__ = ("fmt", "text")

    def __init__(self, fmt, text):
        self.fmt = fmt
        self.text = text


class _NullArray:
    __slots__ = ()


NullArray = _NullArray()


def _dbl(v: float) -> str:
    if v == float("inf"):
        return "inf"
    if v == float("-inf"):
        return "-inf"
    if v == int(v) and abs(v) < 1e17:
        return str(int(v))
    return repr(v)


def encode(v, proto: int) -> bytes:
    out = []
    _enc(v, proto, out)
    return b"".join(out)


def _enc(v, proto, out):
    c = v.__class__
    if c is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(v), v))
    elif c is str:
        b = v.encode("utf-8", "surrogateescape")
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    elif c is int or c is bool:
        out.append(b":%d\r\n" % v)
    elif v is None:
        out.append(b"_\r\n" if proto == 3 else b"$-1\r\n")
    elif c is Simple:
        out.append(b"+%s\r\n" % v.encode())
    elif c is Error:
        out.append(b"-%s\r\n" % v.encode())
    elif c is list or c is tuple:
        out.append(b"*%d\r\n" % len(v))
        for x in v:
            _enc(x, proto, out)
    elif c is Map:
        if proto == 3:
            out.append(b"%%%d\r\n" % len(v.pairs))
        else:
            out.append(b"*%d\r\n" % (2 * len(v.pairs)))
        for k, x in v.pairs:
            _enc(k, proto, out)
            _enc(x, proto, out)
    elif c is Set:
        out.append((b"~%d\r\n" if proto == 3 else b"*%d\r\n") % len(v.items))
        for x in v.items:
            _enc(x, proto, out)
    elif c is Double:
        s = _dbl(v.value).encode()
        out.append(b",%s\r\n" % s if proto == 3 else b"$%d\r\n%s\r\n" % (len(s), s))
    elif c is Verbatim:
        b = v.text.encode()
        if proto == 3:
            out.append(b"=%d\r\n%s:%s\r\n" % (len(b) + 4, v.fmt.encode(), b))
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    elif v is NullArray:
        out.append(b"_\r\n" if proto == 3 else b"*-1\r\n")
    else:
        raise TypeError(f"cannot encode {c.__name__}")
