"""Sans-IO beanstalk command parser.

`Parser.feed(data)` takes bytes and returns a list of commands, each a tuple whose first item is
the command name as bytes (b"put", b"reserve", ...) followed by its parsed arguments:

    (b"put", pri, delay_s, ttr_s, body)        (b"reserve",)        (b"reserve-with-timeout", s)
    (b"reserve-job", id)  (b"delete", id)  (b"release", id, pri, delay_s)  (b"bury", id, pri)
    (b"touch", id)  (b"watch", tube)  (b"ignore", tube)  (b"use", tube)  (b"peek", id)
    (b"peek-ready",)  (b"peek-delayed",)  (b"peek-buried",)  (b"kick", bound)  (b"kick-job", id)
    (b"stats",)  (b"stats-job", id)  (b"stats-tube", tube)  (b"list-tubes",)
    (b"list-tube-used",)  (b"list-tubes-watched",)  (b"pause-tube", tube, delay_s)  (b"quit",)
    (ERROR, reply_bytes)   malformed input, with the exact reply (BAD_FORMAT, ...)
    (COUNTED, op, reply_bytes, producer, uses_id)
                           a command that failed after its arguments parsed, which beanstalkd
                           still counts in cmd-<op> (and, if `producer`, marks the connection a
                           producer): put with trailing garbage (BAD_FORMAT), put over
                           max_job_size (counted when its line is read, reply b"" then; the
                           JOB_TOO_BIG error follows once the body is skipped), put with a bad
                           trailer (EXPECTED_CRLF, producer; like beanstalkd it used up a job
                           id: `uses_id`), pause-tube with an invalid name.

Tube names are str (ASCII). Seconds stay seconds here; the session converts to ms.

Tokenizing follows beanstalkd 1.12 (prot.c), as recorded in ../shared/reference:
- a command line is at most `line_max` (224) bytes including CRLF; the line end is found like
  beanstalkd's scan_line_end: the FIRST CR in the window must be followed by LF, otherwise the
  line is not complete; a window of 224 bytes without a line end is discarded, the input is then
  skipped to the next line end and answered BAD_FORMAT;
- commands are recognised by prefix in beanstalkd's order; commands without arguments must match
  exactly (else BAD_FORMAT); a line containing NUL is BAD_FORMAT;
- integers: optional leading spaces, then decimal digits only (no sign, no tab), u32 for
  pri/delay/ttr/bytes/timeout/bound, u64 for ids; trailing garbage is BAD_FORMAT (strict, like
  beanstalkd HEAD; see docs/beanstalk.md D2);
- put: the body plus CRLF is read as exactly bytes+2 bytes; a wrong trailer is EXPECTED_CRLF;
  bytes > max_job_size skips bytes+2 bytes and answers JOB_TOO_BIG.
The buffer never holds more than max(line_max, max_job_size + 2) unconsumed bytes. It is a
bytearray read by offset: a read appends to it once, commands and bodies are sliced out of it,
and the unconsumed tail is moved to the front once per `feed` (`copied` counts those bytes;
every byte moves at most once, so a body arriving in 1-byte reads costs linear work).
"""
from __future__ import annotations

ERROR = b"error"
COUNTED = b"counted"
BAD_FORMAT = b"BAD_FORMAT\r\n"
UNKNOWN_COMMAND = b"UNKNOWN_COMMAND\r\n"
EXPECTED_CRLF = b"EXPECTED_CRLF\r\n"

U32 = 2**32 - 1
U64 = 2**64 - 1
MAX_TUBE_NAME = 200
NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")

_BAD = (ERROR, BAD_FORMAT)
_UNKNOWN = (ERROR, UNKNOWN_COMMAND)
_EXPECTED_CRLF = (COUNTED, b"put", EXPECTED_CRLF, True, True)
_JOB_TOO_BIG = (ERROR, b"JOB_TOO_BIG\r\n")
_PUT_TOO_BIG = (COUNTED, b"put", b"", False, False)
_PUT_TRAILING = (COUNTED, b"put", BAD_FORMAT, False, False)
_PAUSE_BAD_NAME = (COUNTED, b"pause-tube", BAD_FORMAT, False, False)

# States
_COMMAND, _ENDLINE, _BODY, _SKIP = 0, 1, 2, 3


