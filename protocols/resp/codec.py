"""RESP requests, sans-IO: client bytes in, commands out, as Redis 7.0 cuts them.

`RequestParser.feed(bytes)` returns a list whose items are commands (`list[bytes]`, the argv,
at least one element) or one final `ProtocolError`. The behaviour is Redis 7.0.15's
processMultibulkBuffer / processInlineBuffer (networking.c), checked byte for byte against a
scratch redis-server 7.0.15 (tests/test_resp_codec.py keeps the probed replies):

- A request starting with `*` is a multibulk: `*<count>\\r\\n` then `count` bulks
  `$<len>\\r\\n<len bytes>` plus two bytes that Redis skips unread. A count <= 0 is no command.
  Numbers follow Redis' string2ll: no sign but `-`, no leading zero, no spaces.
- Anything else is an inline command: one line up to `\\n` (a `\\r` before it dropped) split
  like sdssplitargs (double quotes with `\\n \\r \\t \\b \\a \\xHH` escapes, single quotes with
  `\\'`); a blank line is no command. As in Redis, a NUL byte stops the search for the line end
  (the request then never completes and becomes "too big" after 64 KiB).
- Errors (the reply is `-ERR Protocol error: <message>`, then the connection closes):
  `invalid multibulk length`, `invalid bulk length`, `too big inline request`, `too big mbulk
  count string`, `too big bulk count string`, `expected '$', got 'X'` (CR/LF shown as a space),
  `unbalanced quotes in request`. A nested array or any non-bulk element gets the `expected '$'`
  error, as in Redis.

Bounds: a line or length header of more than INLINE_MAX bytes is an error whether or not its end
has arrived (Redis decides by read size; we decide by bytes, so the result never depends on how
the stream was split); a count over MULTIBULK_MAX (1024*1024, Redis 6's limit; 7.0 allows up to
2^31-1) and a declared bulk length over `max_bulk` are refused as soon as the header is seen;
`buffered()` (raw bytes of the unfinished request plus the arguments already cut from it) over
`max_query` closes the connection without a reply (`silent`), like client-query-buffer-limit.

Speed: runs of complete multibulk requests are cut by hiredis' C reader; cheap screens over the
buffer prove its output is exactly what the rules above give, and anything they cannot prove
(inline commands, hostile bytes, the unfinished tail) goes through the exact pure-Python path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import hiredis

from .inline import split_args

#: Longest inline line / `*` or `$` header line, bytes (Redis PROTO_INLINE_MAX_SIZE).
INLINE_MAX = 64 * 1024
#: Largest multibulk count accepted.
MULTIBULK_MAX = 1024 * 1024
#: Default largest bulk argument, bytes (Redis proto-max-bulk-len).
DEFAULT_MAX_BULK = 512 * 1024 * 1024
#: Default bound on buffered(), bytes (Redis client-query-buffer-limit).
DEFAULT_MAX_QUERY = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """A request Redis would refuse. `message` is the text after "Protocol error: " (str; bytes
    quoted from the input are latin-1 characters). The parser is dead after it: send `reply`
    (empty when `silent`, i.e. the query buffer limit, where Redis closes without a word) and
    close the connection."""

    message: str
    silent: bool = False

    @property
    def reply(self) -> bytes:
        """The error reply bytes, `-ERR Protocol error: <message>\\r\\n`, or b"" if silent."""
        if self.silent:
            return b""
        return b"-ERR Protocol error: " + self.message.encode("latin-1") + b"\r\n"


_LL = re.compile(rb"0|-?[1-9][0-9]{0,19}")
_LL_MIN, _LL_MAX = -(1 << 63), (1 << 63) - 1
# A `*` (or RESP3 aggregate marker) followed by 6+ digits: hiredis allocates the list for the
# declared count on sight, so such buffers never go to hiredis (the exact path refuses them).
_BIG_STAR = re.compile(rb"\*[0-9]{6}")
_BIG_ODD = re.compile(rb"[~>|][0-9]{6}")
# Bytes that let hiredis return something our size accounting cannot see (simple strings,
# bignums and verbatims as bytes; sets, pushes and attributes as lists): if any is present the
# framing of every command is checked element by element.
_ODD = (b"+", b"(", b"=", b"~", b">", b"|")

_LINE, _BULK = 1, 2   # what an unfinished request waits for


def _ll(b: bytes):
    """Redis string2ll: the int in `b`, or None if it is not a canonical int64."""
    if _LL.fullmatch(b) is None:
        return None
    v = int(b)
    return v if _LL_MIN <= v <= _LL_MAX else None


def _find_line(buf, term: bytes, pos: int) -> int:
    """Index of `term` at or after `pos`, or -1 if absent or behind a NUL (C strchr)."""
    i = buf.find(term, pos)
    if buf.find(b"\0", pos, i if i >= 0 else len(buf)) >= 0:
        return -1
    return i


def _size(cmd: list) -> int:
    """Bytes of `cmd` framed as a canonical multibulk."""
    s = 3 + len(str(len(cmd)))
    for a in cmd:
        n = len(a)
        s += n + 5 + len(str(n))
    return s


class RequestParser:
    """Cuts a client's byte stream into commands (module docstring for the rules).

    `max_bulk`: largest bulk argument in bytes (the configured proto-max-bulk-len);
    `max_query`: bound on buffered() in bytes; `fast`: False leaves hiredis out (the exact
    pure-Python path only: same results, several times slower; for tests and comparisons).
    One parser per connection.
    """

    def __init__(self, max_bulk: int = DEFAULT_MAX_BULK, max_query: int = DEFAULT_MAX_QUERY,
                 fast: bool = True):
        self._max_bulk = max_bulk
        self._max_query = max_query
        self._dead = False
        self._use_fast = fast
        self._reader = None         # an idle hiredis Reader, reused while clean
        # the unfinished request: raw bytes from where parsing resumes, and what they wait for
        self._raw = bytearray()
        self._wait = 0              # 0, _LINE or _BULK
        self._term = b""            # _LINE: b"\n" (inline) or b"\r" (header line)
        self._cursor = 0            # _LINE: scan resumes here; -1 = behind a NUL, never ends
        self._need = 0              # _BULK: raw bytes needed
        # a multibulk being cut: argv so far, arguments left, declared length of the next
        self._argv = None
        self._left = 0
        self._bulklen = -1
        self._argv_bytes = 0

    def buffered(self) -> int:
        """Bytes held for the unfinished request (raw bytes plus arguments already cut)."""
        return len(self._raw) + self._argv_bytes

    def feed(self, data: bytes) -> list:
        """Parse `data` (the next bytes from the client): the commands it completes, in order,
        then a ProtocolError if the stream broke the rules (after which feed returns [])."""
        if self._dead or not data:
            return []
        if self._wait:
            raw = self._raw
            raw += data
            if not self._ready():
                if self._wait == _LINE and len(raw) > INLINE_MAX:
                    buf, self._raw, self._wait = bytes(raw), bytearray(), 0
                    return self._parse(buf)   # reports the too-big line
                return self._limit([])
            buf, self._raw, self._wait = bytes(raw), bytearray(), 0
        else:
            buf = data if type(data) is bytes else bytes(data)
        return self._parse(buf)

    # -- driving -------------------------------------------------------------------------

    def _ready(self) -> bool:
        """Whether the unfinished request can make progress with what is buffered."""
        raw = self._raw
        if self._wait == _BULK:
            return len(raw) >= self._need
        if self._cursor < 0:
            return False
        i = _find_line(raw, self._term, self._cursor)
        if i < 0:
            self._cursor = -1 if raw.find(b"\0", self._cursor) >= 0 else len(raw)
            return False
        if self._term == b"\r" and i + 1 >= len(raw):
            self._cursor = i           # the byte after \r has not come yet
            return False
        return True

    def _parse(self, buf: bytes) -> list:
        out = []
        n, pos, budget = len(buf), 0, 3
        while pos < n:
            if self._argv is None and budget and buf[pos] == 42 and self._use_fast:
                budget -= 1
                pos = self._fast(buf, pos, out)
                if pos >= n:
                    break
            pos = self._step(buf, pos, out)
            if pos is None:
                break
        return self._limit(out)

    def _limit(self, out: list) -> list:
        if not self._dead and self.buffered() > self._max_query:
            self._fail(out, "max query buffer length reached", silent=True)
        return out

    def _fail(self, out: list, message: str, silent: bool = False) -> None:
        out.append(ProtocolError(message, silent))
        self._dead = True
        self._raw, self._wait, self._argv, self._argv_bytes = bytearray(), 0, None, 0
        self._reader = None
        return None

    def _wait_line(self, buf: bytes, pos: int, term: bytes):
        self._raw = bytearray(memoryview(buf)[pos:])
        self._wait, self._term, self._cursor = _LINE, term, 0
        self._ready()                  # sets the cursor past what is already scanned
        return None

    def _wait_bulk(self, buf: bytes, pos: int, need: int):
        self._raw = bytearray(memoryview(buf)[pos:])
        self._wait, self._need = _BULK, need
        return None

    # -- the fast path: hiredis ----------------------------------------------------------

    def _fast(self, buf: bytes, pos: int, out: list) -> int:
        """Cut complete multibulk requests from buf[pos:] with hiredis; returns where the
        first request it did not take starts (len(buf) if it took everything)."""
        if _BIG_STAR.search(buf, pos) is not None:
            return pos
        walk = False
        for c in _ODD:
            if buf.find(c, pos) >= 0:
                walk = True
                break
        if walk and _BIG_ODD.search(buf, pos) is not None:
            return pos
        reader, self._reader = self._reader or hiredis.Reader(), None
        reader.feed(buf, pos)
        n, maxb, join, append = len(buf), self._max_bulk, b"".join, out.append
        gets = reader.gets
        end = pos
        try:
            if walk:
                # every command's framing checked: '*' first, '$' before every element
                while True:
                    cmd = gets()
                    if cmd is False or type(cmd) is not list or buf[end] != 42:
                        break
                    try:
                        total = len(join(cmd))
                    except TypeError:
                        break
                    if total > maxb and max(map(len, cmd)) > maxb:
                        break
                    q = end + 3 + len(str(len(cmd)))
                    for a in cmd:
                        if buf[q] != 36:
                            break
                        k = len(a)
                        q += k + 5 + len(str(k))
                    else:
                        if cmd:
                            append(cmd)
                        end = q
                        continue
                    break
            else:
                # no byte that could make hiredis' output differ from canonical framing: the
                # sizes are exact. hiredis drops its consumed prefix (>= 1 KiB) right after
                # the reply that completes it, so a shrink of len() marks a request boundary;
                # only the requests after the last boundary need their size computed.
                rlen = reader.len
                last, since = rlen(), []
                while True:
                    cmd = gets()
                    if cmd is False or type(cmd) is not list:
                        break
                    try:
                        total = len(join(cmd))
                    except TypeError:
                        break
                    if total > maxb and max(map(len, cmd)) > maxb:
                        break
                    if cmd:
                        append(cmd)
                    cur = rlen()
                    if cur != last:
                        last, end, since = cur, n - cur, []
                    else:
                        since.append(cmd)
                for cmd in since:
                    end += _size(cmd)
        except (hiredis.HiredisError, MemoryError):
            if not walk:
                for cmd in since:
                    end += _size(cmd)
        else:
            if end == n:
                self._reader = reader   # nothing half-read: reusable
        return end

    # -- the exact path ------------------------------------------------------------------

    def _step(self, buf: bytes, pos: int, out: list):
        """Parse one request at buf[pos:] (or go on with the multibulk being cut). Returns the
        position after it, or None: incomplete (state kept) or dead (error appended)."""
        n = len(buf)
        if self._argv is None:
            if buf[pos] != 42:
                return self._inline(buf, pos, out)
            cr = _find_line(buf, b"\r", pos)
            if cr < 0 or cr - pos > INLINE_MAX:
                if cr >= 0 or n - pos > INLINE_MAX:
                    return self._fail(out, "too big mbulk count string")
                return self._wait_line(buf, pos, b"\r")
            if cr + 1 >= n:
                return self._wait_line(buf, pos, b"\r")
            count = _ll(buf[pos + 1:cr])
            if count is None or count > MULTIBULK_MAX:
                return self._fail(out, "invalid multibulk length")
            pos = cr + 2
            if count <= 0:
                return pos
            self._argv, self._left, self._bulklen, self._argv_bytes = [], count, -1, 0
        argv, maxb, find = self._argv, self._max_bulk, buf.find
        left, bl, held = self._left, self._bulklen, self._argv_bytes
        while True:
            if bl < 0:
                cr = find(b"\r", pos)
                h = buf[pos + 1:cr] if cr > pos else b""
                # the common header: `$` and plain digits without a leading zero
                if cr > pos and buf[pos] == 36 and h.isdigit() and len(h) < 19 \
                        and (h[0] != 48 or len(h) == 1) and cr + 1 < n:
                    bl = int(h)
                else:
                    if cr >= 0 and find(b"\0", pos, cr) >= 0:
                        cr = -1                      # C strchr stops at the NUL
                    if cr < 0 or cr - pos > INLINE_MAX or cr + 1 >= n:
                        self._left, self._bulklen, self._argv_bytes = left, -1, held
                        if cr - pos > INLINE_MAX or (cr < 0 and n - pos > INLINE_MAX):
                            return self._fail(out, "too big bulk count string")
                        return self._wait_line(buf, pos, b"\r")
                    c = buf[pos]
                    if c != 36:
                        got = " " if c in (10, 13) else chr(c)
                        return self._fail(out, f"expected '$', got '{got}'")
                    bl = _ll(h)
                    if bl is None or bl < 0:
                        return self._fail(out, "invalid bulk length")
                if bl > maxb:
                    return self._fail(out, "invalid bulk length")
                pos = cr + 2
            if n - pos < bl + 2:
                self._left, self._bulklen, self._argv_bytes = left, bl, held
                return self._wait_bulk(buf, pos, bl + 2)
            argv.append(buf[pos:pos + bl])
            held += bl
            pos += bl + 2
            bl = -1
            left -= 1
            if not left:
                out.append(argv)
                self._argv, self._argv_bytes, self._bulklen = None, 0, -1
                return pos

    def _inline(self, buf: bytes, pos: int, out: list):
        nl = _find_line(buf, b"\n", pos)
        if nl < 0 or nl - pos > INLINE_MAX:
            if nl >= 0 or len(buf) - pos > INLINE_MAX:
                return self._fail(out, "too big inline request")
            return self._wait_line(buf, pos, b"\n")
        end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
        argv = split_args(buf[pos:end])
        if argv is None:
            return self._fail(out, "unbalanced quotes in request")
        if argv:
            out.append(argv)
        return nl + 1
