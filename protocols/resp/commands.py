"""The RESP command table (protocols/resp): every command the glide-mq dialect answers, with
its arity and whether it changes jobs. Handler modules register with `@command`; the session
(protocols/resp/session.py) looks commands up by their upper-case name.

A handler is `fn(sess, args) -> reply`: `sess` the connection's Session (attributes `state`:
GlideState, `port`: the principal's core.api port, `proto`: 2 or 3, `clock`), `args` the
argv after the command name (list of bytes). The reply is a value of protocols/resp/encode.py
(int, bytes, str, None, list, Simple, Error, Map, Set, Double, Verbatim), encoded by the
session in the connection's protocol; or WAIT (the session's marker) for a blocking command.

Arity as Redis gives it (COMMAND INFO): n > 0 exactly n words with the name, n < 0 at least
-n; a mismatch is answered `ERR wrong number of arguments for '<name>' command` before the
handler runs. `write`: the command changes jobs or stored records: refused while storage is
down, and its reply waits for the commit in durability `commit`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class Command(NamedTuple):
    """One entry of COMMANDS: `name` (lower case, as errors show it), `fn`, `arity`,
    `write`."""

    name: str
    fn: Callable
    arity: int
    write: bool


#: upper-case name (bytes) -> Command
COMMANDS: dict = {}
#: FUNCTION/CLIENT/XGROUP/... subcommands: (COMMAND, SUBCOMMAND) upper bytes -> Command
SUBCOMMANDS: dict = {}


def command(name: str, arity: int, write: bool = False, sub: str | None = None):
    """Register the decorated handler as `name` (or as subcommand `sub` of `name`)."""
    def reg(fn):
        c = Command(name.lower() if sub is None else f"{name.lower()}|{sub.lower()}", fn,
                    arity, write)
        if sub is None:
            COMMANDS[name.upper().encode()] = c
        else:
            SUBCOMMANDS[(name.upper().encode(), sub.upper().encode())] = c
        return fn
    return reg


def wrong_args(name: str) -> str:
    """Redis's arity error text for command `name` (lower case)."""
    return f"ERR wrong number of arguments for '{name}' command"


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