def read_uint(s: bytes, i: int, limit: int, last: bool):
    """Parse a decimal unsigned int at s[i:] after optional spaces (beanstalkd read_u32/u64).

    Returns (value, end_index) or None when malformed / > limit / (last and trailing bytes).
    """
    n = len(s)
    while i < n and s[i] == 32:
        i += 1
    j = i
    while j < n and 48 <= s[j] <= 57:
        j += 1
    if j == i:
        return None
    v = int(s[i:j])
    if v > limit or (last and j != n):
        return None
    return v, j


def valid_tube(name: bytes) -> bool:
    """beanstalkd is_valid_tube: 1..200 bytes of NAME_CHARS, not starting with '-'."""
    return (0 < len(name) <= MAX_TUBE_NAME and name[0] != 45
            and all(c in NAME_CHARS for c in name))


def _id_cmd(op: bytes, line: bytes, off: int):
    r = read_uint(line, off, U64, True)
    return _BAD if r is None else (op, r[0])


def _name_cmd(op: bytes, line: bytes, off: int):
    name = line[off:]
    return (op, name.decode("ascii")) if valid_tube(name) else _BAD


def _exact(op: bytes, line: bytes):
    return (op,) if len(line) == len(op) else _BAD


def parse_line(line: bytes):
    """Parse one command line (without CRLF) other than put. Returns a command tuple."""
    if 0 in line:
        return _BAD
    s = line.startswith
    if s(b"peek "):
        return _id_cmd(b"peek", line, 5)
    if s(b"peek-ready"):
        return _exact(b"peek-ready", line)
    if s(b"peek-delayed"):
        return _exact(b"peek-delayed", line)
    if s(b"peek-buried"):
        return _exact(b"peek-buried", line)
    if s(b"reserve-with-timeout "):
        r = read_uint(line, 21, U32, True)
        return _BAD if r is None else (b"reserve-with-timeout", r[0])
    if s(b"reserve-job "):
        return _id_cmd(b"reserve-job", line, 12)
    if s(b"reserve"):
        return _exact(b"reserve", line)
    if s(b"delete "):
        return _id_cmd(b"delete", line, 7)
    if s(b"release "):
        a = read_uint(line, 8, U64, False)
        b = a and read_uint(line, a[1], U32, False)
        c = b and read_uint(line, b[1], U32, True)
        return _BAD if not c else (b"release", a[0], b[0], c[0])
    if s(b"bury "):
        a = read_uint(line, 5, U64, False)
        b = a and read_uint(line, a[1], U32, True)
        return _BAD if not b else (b"bury", a[0], b[0])
    if s(b"kick "):
        r = read_uint(line, 5, U32, True)
        return _BAD if r is None else (b"kick", r[0])
    if s(b"kick-job "):
        return _id_cmd(b"kick-job", line, 9)
    if s(b"touch "):
        return _id_cmd(b"touch", line, 6)
    if s(b"stats-job "):
        return _id_cmd(b"stats-job", line, 10)
    if s(b"stats-tube "):
        return _name_cmd(b"stats-tube", line, 11)
    if s(b"stats"):
        return _exact(b"stats", line)
    if s(b"use "):
        return _name_cmd(b"use", line, 4)
    if s(b"watch "):
        return _name_cmd(b"watch", line, 6)
    if s(b"ignore "):
        return _name_cmd(b"ignore", line, 7)
    if s(b"list-tubes-watched"):
        return _exact(b"list-tubes-watched", line)
    if s(b"list-tube-used"):
        return _exact(b"list-tube-used", line)
    if s(b"list-tubes"):
        return _exact(b"list-tubes", line)
    if s(b"quit"):
        return (b"quit",)
    if s(b"pause-tube"):
        i, n = 10, len(line)
        while i < n and line[i] == 32:
            i += 1
        j = i
        while j < n and line[j] in NAME_CHARS:
            j += 1
        if j == i:
            return _BAD
        r = read_uint(line, j, U32, True)
        if r is None:
            return _BAD
        if line[i] == 45 or j - i > MAX_TUBE_NAME:   # checked after counting, as beanstalkd
            return _PAUSE_BAD_NAME
        return (b"pause-tube", line[i:j].decode("ascii"), r[0])
    return _UNKNOWN


