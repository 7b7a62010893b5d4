"""One bunqueue connection, sans-IO: frame bodies in, framed replies out (DESIGN.md,
"Protocols: sans-IO"; bunqueue-tcp-protocol.txt).

Per connection: authentication state (`Auth` with a configured token; before it every other
command gets `Not authenticated`), the negotiated protocol version (`Hello`: 1-3), an optional
rate limit (token bucket, `Rate limit exceeded`), the reservations it holds (an Owner; closing
the connection returns them to waiting without counting an attempt), its waiting commands
(PULL with a timeout, WaitJob) and its event subscription.

`handle(body)` returns the framed reply, or None when the command answers later through
`deliver(frame_bytes, need_commit)`. After a mutating command `need_commit` is True: the reply
must wait for the group commit (durability: commit).
"""
from __future__ import annotations

import logging
import time

from core.model import Owner

from . import (handlers_control, handlers_core, handlers_outcome,  # noqa: F401 (registration)
               handlers_query)
from .codec import UNDEFINED, decode_command, frame, pack, splice_map
from .info import CAPABILITIES, PROTOCOL_VERSIONS, SPEAKS_VERSION, BunqueueInfo
from .registry import HANDLERS, MUTATING, PENDING, Spliced, command, err, ok_empty

log = logging.getLogger("jobgate.bunqueue")

_NOT_AUTH = "Not authenticated"


def encode(reply, rid) -> bytes:
    """A handler's reply with `reqId` as one frame."""
    if reply.__class__ is dict:
        reply["reqId"] = rid
        return frame(pack(reply))
    return frame(splice_map(reply.head, reply.raw, {"reqId": rid}))


class Session:
    """The state of one bunqueue connection (see the module docstring).

    `deliver(data: bytes, need_commit: bool)` sends a late reply or an event frame.
    """

    def __init__(self, info: BunqueueInfo, deliver) -> None:
        self.info = info
        self.engine = info.engine
        self.deliver = deliver
        self.authed = not info.auth_tokens
        self.version = 1
        self.owner = Owner("bunqueue", margin=False)
        self.name = self.owner.name   # this connection in the history (`bunqueue#<n>`)
        self.owners: list[Owner] = []       # owners of waiting pulls (one waiter each)
        self.waits: set = set()             # cancel functions of pending waits
        self.need_commit = False
        self.subscribed: set | None = None  # None: not subscribed; empty set: every queue
        self.rid = UNDEFINED
        self.closed = False
        self._tokens = float(info.rate_limit)
        self._refill = time.monotonic()
        info.connections += 1

    # ----------------------------------------------------------------- input
    def handle(self, body: bytes) -> bytes | None:
        """Run one frame body; the framed reply, or None when it answers later."""
        cmd = decode_command(body)
        if cmd.__class__ is not dict:
            if cmd.__class__ is tuple:
                return frame(pack({"ok": False, "error": cmd[0], "reqId": cmd[1]}))
            return frame(pack({"ok": False, "error": cmd, "reqId": UNDEFINED}))
        rid = cmd.get("reqId", UNDEFINED)
        if rid is None:
            rid = UNDEFINED
        name = cmd["cmd"]
        if self.info.rate_limit and not self._take_token():
            return encode(err("Rate limit exceeded"), rid if rid.__class__ is str else UNDEFINED)
        if not self.authed and name != "Auth":
            return encode(err(_NOT_AUTH), rid)
        h = HANDLERS.get(name)
        if h is None:
            return encode(err(f"Unknown command: {name}"), rid)
        self.rid = rid
        try:
            r = h(self, cmd)
        except (TypeError, AttributeError, ValueError, KeyError, IndexError) as e:
            # a field of an unexpected type: an error reply, as the reference's JavaScript
            # exceptions become one; the connection and every job stay as they were
            log.debug("bunqueue %s: %r", name, e)
            r = err(f"Invalid {name} command: {e.__class__.__name__}")
        if r is PENDING:
            return None
        if name in MUTATING:
            self.need_commit = True
        return encode(r, rid)

    def _take_token(self) -> bool:
        now = time.monotonic()
        rate = self.info.rate_limit
        self._tokens = min(rate, self._tokens + (now - self._refill) * rate)
        self._refill = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    # ---------------------------------------------------------------- output
    def later(self, rid, reply, need_commit: bool = False) -> None:
        """Answer a waiting command (called from engine callbacks)."""
        if not self.closed:
            self.deliver(encode(reply, rid), need_commit)

    def event(self, event_type: str, queue: str, job_id: str, now_ms: int,
              extra: dict | None = None) -> None:
        """An unsolicited event frame, when this connection subscribed to `queue`."""
        subs = self.subscribed
        if subs is None or (subs and queue not in subs) or self.closed:
            return
        ev = {"eventType": event_type, "queue": queue, "jobId": job_id,
              "timestamp": float(now_ms)}
        if extra:
            ev.update(extra)
        self.deliver(frame(pack({"type": "event", "event": ev})), False)

    # ----------------------------------------------------------------- close
    def close(self) -> None:
        """The connection ended: withdraw its waits, return its active jobs to waiting."""
        if self.closed:
            return
        self.closed = True
        self.info.connections -= 1
        self.info.subscribers.discard(self)
        e = self.engine
        for cancel in list(self.waits):
            cancel()
        self.waits.clear()
        for o in [self.owner] + self.owners:
            for job in list(o.reserved.values()):
                self.info.locks.pop(job.id, None)
            e.release_owner(o)
        self.owners.clear()

    def wait_owner(self, ttr_ms: int, name: str) -> Owner:
        """A fresh Owner for a pull that waits (the engine keeps one waiter per owner);
        `name`: the worker recorded in the history."""
        if len(self.owners) > 64:
            self.owners = [o for o in self.owners if o.reserved or o.waiter is not None]
        o = Owner("bunqueue", margin=False, ttr_ms=ttr_ms, name=name)
        self.owners.append(o)
        return o


# -------------------------------------------------------------- connection
@command("Hello")
def _hello(sess: Session, cmd: dict):
    v = cmd.get("protocolVersion")
    if v.__class__ is not int or v < PROTOCOL_VERSIONS[0]:
        v = PROTOCOL_VERSIONS[0]
    sess.version = min(v, PROTOCOL_VERSIONS[-1])
    return {"ok": True, "protocolVersion": sess.version, "capabilities": list(CAPABILITIES),
            "server": "bunqueue", "version": SPEAKS_VERSION}


@command("Auth")
def _auth(sess: Session, cmd: dict):
    if not sess.info.auth_tokens or sess.info.check_token(cmd.get("token")):
        sess.authed = True
        return ok_empty()
    return err("Invalid token")


__all__ = ["Session", "encode", "Spliced"]
