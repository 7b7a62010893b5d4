"""One bunqueue connection, sans-IO: frame bodies in, framed replies out (DESIGN.md,
"Protocols: sans-IO"; bunqueue-tcp-protocol.txt).

Per connection: authentication state (`Auth` with a configured token; before it every other
command gets `Not authenticated`), the negotiated protocol version (`Hello`: 1-3), an optional
rate limit (token bucket on the port's clock, `Rate limit exceeded`), the reservations it holds
(owners; closing the connection returns them to waiting without counting an attempt), its
waiting commands (PULL with a timeout, WaitJob) and its event subscription (a subscription to
the engine's event feed, core/events.py).

`handle(body)` returns the framed reply, or None when the command answers later through
`deliver(frame_bytes, need_commit)`. After a mutating command `need_commit` is True: the reply
must wait for the group commit (durability: commit). The engine is reached through its port
only (core/api.py); protocols/bunqueue/connection.py runs a Session over the connection
contract.
"""
from __future__ import annotations

import logging
from types import GeneratorType

from core.api import AccessDenied

from . import (handlers_control, handlers_core, handlers_flow,  # noqa: F401 (registration)
               handlers_metrics, handlers_moves, handlers_outcome, handlers_query,
               handlers_webhooks)
from . import handlers_limits  # noqa: F401 (registration: issue 16 queue limits)
from . import handlers_cron  # noqa: F401 (registration: Cron, CronGet, CronDelete, CronList)
from . import handlers_links  # noqa: F401 (registration: UpdateParent and the other links)
from .bulk import BIG_FRAME
from .codec import (UNDEFINED, decode_command, decode_steps, frame, nil_req_id, pack, splice_map,
                    unpack_value)
from .forward import FORWARDED, forward, held_elsewhere
from .push_checks import CUSTOM_IDS, check_new, custom_ids, linked_ids, unique_keys
from .relink import RELINKING, relink
from .info import CAPABILITIES, PROTOCOL_VERSIONS, SPEAKS_VERSION, BunqueueInfo
from .registry import (BULK, HANDLERS, MUTATING, PENDING, STORAGE_UNAVAILABLE, Spliced, command,
                       err, ok_empty)

log = logging.getLogger("jobgate.bunqueue")

_NOT_AUTH = "Not authenticated"
_FIELD_ERRORS = (TypeError, AttributeError, ValueError, KeyError, IndexError)


def _field_error(name: str, e: Exception) -> dict:
    """A field of an unexpected type: an error reply, as the reference's JavaScript exceptions
    become one; the connection and every job stay as they were."""
    log.debug("bunqueue %s: %r", name, e)
    return err(f"Invalid {name} command: {e.__class__.__name__}")


#: Canonical event kinds (core/events.py) as bunqueue event types; others are not sent.
EVENT_TYPES = {"put": "pushed", "add": "pushed", "schedule": "pushed", "run": "pushed",
               "push": "pushed", "reserve": "pulled", "complete": "completed",
               "fail": "failed"}


def event_dict(ev) -> dict | None:
    """bunqueue's event object for a canonical event (core.api.Event), or None when bunqueue
    has no event for it: {eventType, queue, jobId, timestamp (wall ms, float)[, data |
    error]} (completed carries the result as `data`, failed the failure's text as `error`)."""
    t = EVENT_TYPES.get(ev.kind)
    if t is None:
        return None
    e = {"eventType": t, "queue": ev.queue, "jobId": ev.uid, "timestamp": float(ev.at_ms)}
    if t == "completed":
        e["data"] = None if ev.result is None else unpack_value(ev.result, ev.result_fmt)
    elif t == "failed":
        e["error"] = ev.error
    return e


def event_frame(ev) -> bytes | None:
    """The bunqueue frame of a canonical event, {type: "event", event: event_dict(ev)}, or
    None when bunqueue has no event for it."""
    e = event_dict(ev)
    return None if e is None else frame(pack({"type": "event", "event": e}))


class _Nil:
    """A `reqId` sent as MessagePack nil (decoded commands hold None for nil and undefined)."""

    __slots__ = ()


NIL = _Nil()


def _nil_checked(cmd, body):
    """`cmd` with a nil `reqId` marked NIL (echoed as nil, as the reference does: B11); the
    frame is looked at again only when a `reqId` decoded as None."""
    if cmd.__class__ is dict and cmd.get("reqId", 0) is None and nil_req_id(body):
        cmd["reqId"] = NIL
    return cmd


def encode(reply, rid) -> bytes:
    """A handler's reply with `reqId` as one frame."""
    if reply.__class__ is dict:
        reply["reqId"] = rid
        return frame(pack(reply))
    return frame(splice_map(reply.head, reply.raw, {"reqId": rid}))


