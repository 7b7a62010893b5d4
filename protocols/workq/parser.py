"""The workq wire parser: sans-IO, bytes in, commands out (DESIGN.md, "Protocols: sans-IO").

Framing (workq-protocol.txt; the reference's prot.ParseCmd, ../shared/reference/workq-golden.txt):

- A command is a line ending in CRLF. A line ending in a bare LF closes the connection (the
  reference treats it as a read error), and so does a line with no LF within MAX_READ bytes.
- The line is split on single spaces; empty pieces are skipped. A piece starting with `-` that
  contains `=` is a flag `-key=value` (value: up to a second `=`); an empty key or value, or a
  repeated key, is `Invalid command flags`. Every other piece is an argument; the first piece is
  the command name.
- add, schedule, run, complete and fail carry a payload: `<size>` bytes then CRLF. A bad
  argument count or size answers before the payload is read, so the payload bytes are then read
  as the next line (as the reference does). When the 2 bytes after the payload are not CRLF,
  the command answers `Invalid payload size` (`Invalid result size` for fail) and parsing goes
  on after those 2 bytes.

`Parser.feed(data)` returns a list of items: `Command`, `Reply` (an error answered without a
handler) or CLOSE (send what is pending, then close the connection; nothing after it counts).
The buffer never holds more than MAX_READ bytes of an unfinished line, or one payload. It is a
bytearray read by offset: each read is appended once, lines and payloads are sliced out of it,
and the unconsumed tail moves to the front once per `feed` (`copied` counts those bytes; each
byte moves at most once, so a payload arriving in 1-byte reads costs linear work). The search
for a line end resumes where the last read's search stopped (`scanned` counts the bytes
searched: a 1 MiB line in 1-byte reads is searched once, not once per read).
"""
from __future__ import annotations

from .values import MAX_PAYLOAD, atoi

#: Bytes of one command line the reference reads before giving up (10,000 + 1 MiB).
MAX_READ = 1_058_576

CLOSE = object()


def client_error(msg: bytes) -> bytes:
    """b"-CLIENT-ERROR <msg>\\r\\n"."""
    return b"-CLIENT-ERROR " + msg + b"\r\n"


UNKNOWN = client_error(b"Unknown command")
ARGS = client_error(b"Invalid command args")
FLAGS = client_error(b"Invalid command flags")
PAYLOAD_SIZE = client_error(b"Invalid payload size")
RESULT_SIZE = client_error(b"Invalid result size")


class Reply:
    """An answer the parser gives itself (a framing error): `data` is the reply bytes."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"Reply({self.data!r})"


class Command:
    """One parsed command: `name` (bytes), `args` (list of bytes, without the name), `flags`
    (dict bytes -> bytes, keys without the `-`), `payload` (bytes, or None for commands without
    one)."""

    __slots__ = ("name", "args", "flags", "payload")

    def __init__(self, name: bytes, args: list, flags: dict, payload=None) -> None:
        self.name = name
        self.args = args
        self.flags = flags
        self.payload = payload

    def __repr__(self) -> str:
        return f"Command({self.name!r}, {self.args!r}, {self.flags!r}, {self.payload!r})"


# name -> (argument count including the name, index of the size argument, size error reply)
_PAYLOAD_CMDS = {
    b"add": (6, 5, PAYLOAD_SIZE),
    b"schedule": (7, 6, PAYLOAD_SIZE),
    b"run": (6, 5, PAYLOAD_SIZE),
    b"complete": (3, 2, PAYLOAD_SIZE),
    b"fail": (3, 2, RESULT_SIZE),
}
_EXACT = {b"delete": 2, b"result": 3}
_AT_LEAST = {b"lease": 3, b"inspect": 2}


def tokenize(line: bytes):
    """Split a command line (without CRLF) into (name, args, flags), or return the error reply
    bytes. `name` is the first piece as sent; `args` are the non-flag pieces, name included."""
    pieces = line.split(b" ")
    if b" -" not in line and line[:1] != b"-":   # no piece can be a flag: the common case
        return pieces[0], [v for v in pieces if v], {}
    args = []
    flags = {}
    for v in pieces:
        if not v:
            continue
        if v[0] != 45 or b"=" not in v:   # 45 = "-"
            args.append(v)
            continue
        s = v.split(b"=")
        if len(s[0]) <= 1 or not s[1]:
            return FLAGS
        k = s[0][1:]
        if k in flags:
            return FLAGS
        flags[k] = s[1]
    return pieces[0], args, flags


class Parser:
    """Incremental workq parser for one connection. Not thread-safe."""

    __slots__ = ("_buf", "_pending", "_need", "_closed", "copied", "scanned", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.copied = 0        # bytes moved inside the buffer (compaction)
        self.scanned = 0       # bytes searched for a line end
        self._scan = 0         # no LF in _buf before this offset (a line still arriving)
        self._pending = None   # (Command, size error reply) while its payload is read
        self._need = 0         # bytes of payload + CRLF still expected
        self._closed = False

    def in_payload(self) -> bool:
        """True while a command waits for the rest of its payload."""
        return self._pending is not None

    def buffered(self) -> int:
        """Bytes of an unfinished line or payload held (at most MAX_READ, or one payload)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list:
        """Add received bytes; return the items completed by them (see the module doc)."""
        if self._closed:
            return []
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        find = buf.find
        line = self._line
        while True:
            if self._pending is not None:
                end = pos + self._need
                if end > n:
                    break
                cmd, err = self._pending
                self._pending = None
                if buf[end - 2] != 13 or buf[end - 1] != 10:
                    out.append(Reply(err))
                else:
                    cmd.payload = bytes(buf[pos:end - 2])
                    out.append(cmd)
                pos = end
                continue
            start = self._scan if self._scan > pos else pos
            stop = pos + MAX_READ
            i = find(b"\n", start, stop)
            self.scanned += (i + 1 if i >= 0 else min(n, stop)) - start
            if i < 0:
                if n - pos >= MAX_READ:
                    return self._close(out)
                self._scan = n   # searched up to here: the next read starts where it ends
                break
            if i == pos or buf[i - 1] != 13:   # bare LF: the reference drops the connection
                return self._close(out)
            item = line(bytes(buf[pos:i - 1]))
            pos = i + 1
            if item is not None:
                out.append(item)
        if pos:
            if pos < n:
                self.copied += n - pos
            del buf[:pos]
            self._scan = self._scan - pos if self._scan > pos else 0
        return out

    def _close(self, out: list) -> list:
        self._closed = True
        self._buf = bytearray()
        self._pending = None
        out.append(CLOSE)
        return out

    def _line(self, line: bytes):
        t = tokenize(line)
        if t.__class__ is bytes:
            return Reply(t)
        name, args, flags = t
        argc = len(args)
        spec = _PAYLOAD_CMDS.get(name)
        if spec is not None:
            count, at, err = spec
            if argc != count:
                return Reply(ARGS)
            size = atoi(args[at])
            if size is None or size < 0 or size > MAX_PAYLOAD:
                return Reply(err)
            self._pending = (Command(name, args[1:], flags), err)
            self._need = size + 2
            return None
        want = _EXACT.get(name)
        if want is not None:
            return Command(name, args[1:], flags) if argc == want else Reply(ARGS)
        want = _AT_LEAST.get(name)
        if want is not None:
            return Command(name, args[1:], flags) if argc >= want else Reply(ARGS)
        return Reply(UNKNOWN)
