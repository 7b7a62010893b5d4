"""Commands forwarded to the node that holds a job (issue 19, item 4: "bunqueue locks,
renewals ... across nodes"; docs/scaling.md "Locks presented on another node").

A reserved job lives in the engine of the node whose client reserved it: its lease, lock
token, timers and waiters are there. A client may present its lock on another node, though: a
bunqueue Worker sends its commands over a pool of up to 8 connections, which a load balancer
may spread over several nodes, so the `ACK` of a job pulled through node A can arrive at node
B. Node B then forwards the command to A, which runs it as if its own client had sent it and
answers through B:

1. B reads which node holds the job (`jobs.node` of the row with that uid; for a batch, of
   each job's row); a job that no node holds is taken into B's engine instead (`reach`), and
   B runs the command itself, as a single server would;
2. B sends the command on channel `jobgate_calls`: MessagePack ("q", request number, dialect,
   principal, command bytes), cut by core.shared_events.cut into payloads whose head is
   `<to>:<from>:<batch>`, so that a listener keeps only those addressed to it;
3. A runs the command through the dialect's handler (registered with
   Port.serve_forwarded), and once what it changed is committed sends ("r", request number,
   reply bytes) back (reply None: nobody there serves that dialect);
4. B answers its client with the reply; when no node holds the job, A does not answer within
   CALL_MS, or the database fails, B answers as it would for a job that does not exist.

The command runs on A with the principal of B's client (access is checked where the job is).
A reply lost after A ran the command (B timed out) leaves the client with a "not found" for
a command that took effect: the client's retry then gets "not found" too, as on a single
server after a lost reply. No I/O here (gateway/shared.py runs the statements and feeds the
listener's payloads to `received`). Units: ms.
"""
from __future__ import annotations

import secrets

import msgpack

from .shared_events import Joiner, cut, publish
from .model import derived_uid, parse_derived_uid
from .shared_reads import _COLS, _run

#: the channel of forwarded commands and their replies
CALLS_CHANNEL = "jobgate_calls"
#: ms a node waits for the holder's reply before answering as for a job that does not exist
CALL_MS = 5000

_pack = msgpack.Packer(use_bin_type=True).pack


def reach(conn, node: str, uids: list, by: str = "uid") -> tuple:
    """For the jobs named `uids` that node `node` does not hold: take the rows no node holds
    (ready, delayed, buried or finished) for `node` (`jobs.node` set, so no other node claims
    them until `node` gives them back at its next commit), and read which node holds the
    others. `by`: "uid" (`uids` are uids, through `jobs_uid`) or "id" (job ids, through the
    primary key). Returns (rows taken as dicts of the jobs columns, {uid or id: (name of the
    node holding it, its queue)}); one transaction. By id, any job is named (a client uid or
    none: the dashboard's and beanstalk's ids name every dialect's jobs).

    The take and the read are two statements, each with its own snapshot: a row its holder
    gave back between them (a bunqueue connection closing gives its active job back) is
    neither taken nor held in them, and is taken again, up to TAKE_TRIES times, so that a job
    that exists is not answered as one that does not."""
    if by == "id":
        which, args = _BY_ID, (list(uids),)
    else:   # a job created without a client uid (beanstalk) is named by its derived uid
        ids = [i for i in map(parse_derived_uid, uids) if i is not None]
        real = [u for u in uids if parse_derived_uid(u) is None]
        which, args = _WHICH, (real, ids)

    def go(cur):
        taken = []
        for _ in range(TAKE_TRIES):
            cur.execute(_TAKE % which, (node, *args))
            taken += [dict(zip(_COLS, r)) for r in cur.fetchall()]
            cur.execute(f"SELECT id, uid, node, queue, {_FREE} FROM jobs WHERE {which} AND "
                        "(node IS NULL OR node <> %s)", (*args, node))
            held, again = {}, False
            for id, uid, name, queue, free in cur.fetchall():
                if name is None:
                    again = again or free
                    continue
                held[id if by == "id" else (uid if uid is not None else derived_uid(id))] = (
                    name, queue)
            if not again:
                break
        return taken, held
    return _run(conn, go)


#: times `reach` takes again a row given back between its take and its read
TAKE_TRIES = 10
#: the rows named by client uid (first parameter) or, without one, by id (second)
_WHICH = "(uid = ANY(%s) OR (id = ANY(%s) AND uid IS NULL))"
#: the rows named by id, with a client uid or without
_BY_ID = "(id = ANY(%s))"
#: a row no node holds, in a state a node may take it in
_FREE = "(node IS NULL AND state IN ('ready', 'delayed', 'buried', 'completed'))"
#: take the rows `%s` (one of the above) selects that no node holds
_TAKE = ("UPDATE jobs SET node = %%s WHERE %s AND " + _FREE + " RETURNING " + ", ".join(_COLS))


