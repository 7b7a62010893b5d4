"""One RESP connection (sans-IO): commands in order, one reply each, pipelined (docs/glide-mq.md).

The parser (protocols/resp/codec.py) turns bytes into argv lists; `Handler.handle` looks the
command up in the table (protocols/resp/commands.py), checks its arity, and runs it; the reply
value is encoded in the connection's protocol (RESP2 until `HELLO 3`). protocols/sequential.py
runs it all (the same runner as beanstalk and workq: in order, a blocking XREADGROUP holds the
commands behind it, end of input withdraws a wait).

Replies to write commands wait for the commit in durability `commit` (`need_commit`); while
storage is down a write command is refused with `MISCONF` and changes nothing (Redis's error
for "cannot persist": clients treat it as a refused write). A protocol error (bad length,
nesting, inline line too long) is answered `ERR Protocol error: ...` and the connection is
closed, as Redis does. Access (docs/operations.md "TLS and access"): the connection's principal
scopes the port; a disallowed queue is answered `NOPERM`; a listener that requires a token
answers `NOAUTH Authentication required.` until AUTH / HELLO AUTH gives a bunqueue token.
"""
from __future__ import annotations

from core.api import AccessDenied

from ..sequential import Sequential
from .codec import ProtocolError, RequestParser
from .commands import COMMANDS, SUBCOMMANDS, wrong_args
from .encode import Error, encode

WAIT = object()
QUIT = object()
CLOSE = object()

#: Commands answered before authentication (Redis: AUTH, HELLO, QUIT, and the handshake).
_PRE_AUTH = frozenset((b"AUTH", b"HELLO", b"QUIT", b"PING", b"RESET"))
_WITH_SUB = frozenset((b"FUNCTION", b"CLIENT", b"XGROUP", b"COMMAND", b"XINFO", b"CONFIG",
                       b"OBJECT", b"MEMORY"))


class _Parser:
    """RequestParser with the session's markers: CLOSE after a protocol error (answered
    first) and after QUIT."""

    __slots__ = ("p",)

    def __init__(self, max_bulk: int) -> None:
        self.p = RequestParser(max_bulk=max_bulk)

    def feed(self, data: bytes) -> list:
        items = self.p.feed(data)
        if items and (items[-1].__class__ is ProtocolError):
            items.append(CLOSE)
        for i, it in enumerate(items):
            if it.__class__ is list and len(it) == 1 and it[0].upper() == b"QUIT":
                del items[i + 1:]
                items.append(CLOSE)   # +OK first (commands.py QUIT), then close
                break
        return items

    def buffered(self) -> int:
        return self.p.buffered()


