"""The bunqueue command table: handler modules register with `@command(name)`.

A handler is `fn(sess, cmd) -> reply`, where reply is a dict of reply fields (with "ok"),
a `Spliced` reply carrying already-packed values (jobs), PENDING when it will answer later
through `sess.later(...)`, or a generator (a steps handler, bulk.py) that yields None between
slices of its work and returns one of the above. `mutating=True` marks commands whose reply waits for the commit.
"""
from __future__ import annotations

from .codec import UNDEFINED

HANDLERS: dict = {}
MUTATING: set = set()
#: Handlers used instead of HANDLERS' for a frame over bulk.BIG_FRAME (steps handlers).
BULK: dict = {}


class Spliced:
    """A reply whose `raw` (key, packed bytes) pairs follow the fields of `head`."""

    __slots__ = ("head", "raw")

    def __init__(self, head: dict, raw: list) -> None:
        self.head = head
        self.raw = raw


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()

#: The error of a command whose reply waits for a commit while storage is unavailable
#: (Port.storage_down; the command is not run), or whose database read failed (shared mode).
#: The reference has no such state (its SQLite errors surface as the exception's text), so
#: the text is ours.
STORAGE_UNAVAILABLE = "Storage unavailable"

#: The reply of commands that answer only "ok" (the reference adds `id: undefined`).
def ok_empty() -> dict:
    return {"ok": True, "id": UNDEFINED}


def err(msg: str) -> dict:
    """An error reply: {ok: false, error: msg}."""
    return {"ok": False, "error": msg}


def command(name: str, mutating: bool = False):
    """Register the decorated function as the handler of command `name`."""
    def deco(fn):
        HANDLERS[name] = fn
        if mutating:
            MUTATING.add(name)
        return fn
    return deco


def bulk_command(name: str):
    """Register the decorated steps handler for frames of command `name` over
    bulk.BIG_FRAME (its plain handler is registered with @command)."""
    def deco(fn):
        BULK[name] = fn
        return fn
    return deco
