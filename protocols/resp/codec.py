"""TEMPORARY parser (replaced by the codec branch)."""
from __future__ import annotations

import hiredis


class ProtocolError:
    __slots__ = ("message",)

    def __init__(self, message):
        self.message = message


class RequestParser:
    def __init__(self, max_bulk=512 << 20):
        self.r = hiredis.Reader()
        self.dead = False

    def feed(self, data):
        if self.dead:
            return []
        r = self.r
        r.feed(data)
        out = []
        while True:
            try:
                x = r.gets()
            except hiredis.ProtocolError as e:
                self.dead = True
                out.append(ProtocolError(str(e)))
                return out
            if x is False:
                return out
            out.append(x)

    def buffered(self):
        return 0