class Parser:
    """Incremental parser for one beanstalk connection (sans-IO).

    line_max: longest command line in bytes including CRLF (beanstalkd LINE_BUF_SIZE, 224).
    max_job_size: largest body in bytes (beanstalkd -z, default 65535).
    """

    __slots__ = ("buf", "state", "line_max", "max_job_size", "_need", "_put", "_skip_reply",
                 "copied")

    def __init__(self, max_job_size: int = 65535, line_max: int = 224) -> None:
        self.buf = bytearray()
        self.copied = 0   # bytes moved inside the buffer (compaction), for tests of the work
        self.state = _COMMAND
        self.line_max = line_max
        self.max_job_size = max_job_size
        self._need = 0
        self._put = None
        self._skip_reply = None

    def in_body(self) -> bool:
        """True while a put's body is still being read (the put line was accepted)."""
        return self.state == _BODY

    def buffered(self) -> int:
        """Bytes held but not yet consumed (bounded by max(line_max, max_job_size + 2))."""
        return len(self.buf)

    def feed(self, data: bytes) -> list:
        """Consume `data`; return the commands completed by it, in order."""
        buf = self.buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        lmax = self.line_max
        while True:
            st = self.state
            if st == _COMMAND or st == _ENDLINE:
                size = n - pos
                if size > lmax:
                    size = lmax
                if size < 2:
                    break
                cr = buf.find(b"\r", pos, pos + size - 1)
                if cr >= 0 and buf[cr + 1] == 10:
                    line = bytes(buf[pos:cr])
                    pos = cr + 2
                    if st == _ENDLINE:
                        self.state = _COMMAND
                        out.append(_BAD)
                    elif line.startswith(b"put "):
                        cmd = self._parse_put(line)
                        if cmd is not None:
                            out.append(cmd)
                            if cmd is _PUT_TOO_BIG:
                                self._skip_reply = _JOB_TOO_BIG
                    else:
                        out.append(parse_line(line))
                    continue
                if size == lmax:
                    pos += lmax
                    self.state = _ENDLINE
                    continue
                break
            if st == _BODY:
                need = self._need
                if n - pos < need:
                    break
                end = pos + need
                if buf[end - 2] == 13 and buf[end - 1] == 10:
                    p = self._put
                    out.append((b"put", p[0], p[1], p[2], bytes(buf[pos:end - 2])))
                else:
                    out.append(_EXPECTED_CRLF)
                pos = end
                self._put = None
                self.state = _COMMAND
                continue
            # _SKIP
            avail = n - pos
            if avail < self._need:
                self._need -= avail
                pos = n
                break
            pos += self._need
            self._need = 0
            out.append(self._skip_reply)
            self.state = _COMMAND
        if pos:
            if pos < n:
                self.copied += n - pos
            del buf[:pos]
        return out

    def _parse_put(self, line: bytes):
        """Parse a put line; returns an error or counted-error command, or None after entering
        _BODY (the put command is emitted once its body is complete)."""
        parts = line.split(b" ")
        if len(parts) == 5:  # fast path: single spaces, plain digits
            _, pa, pb, pc, pd = parts
            if pa.isdigit() and pb.isdigit() and pc.isdigit() and pd.isdigit():
                pri, delay, ttr, size = int(pa), int(pb), int(pc), int(pd)
                if pri <= U32 and delay <= U32 and ttr <= U32 and size <= U32:
                    if size > self.max_job_size:
                        self.state = _SKIP
                        self._need = size + 2
                        return _PUT_TOO_BIG
                    self.state = _BODY
                    self._need = size + 2
                    self._put = (pri, delay, ttr)
                    return None
        if 0 in line:
            return _BAD
        a = read_uint(line, 4, U32, False)
        b = a and read_uint(line, a[1], U32, False)
        c = b and read_uint(line, b[1], U32, False)
        d = c and read_uint(line, c[1], U32, False)
        if not d:
            return _BAD
        size = d[0]
        if size > self.max_job_size:
            self.state = _SKIP
            self._need = size + 2
            return _PUT_TOO_BIG
        if d[1] != len(line):
            return _PUT_TRAILING
        self.state = _BODY
        self._need = size + 2
        self._put = (a[0], b[0], c[0])
        return None
