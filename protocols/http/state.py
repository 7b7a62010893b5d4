"""The `http` listener's server-wide state: bunqueue commands run for HTTP requests.

A request runs one bunqueue command (the reference's HTTP routes call its TCP command
handler: http-routes/queueJobs.js, httpRouteJobs.js) through a protocols.bunqueue Session.
There is one Session per principal (None: no access control), kept for the server's life:
a job pulled over HTTP stays active (owned by that Session) until it is acked, failed or its
lock expires, as the reference's stateless HTTP pulls (no client id; stall detection).
"""
from __future__ import annotations

import itertools
from types import GeneratorType

import msgpack

from protocols.bunqueue import BunqueueInfo, Session


class _Undefined:
    """JavaScript's undefined decoded from a reply (MessagePack ext 0)."""


_UNDEFINED = _Undefined()


def _ext(code: int, data: bytes):
    return _UNDEFINED if code == 0 else None


def decode_reply(frame: bytes) -> dict:
    """A framed bunqueue reply (4-byte length + MessagePack map) as a JSON-ready dict, its
    `reqId` dropped; as JSON.stringify, undefined members are left out, integral floats are
    written as integers (1795650001007, not 1795650001007.0) and NaN / infinities as null;
    bytes become text (UTF-8, replacement characters)."""
    obj = decode_reply_raw(frame)
    obj.pop("reqId", None)
    return jsonable(obj)


def decode_reply_raw(frame: bytes):
    """A framed MessagePack value as decoded (ext types: None; timestamps: datetime)."""
    return msgpack.unpackb(frame[4:], raw=False, ext_hook=_ext, strict_map_key=False,
                           timestamp=3)


def jsonable(v):
    """`v` (a decoded bunqueue value) as JSON.stringify would write it: an undefined member is
    left out, an undefined item is null, bytes become text, integral floats integers, NaN and
    the infinities null; anything else its str()."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items() if x is not _UNDEFINED}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if v is _UNDEFINED:
        return None
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, float):
        # JSON.stringify: an integral number has no ".0"; NaN and the infinities are null
        if v != v or v in (float("inf"), float("-inf")):
            return None
        return int(v) if v.is_integer() and abs(v) < 2 ** 53 else v
    if v is None or isinstance(v, (str, int, bool)):
        return v
    return str(v)


class HttpState:
    """`port`: core.api.Port; `access`: the server's core.api.Access (None: open);
    `info`: a protocols.bunqueue BunqueueInfo (tokens from `access`); `started_ms`: wall ms
    at start (for /health's uptime); `cors`: the Access-Control-Allow-Origin value."""

    def __init__(self, port, context, cors_origins=()) -> None:
        self.port = port
        #: the Access-Control-Allow-Origin value: the origins joined as the reference joins
        #: them ("*" when one of them is "*"; "" when none is configured, its default)
        self.cors = "*" if "*" in cors_origins else ", ".join(cors_origins)
        self.access = getattr(context, "access", None)
        self.version = getattr(context, "version", "")
        self.info = BunqueueInfo(port, (), 0, getattr(context, "database_path", None),
                                 access=self.access)
        # shared mode: this API's counters count among the node's (core/shared_figures.py)
        port.share_figures("bunqueue", lambda: self.info.figures(node_wide=False))
        self.sessions: dict = {}
        self.waiting: set = set()        # reqIds of commands that answer later
        #: on_late(reqId, reply dict, need_commit): set by the HTTP server (app.py)
        self.on_late = None
        self._rid = itertools.count(1)
        self.started_ms = port.clock.wall_ms()

    def operations(self) -> dict:
        """{bunqueue command: times run} for HTTP requests (protocols/contract.py; /metrics):
        the command each route ran (PUSH, PULL, GetJob, ACK, FAIL, Stats, Prometheus...)."""
        return self.info.operations()

    def requires_token(self) -> bool:
        """True when requests must carry a Bearer token (tokens configured)."""
        return self.access is not None and self.access.has_tokens

    def principal(self, auth_header: str | None):
        """(ok, principal) for an Authorization header: as the reference, the text after
        "Bearer " must be a configured token when tokens are configured."""
        if self.access is None:
            return True, None
        if not self.access.has_tokens:
            return True, self.access.anonymous
        token = (auth_header or "").replace("Bearer ", "", 1)
        p = self.access.for_token(token)
        return p is not None, p

    def session(self, principal) -> Session:
        key = None if principal is None else principal.name
        s = self.sessions.get(key)
        if s is None:
            s = Session(self.info, self._deliver, defer=None, principal=principal)
            s.authed = True   # the Bearer token was checked by the HTTP layer
            self.sessions[key] = s
        return s

    def _deliver(self, data: bytes, need_commit: bool) -> None:
        try:
            reply = decode_reply_raw(data)
        except Exception:
            return
        if not isinstance(reply, dict):
            return   # not a reply (no event subscriptions here)
        rid = reply.pop("reqId", None)
        if rid in self.waiting:
            self.waiting.discard(rid)
            if self.on_late is not None:
                self.on_late(rid, jsonable(reply), need_commit)

    def start(self, principal, cmd: dict):
        """Run bunqueue command `cmd` (a dict as the TCP client sends) as `principal`.
        Returns (reply dict or None, reqId, need_commit): None when it answers later (a PULL
        that waits), then through `on_late(reqId, reply, need_commit)`. `need_commit`: it
        mutated, the answer waits for the commit (durability `commit`)."""
        sess = self.session(principal)
        rid = f"http-{next(self._rid)}"
        body = msgpack.packb(dict(cmd, reqId=rid), use_bin_type=True)
        sess.need_commit = False
        self.waiting.add(rid)
        r = sess.handle(body)
        if r.__class__ is GeneratorType:   # a big frame: its slices at once
            try:
                while True:
                    next(r)
            except StopIteration as stop:
                r = stop.value
        if r is None:
            return None, rid, False
        self.waiting.discard(rid)
        return decode_reply(r), rid, sess.need_commit

    def event_session(self, principal, deliver, defer) -> Session:
        """A Session of its own for one `/ws` client (its event subscription): `deliver(frame,
        need_commit)` receives the event frames, `defer(fn)` is called when events wait (the
        caller then calls `send_events()`). Close it when the client goes."""
        s = Session(self.info, deliver, defer=defer, principal=principal)
        s.authed = True
        return s

    def forget(self, rid: str) -> None:
        """The request waiting for `rid` went away (its late reply is dropped)."""
        self.waiting.discard(rid)

    def close(self) -> None:
        """End every Session (their active jobs return to waiting)."""
        for s in self.sessions.values():
            s.close()
        self.sessions.clear()
