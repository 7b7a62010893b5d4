"""Connection commands a RESP client sends around its work (glide-mq-NOTES.md "What a real
client sends on connect"; golden A01–A17, I01–I03, I19, I23–I25): HELLO, AUTH, CLIENT
SETINFO / SETNAME / GETNAME / ID, INFO, PING, ECHO, SELECT, QUIT, COMMAND basics.

jobgate answers as Redis 7.2 does where 7.0 (the golden's server) and 7.2 differ: `CLIENT
SETINFO` is accepted (+OK; 7.0 did not know it, and clients ignore that error either way).
HELLO and INFO report server "redis", version SERVER_VERSION, mode standalone, role master,
so that clients take the primary they are connected to; INFO also names jobgate. SELECT of
any database 0–15 answers OK and keeps the one keyspace (glide-mq producers select 0).
"""
from __future__ import annotations

from .commands import command
from .encode import Error, Map, Simple, Verbatim

#: The Redis version jobgate reports (HELLO, INFO): the command set it follows.
SERVER_VERSION = "7.2.0"

OK = Simple("OK")


def _hello_map(sess) -> Map:
    return Map([("server", "redis"), ("version", SERVER_VERSION), ("proto", sess.proto),
                ("id", sess.client_id), ("mode", "standalone"), ("role", "master"),
                ("modules", [])])


def _auth(sess, token: bytes):
    """Bind the principal of bunqueue token `token` (core.api Access); an Error otherwise."""
    access = sess.state.context.access
    if access is None or not access.has_tokens:
        return Error("ERR AUTH <password> called without any password configured for the "
                     "default user. Are you sure your configuration is correct?")
    p = access.for_token(token.decode("utf-8", "replace"))
    if p is None:
        return Error("WRONGPASS invalid username-password pair or user is disabled.")
    sess.principal = p
    sess.port = sess.state.port.scoped(p)
    sess.auth_required = False
    return None


@command("HELLO", -1)
def hello(sess, args):
    """HELLO [protover [AUTH user pass] [SETNAME name]]: the server map in the new protocol
    (RESP2: flat array); NOPROTO for a version other than 2 or 3 (golden A01, A14, A15,
    I23, I24)."""
    proto = sess.proto
    i = 0
    if args:
        try:
            proto = int(args[0])
        except ValueError:
            return Error("ERR Protocol version is not an integer or out of range")
        if proto not in (2, 3):
            return Error("NOPROTO unsupported protocol version")
        i = 1
    name = None
    while i < len(args):
        opt = args[i].upper()
        if opt == b"AUTH" and i + 2 < len(args):
            e = _auth(sess, args[i + 2])
            if e is not None:
                return e
            i += 3
        elif opt == b"SETNAME" and i + 1 < len(args):
            name = args[i + 1]
            i += 2
        else:
            return Error(f"ERR Syntax error in HELLO option '{args[i].decode('utf-8', 'replace')}'")
    if sess.auth_required:
        return Error("NOAUTH HELLO must be called with the client already authenticated, "
                     "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                     "authenticate the client and select the RESP protocol version at the "
                     "same time")
    if name is not None:
        sess.name = name
    sess.proto = proto
    return _hello_map(sess)


@command("AUTH", -2)
def auth(sess, args):
    """AUTH [username] password: the password is a bunqueue token (docs/operations.md)."""
    if len(args) > 2:
        return Error("ERR syntax error")
    e = _auth(sess, args[-1])
    return OK if e is None else e


@command("CLIENT", -3, sub="SETINFO")
def client_setinfo(sess, args):
    """CLIENT SETINFO LIB-NAME|LIB-VER value: OK (Redis 7.2; golden A02/A03 show 7.0's
    error, which clients ignore)."""
    if len(args) != 3:
        return Error("ERR wrong number of arguments for 'client|setinfo' command")
    if args[1].upper() not in (b"LIB-NAME", b"LIB-VER"):
        return Error(f"ERR Unrecognized option '{args[1].decode('utf-8', 'replace')}'")
    return OK