class Session:
    """The state of one bunqueue connection (see the module docstring).

    `deliver(data: bytes, need_commit: bool)` sends a late reply or an event frame.
    `principal` (core.api.Principal, None: no access control): bound when the connection was
    made (client certificate, unix peer, anonymous on an open listener); commands go through
    `port.scoped(principal)` (a queue it may not use: `Access denied: queue <name>`; a job
    of one: not found). Tokens configured: a connection not identified otherwise ("nobody")
    must Auth, which binds the token's principal (docs/operations.md, "TLS and access").
    """

    def __init__(self, info: BunqueueInfo, deliver, defer=None, principal=None) -> None:
        self.info = info
        self.port = info.port.scoped(principal)
        self.deliver = deliver
        self.defer = defer
        self.authed = not info.requires_auth or (principal is not None
                                                 and principal.kind != "nobody")
        self.version = 1
        self.owner = self.port.new_owner("bunqueue", margin=False)
        self.name = self.owner.name   # this connection in the history (`bunqueue#<n>`)
        self.owners: list = []              # owners of waiting pulls (one waiter each)
        self.waits: set = set()             # cancel functions of pending waits
        self.need_commit = False
        self.subscribed: set | None = None  # None: not subscribed; empty set: every queue
        self.subscription = None            # the feed subscription while subscribed
        self.write_paused = False
        self.rid = UNDEFINED
        self.closed = False
        self.may_forward = self.port.shared  # shared mode: other nodes' jobs (forward.py)
        self.taken_elsewhere: frozenset = frozenset()   # custom ids in the db (push_checks.py)
        self.keys_elsewhere: dict = {}   # (queue, uniqueKey) -> uid of the job holding it there
        # linked uid -> (node holding it, job id) (push_checks.py; relink.py: job id None)
        self.linked_elsewhere: dict = {}
        self.bulk = False                   # running the command of a frame over BIG_FRAME
        self._tokens = float(info.rate_limit)
        self._refill = self.port.clock.monotonic_ms()
        info.connections += 1

    # ----------------------------------------------------------------- input
    def handle(self, body: bytes):
        """Run one frame body: the framed reply; None when it answers later (`deliver`); or,
        for a frame over bulk.BIG_FRAME or a command whose work comes in slices (bulk.py), a
        generator that yields None between slices and returns the framed reply or None
        (connection.py runs it a slice per loop iteration)."""
        if len(body) > BIG_FRAME:
            return self._big(body)
        return self.run(_nil_checked(decode_command(body), body))

    def _big(self, body: bytes):
        cmd = _nil_checked((yield from decode_steps(body)), body)
        self.bulk = True
        try:
            r = self.run(cmd)
        finally:
            self.bulk = False
        if r.__class__ is GeneratorType:
            r = yield from r
        return r

    def run(self, cmd):
        """Run one decoded command (a dict from codec.decode_command, or its error): as
        `handle`."""
        if cmd.__class__ is not dict:
            if cmd.__class__ is tuple:
                return frame(pack({"ok": False, "error": cmd[0], "reqId": cmd[1]}))
            return frame(pack({"ok": False, "error": cmd, "reqId": UNDEFINED}))
        rid = cmd.get("reqId", UNDEFINED)
        if rid is None:
            rid = UNDEFINED
        elif rid is NIL:
            rid = None
        name = cmd["cmd"]
        if self.info.rate_limit and not self._take_token():
            return encode(err("Rate limit exceeded"), rid if rid.__class__ is str else UNDEFINED)
        if not self.authed and name != "Auth":
            return encode(err(_NOT_AUTH), rid)
        h = BULK.get(name) if self.bulk else None
        if h is None:
            h = HANDLERS.get(name)
        if h is None:
            return encode(err(f"Unknown command: {name}"), rid)
        ops = self.info.ops
        ops[name] = ops.get(name, 0) + 1
        if name in MUTATING and self.port.storage_down is not None:
            return encode(err(STORAGE_UNAVAILABLE), rid)   # not run (docs/bunqueue.md)
        self.rid = rid
        if self.may_forward:
            if name in FORWARDED:
                uids = held_elsewhere(self, name, cmd)
                if uids:   # jobs this node does not hold: their nodes run the command
                    forward(self, name, cmd, h, rid, uids)
                    return None
            elif name in RELINKING:   # the jobs it links, from wherever they are
                relink(self, name, cmd, h, rid)
                return None
            elif name in CUSTOM_IDS:
                uids = custom_ids(self, name, cmd)
                keys = unique_keys(self, name, cmd)
                links = linked_ids(self, name, cmd)
                if uids or keys or links:   # ids, keys and linked jobs this node does not
                    # have: the database may (push_checks.py)
                    check_new(self, uids, keys, cmd, h, name, rid, links)
                    return None
        return self.call(h, name, cmd, rid)

    def reply_of(self, h, name: str, cmd: dict):
        """Handler `h`'s reply to command `name`: a dict, a Spliced, PENDING or a steps
        generator; a queue the principal may not use or a field of a wrong type is an error
        reply (never an exception)."""
        try:
            return h(self, cmd)
        except AccessDenied as e:
            return err(f"Access denied: queue {e.queue}")
        except _FIELD_ERRORS as e:
            return _field_error(name, e)

    def call(self, h, name: str, cmd: dict, rid):
        """Run handler `h` of command `name` (its checks done): as `handle`."""
        r = self.reply_of(h, name, cmd)
        if r is PENDING:
            return None
        if r.__class__ is GeneratorType:
            return self._steps(r, name, rid)
        if name in MUTATING:
            self.need_commit = True
        return encode(r, rid)

    def answer_later(self, h, name: str, cmd: dict, rid) -> None:
        """Run handler `h` of command `name` now and send its reply for `rid`: a command whose
        checks ran when it arrived and whose answer waited (forward.py). Its slices run at
        once; the reply of a mutating command goes after the commit."""
        self.rid = rid
        r = self.call(h, name, cmd, rid)
        if r.__class__ is GeneratorType:
            try:
                while True:
                    next(r)
            except StopIteration as stop:
                r = stop.value
        if r is not None and not self.closed:
            self.deliver(r, self.need_commit)
        self.need_commit = False

    def _steps(self, gen, name: str, rid):
        """Drive a steps handler: its slices, then its framed reply."""
        try:
            r = yield from gen
        except AccessDenied as e:   # a slice's queue the principal may not use (PUSHB)
            r = err(f"Access denied: queue {e.queue}")
        except _FIELD_ERRORS as e:
            r = _field_error(name, e)
        if name in MUTATING:
            self.need_commit = True
        return encode(r, rid)

    def _take_token(self) -> bool:
        now = self.port.clock.monotonic_ms()
        rate = self.info.rate_limit
        self._tokens = min(rate, self._tokens + (now - self._refill) * rate / 1000)
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

    # ---------------------------------------------------------------- events
    def subscribe(self, queues) -> None:
        """Receive the events of `queues` (a set; empty: every queue) from now on."""
        self.subscribed = set(queues)
        if self.subscription is None:
            # every node's events in shared mode (docs/scaling.md, "Events across nodes")
            self.subscription = self.port.subscribe(notify=self._events_ready, all_nodes=True)
            self.info.subscribers.add(self)
        self.subscription.set_queues(self.subscribed or None)

    def unsubscribe(self) -> None:
        """Stop receiving events (those not yet sent are dropped)."""
        self.subscribed = None
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None
        self.info.subscribers.discard(self)

    def _events_ready(self) -> None:
        # called inside an engine operation: send from outside it
        if self.defer is not None:
            self.defer(self.send_events)
        else:
            self.send_events()

    def send_events(self) -> None:
        """Send the buffered events as frames, unless the peer is not reading (then they wait,
        and the oldest go when the subscription's buffer is full)."""
        sub = self.subscription
        if sub is None or self.closed or self.write_paused:
            return
        for ev in sub.take():
            f = event_frame(ev)
            if f is not None:
                self.deliver(f, False)

    # ----------------------------------------------------------------- close
    def close(self) -> None:
        """The connection ended: withdraw its waits, return its active jobs to waiting."""
        if self.closed:
            return
        self.closed = True
        self.info.connections -= 1
        self.unsubscribe()
        e = self.port
        for cancel in list(self.waits):
            cancel()
        self.waits.clear()
        for o in [self.owner] + self.owners:
            e.release_owner(o)
        self.owners.clear()
        self.info.workers.drop_session(self)   # its workers go with it (as the reference)

    def wait_owner(self, ttr_ms: int, name: str):
        """A fresh owner for a pull that waits (the engine keeps one waiter per owner);
        `name`: the worker recorded in the history."""
        e = self.port
        if len(self.owners) > 64:
            self.owners = [o for o in self.owners if not e.owner_idle(o)]
        o = e.new_owner("bunqueue", margin=False, ttr_ms=ttr_ms, name=name)
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
    info = sess.info
    if not info.requires_auth:
        sess.authed = True
        return ok_empty()
    p = info.token_principal(cmd.get("token"))
    if p is None:
        return err("Invalid token")
    sess.authed = True
    sess.port = info.port.scoped(p)   # the token's queues from now on
    if sess.subscription is not None:
        sess.subscription.allow = None if p.unrestricted else p.allows
    return ok_empty()


__all__ = ["Session", "encode", "Spliced"]
