"""Redis's inline command lines split into arguments (sdssplitargs in Redis's sds.c), for
protocols/resp/codec.py: spaces separate words; double quotes take `\\n \\r \\t \\b \\a
\\xHH` escapes; single quotes take `\\'`; a closing quote must be followed by a space or
the end of the line.
"""
from __future__ import annotations

import re

_QUOTES_ETC = re.compile(rb"[\"'\x0b\x0c]")
_SPACE = b" \t\n\x0b\x0c\r"
_HEX = b"0123456789abcdefABCDEF"
_ESC = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


def split_args(line: bytes):
    """An inline line split as Redis' sdssplitargs: list of bytes, or None for unbalanced
    quotes (a closing quote must be followed by a space or the end)."""
    if _QUOTES_ETC.search(line) is None:
        return line.split()
    args, i, n = [], 0, len(line)

    def at(j):
        return line[j] if j < n else 0

    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        cur, inq, insq, done = bytearray(), False, False, False
        while not done:
            c = at(i)
            if inq:
                if c == 92 and at(i + 1) == 120 and at(i + 2) in _HEX and at(i + 3) in _HEX:
                    cur.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == 92 and at(i + 1):
                    i += 1
                    cur.append(_ESC.get(line[i], line[i]))
                elif c == 34:
                    if at(i + 1) and at(i + 1) not in _SPACE:
                        return None
                    done = True
                elif not c:
                    return None
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and at(i + 1) == 39:
                    i += 1
                    cur.append(39)
                elif c == 39:
                    if at(i + 1) and at(i + 1) not in _SPACE:
                        return None
                    done = True
                elif not c:
                    return None
                else:
                    cur.append(c)
            elif c in (32, 10, 13, 9, 0):
                done = True
            elif c == 34:
                inq = True
            elif c == 39:
                insq = True
            else:
                cur.append(c)
            if i < n:
                i += 1
        args.append(bytes(cur))