@command("CLIENT", 3, sub="SETNAME")
def client_setname(sess, args):
    """CLIENT SETNAME name (golden A04)."""
    if b" " in args[1] or b"\n" in args[1]:
        return Error("ERR Client names cannot contain spaces, newlines or special characters.")
    sess.name = args[1] or None
    return OK


@command("CLIENT", 2, sub="GETNAME")
def client_getname(sess, args):
    """CLIENT GETNAME: the name, or null (golden A05)."""
    return sess.name


@command("CLIENT", 2, sub="ID")
def client_id(sess, args):
    """CLIENT ID: this connection's id (int)."""
    return sess.client_id


@command("PING", -1)
def ping(sess, args):
    """PING [message] (golden A08, A09)."""
    if len(args) > 1:
        return Error("ERR wrong number of arguments for 'ping' command")
    return args[0] if args else Simple("PONG")


@command("ECHO", 2)
def echo(sess, args):
    """ECHO message (golden A13)."""
    return args[0]


@command("SELECT", 2)
def select(sess, args):
    """SELECT n: OK for 0–15 (one keyspace; golden A10–A12)."""
    try:
        n = int(args[0])
    except ValueError:
        return Error("ERR value is not an integer or out of range")
    if not 0 <= n < 16:
        return Error("ERR DB index is out of range")
    return OK


@command("QUIT", -1)
def quit_(sess, args):
    """QUIT: OK, then the connection closes (the session's parser marks it)."""
    return OK


@command("RESET", 1)
def reset(sess, args):
    """RESET: back to RESP2, no name (authentication stays)."""
    sess.proto = 2
    sess.name = None
    return Simple("RESET")


def info_text(sess, sections) -> str:
    """INFO's body for `sections` (lower-case names; empty: the default ones)."""
    from .state import LIBRARY_VERSION
    st = sess.state
    ctx = st.context
    out = []
    want = set(sections) or {"server", "clients", "replication", "keyspace"}
    every = bool(want & {"all", "everything", "default"})
    if every or "server" in want:
        out.append("# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\n"
                   "jobgate_version:%s\r\nglidemq_library_version:%s\r\ntcp_port:%s\r\n" % (
                       SERVER_VERSION, getattr(ctx, "version", ""), LIBRARY_VERSION,
                       st.options.get("port", "")))
    if every or "clients" in want:
        out.append("# Clients\r\nconnected_clients:%d\r\n" % st.connections)
    if every or "replication" in want:
        out.append("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n")
    if every or "keyspace" in want:
        out.append("# Keyspace\r\n")
    return "\r\n".join(out)


@command("INFO", -1)
def info(sess, args):
    """INFO [section ...]: RESP3 verbatim text, RESP2 bulk; replication says role:master
    (golden A06, A07, I19)."""
    return Verbatim("txt", info_text(sess, [a.decode("utf-8", "replace").lower()
                                             for a in args]))


@command("COMMAND", 1)
def command_list(sess, args):
    """COMMAND: [name, arity, flags, first key, last key, step] per command."""
    from .commands import COMMANDS
    return [[c.name, c.arity, [Simple("write" if c.write else "readonly")], 1, 1, 1]
            for c in COMMANDS.values()]


@command("COMMAND", 2, sub="COUNT")
def command_count(sess, args):
    """COMMAND COUNT: how many commands the table has."""
    from .commands import COMMANDS
    return len(COMMANDS)


@command("COMMAND", -2, sub="DOCS")
def command_docs(sess, args):
    """COMMAND DOCS: an empty map (clients only use it for help texts)."""
    return Map([])


@command("COMMAND", -2, sub="INFO")
def command_info(sess, args):
    """COMMAND INFO name ...: per name its entry, or null."""
    from .commands import COMMANDS
    out = []
    for a in args[1:]:
        c = COMMANDS.get(a.upper())
        out.append(None if c is None else
                   [c.name, c.arity, [Simple("write" if c.write else "readonly")], 1, 1, 1])
    return out