class Handler:
    """The command side of one connection. Attributes the handlers read: `state`
    (GlideState), `port` (the principal's port), `proto` (2 or 3), `name` (CLIENT SETNAME),
    `client_id`; `need_commit` is set by a handler whose reply must wait for the commit."""

    def __init__(self, state, principal) -> None:
        self.state = state
        self.clock = state.clock
        self.principal = principal
        access = state.context.access
        self.auth_required = (access is not None and access.has_tokens
                              and principal is not None and principal.kind == "nobody")
        self.port = state.port.scoped(principal)
        self.proto = 2
        self.name = None
        state.next_client_id += 1
        self.client_id = state.next_client_id
        state.connections += 1
        self.need_commit = False
        self.on_wake = None
        self.reply = None       # a blocking command's answer, once there (streams.py)
        self.replied = False    # it is there (it may be None: a nil reply)
        self.waiting = None     # its withdraw function while it waits
        # shared mode (protocols/resp/shared.py): a command waits for the database first
        self.shared = state.port.shared
        self.preparing = False  # such a command waits (its reply comes; never withdrawn)
        self.prepared = None    # while a function runs: a shared.Prepared
        self.remote = None      # while a read runs: {uid: JobView} of rows read
        self.rows = None        # while a read runs: {queue: [JobView]} of the queue's jobs
        self.counters = None    # while a read runs: {base: the shared id counter's value}
        self.metas = None       # while a read runs: {(kind, base): meta / dedup records}
        self.ahead = None       # () -> the commands parsed behind the running one
        self.id_stock: dict = {}    # base -> ids taken for this connection's next addJobs
        self.planned: dict = {}     # id(command) -> command: addJobs a look-ahead planned
        self.taken_stock: set = set()   # custom uids its round found taken
        self.current = None     # shared mode: the command running

    # ------------------------------------------------------------- Sequential's handler
    def handle(self, item):
        if item.__class__ is not list:
            if item is CLOSE:
                return QUIT
            return item.reply   # a ProtocolError: Redis's text (b"" when silent), then close
        name = item[0]
        if name != b"FCALL":    # the hot command, as clients send it: no upper() copy
            name = name.upper()
        cmd = COMMANDS.get(name)
        if cmd is None:
            if name == b"POST" or name == b"HOST:":
                return QUIT   # an HTTP request sent to the RESP port: closed, as Redis does
            if name not in _WITH_SUB:
                return encode(Error(unknown_command(item)), self.proto)
            if len(item) < 2:
                return encode(Error(wrong_args(name.decode().lower())), self.proto)
            cmd = SUBCOMMANDS.get((name, item[1].upper()))
            if cmd is None:
                return encode(Error(
                    f"ERR unknown subcommand '{item[1].decode('utf-8', 'replace')[:128]}'. "
                    f"Try {name.decode()} HELP."), self.proto)
        ops = self.state.ops
        key = item[1] if name == b"FCALL" and len(item) > 1 and item[1] in FUNCTION_NAMES \
            else name
        ops[key] = ops.get(key, 0) + 1
        n = cmd.arity
        if (len(item) != n) if n > 0 else (len(item) < -n):
            return encode(Error(wrong_args(cmd.name)), self.proto)
        if self.auth_required and name not in _PRE_AUTH:
            return encode(Error("NOAUTH Authentication required."), self.proto)
        if cmd.write and self.port.storage_down is not None:
            return encode(Error(f"MISCONF jobgate cannot write to its storage now "
                                f"({self.port.storage_down}); nothing was changed"),
                          self.proto)
        try:
            if self.shared:
                self.current = item
                if not cmd.write:
                    r = prefetch(self, cmd, item[1:])
                    if r is WAIT:
                        return WAIT
            r = cmd.fn(self, item[1:])
        except AccessDenied:
            self.need_commit = False
            return encode(Error("NOPERM this user has no permissions to access one of the "
                                "keys used as arguments"), self.proto)
        if r is WAIT:
            return WAIT
        return encode(r, self.proto)

    def has_reply(self) -> bool:
        return self.replied

    def take_reply(self) -> bytes:
        r = self.reply
        self.reply = None
        self.replied = False
        return encode(r, self.proto)

    def cancel_wait(self) -> bytes | None:
        """Withdraw a blocking XREADGROUP (its null reply), or None when it was answered or
        waits for the database (shared mode: its reply comes)."""
        if self.replied or self.preparing:
            return None
        w = self.waiting
        self.waiting = None
        if w is not None:
            w()
        return encode(None if self.proto == 3 else NULL_ARRAY, self.proto)

    def close(self) -> None:
        self.state.connections -= 1
        w = self.waiting
        self.waiting = None
        if w is not None:
            w()

    def wake(self, reply) -> None:
        """A blocking command's answer arrived (inside another command): hand it over."""
        self.waiting = None
        self.preparing = False
        self.reply = reply
        self.replied = True
        if self.on_wake is not None:
            self.on_wake()


def unknown_command(argv: list) -> str:
    """Redis's text for an unknown command (golden H20): its name and up to 128 bytes of its
    first arguments, each quoted."""
    s = "ERR unknown command '%s', with args beginning with: " % (
        argv[0].decode("utf-8", "replace")[:128])
    used = 0
    for a in argv[1:]:
        t = a.decode("utf-8", "replace")
        if used + len(t) > 128:
            t = t[:128 - used]
        s += f"'{t}' "
        used += len(t)
        if used >= 128:
            break
    return s


from .encode import NullArray as NULL_ARRAY  # noqa: E402


# the command modules register their handlers in commands.py's table when imported
from . import connection_cmds, functions, keys, streams  # noqa: E402,F401
from .functions import FUNCTION_NAMES  # noqa: E402
from .shared_reads import prefetch  # noqa: E402


def connect(state, transport) -> Sequential:
    """The push-style session of one RESP connection (protocols/contract.py)."""
    h = Handler(state, getattr(transport, "principal", None))
    seq = Sequential(_Parser(state.options.get("max_bulk_bytes", 512 << 20)), h, transport,
                     WAIT, QUIT)
    h.ahead = seq.ahead
    return seq
