"""Redis's glob patterns (KEYS, SCAN MATCH) over bytes, written from Redis's documented and
observed behaviour (checked against redis-server 7.0.15, tests/test_resp_keys.py pins each
case):

- `*` any run of bytes (also empty), `?` exactly one byte;
- `[abc]` one of the bytes, `[^abc]` one byte not among them, `[a-z]` a range (ends in either
  order: `[z-a]` = `[a-z]`; a range end is taken literally, even `]` or `\\`, and compares
  as a signed C char, so a range across 0x7f/0x80 behaves as in Redis);
- `\\x` the byte x literally, outside and inside brackets; a trailing `\\` is itself;
- an unclosed `[` closes at the end of the pattern (`[ab` = `[ab]`); `[]` matches nothing,
  `[^]` any one byte.

Matching is case-sensitive and byte-wise; a key is matched as its UTF-8 bytes.
"""
from __future__ import annotations

from functools import lru_cache

_STAR = object()
_ANY = object()


def _signed(b: int) -> int:
    return b - 256 if b >= 128 else b


def _bracket(p: bytes, i: int) -> tuple:
    """Parse a class starting just after `[` at `i`: (token, next index)."""
    n = len(p)
    neg = i < n and p[i] == 0x5E          # ^
    if neg:
        i += 1
    exact = set()
    ranges = []
    while True:
        if i >= n:                        # unclosed: ends with the pattern
            break
        c = p[i]
        if c == 0x5C and n - i >= 2:      # \x
            exact.add(p[i + 1])
            i += 2
        elif c == 0x5D:                   # ]
            i += 1
            break
        elif n - i >= 3 and p[i + 1] == 0x2D:   # a-z
            lo, hi = _signed(c), _signed(p[i + 2])
            ranges.append((lo, hi) if lo <= hi else (hi, lo))
            i += 3
        else:
            exact.add(c)
            i += 1
    return (neg, frozenset(exact), tuple(ranges)), i


@lru_cache(maxsize=256)
def compile_glob(pattern: bytes) -> tuple:
    """`pattern` as a tuple of tokens: _STAR, _ANY, an int (a literal byte) or a class
    (negated, exact bytes, signed ranges)."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == 0x2A:                     # *
            if not out or out[-1] is not _STAR:
                out.append(_STAR)
            i += 1
        elif c == 0x3F:                   # ?
            out.append(_ANY)
            i += 1
        elif c == 0x5B:                   # [
            tok, i = _bracket(pattern, i + 1)
            out.append(tok)
        elif c == 0x5C and n - i >= 2:    # \x
            out.append(pattern[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return tuple(out)


def _one(tok, b: int) -> bool:
    if tok is _ANY:
        return True
    if tok.__class__ is int:
        return tok == b
    neg, exact, ranges = tok
    hit = b in exact
    if not hit and ranges:
        s = _signed(b)
        hit = any(lo <= s <= hi for lo, hi in ranges)
    return hit != neg


def glob_match(pattern: bytes, subject: bytes) -> bool:
    """True when `subject` matches Redis glob `pattern` (both bytes; see the module
    docstring). Linear backtracking to the last `*`: O(len(pattern) * len(subject)) at worst."""
    toks = compile_glob(pattern)
    nt, ns = len(toks), len(subject)
    ti = si = 0
    star = -1
    mark = 0
    while si < ns:
        if ti < nt:
            t = toks[ti]
            if t is _STAR:
                star, mark = ti, si
                ti += 1
                continue
            if _one(t, subject[si]):
                ti += 1
                si += 1
                continue
        if star < 0:
            return False
        mark += 1                         # let the last * take one more byte
        si = mark
        ti = star + 1
    while ti < nt and toks[ti] is _STAR:
        ti += 1
    return ti == nt