def node_number(name: str) -> int | None:
    """The number of node `name` (`<host>:<pid>:<number>`), None for another string."""
    tail = name.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


class Calls:
    """One node's forwarded commands (module docstring); `node`: core.shared.SharedNode. The
    gateway sets `number`. `handlers`: dialect -> fn(body: bytes, principal, reply) where
    `reply(body: bytes | None, need_commit: bool)` is called once. Counters: `forwarded`
    (sent from here), `served` (run here for another node), `unanswered` (timed out or
    failed here)."""

    def __init__(self, node) -> None:
        self.node = node
        self.number = 0
        self.handlers: dict = {}
        self.pending: dict = {}   # request number -> (callback, deadline monotonic ms)
        # request numbers start at a random point: a late reply meant for an earlier
        # process with this node number never matches a request of this one
        self.req = secrets.randbits(40)
        self.batch = 0
        self.joiner = Joiner()
        self.forwarded = self.served = self.unanswered = 0

    # ------------------------------------------------------------------ asking
    def reach(self, uids: list, callback, by: str = "uid", allows=None) -> None:
        """Make the jobs named `uids` (which this node does not hold; job ids with `by` "id")
        reachable here: those no node holds are taken from the database into this engine, in
        their state (given back at the next commit: core.shared.SharedNode.adopt_rows);
        `callback({uid: node number})` then names the nodes holding the others, or gets an
        Exception (the database failed). `allows(queue) -> bool` (a principal's, None: every
        queue): a job another node holds in a queue it refuses is not named (the client may
        not learn that it exists)."""
        def got(found) -> None:
            if isinstance(found, Exception):
                callback(found)
                return
            rows, held = found
            if rows:
                self.node.adopt_rows(rows)
            out = {}
            for uid, (name, queue) in held.items():
                n = node_number(name)
                if n is not None and n != self.number and (allows is None or allows(queue)):
                    out[uid] = n
            callback(out)
        self.node.query_settled(reach, (self.node.node, uids, by), got)

    def send(self, to: int, dialect: str, body: bytes, principal, callback) -> None:
        """Run `body` (a command of `dialect`) on node `to`; `callback(reply bytes | None)`
        once (None: that node does not answer within CALL_MS, does not serve `dialect`, or
        the database failed). `principal`: a core.access.Principal or None (every queue)."""
        p = None if principal is None else (principal.name, principal.kind,
                                            list(principal.patterns))
        self.req += 1
        deadline = self.node.e.clock.monotonic_ms() + CALL_MS
        self.pending[self.req] = (callback, deadline)
        self.forwarded += 1
        self._send(to, ("q", self.req, dialect, p, body))

    def expire(self) -> None:
        """Answer None to the requests past their deadline (the gateway's timer)."""
        if not self.pending:
            return
        now = self.node.e.clock.monotonic_ms()
        late = [r for r, (_, d) in self.pending.items() if d <= now]
        for r in late:
            callback, _ = self.pending.pop(r)
            self.unanswered += 1
            callback(None)

    def _send(self, to: int, msg: tuple) -> None:
        self.batch += 1
        parts = cut(f"{to}:{self.number}:{self.batch}", _pack(msg))
        self.node.query(publish, (CALLS_CHANNEL, parts), self._sent(msg))

    def _sent(self, msg: tuple):
        def done(outcome) -> None:
            if isinstance(outcome, Exception) and msg[0] == "q":
                entry = self.pending.pop(msg[1], None)
                if entry is not None:
                    self.unanswered += 1
                    entry[0](None)
        return done

    # ---------------------------------------------------------------- answering
    def received(self, payload: str) -> None:
        """A `jobgate_calls` payload addressed to this node (`<number>:...`): run a request,
        or answer a waiting one with its reply."""
        got = self.joiner.add(payload)
        if got is None:
            return
        head, data = got
        try:
            frm = int(head.split(":")[1])
            kind, req, dialect, principal, body = msgpack.unpackb(data, raw=False,
                                                                    use_list=False)
        except (ValueError, TypeError, IndexError, msgpack.UnpackException):
            return
        if kind == "r":
            entry = self.pending.pop(req, None)
            if entry is not None:
                entry[0](body)
            return
        fn = self.handlers.get(dialect)
        if fn is None:
            self._send(frm, ("r", req, None, None, None))
            return
        self.served += 1
        if principal is not None:
            from .access import Principal
            principal = Principal(principal[0], principal[1], principal[2])

        def reply(out, need_commit: bool) -> None:
            msg = ("r", req, None, None, out)
            if need_commit:
                self.node.after_commit(lambda: self._send(frm, msg))
            else:
                self._send(frm, msg)
        fn(body, principal, reply)
