"""The port's shared-mode operations (issue 19, docs/scaling.md), a base of core.api.Port as
the other port_*.py: whether this engine is a node in shared mode, and making it one."""
from __future__ import annotations

#: ms a probe (a reserve that must not wait, in shared mode) waits for its claim round at
#: most: a claim thread stuck on a dead connection does not hold the client longer
PROBE_MS = 2000


def open_shared_store(url: str, idle_in_transaction_ms: int = 10_000):
    """The SQL store of a node in shared mode (core.shared_store.SharedStore) for PostgreSQL
    `url`: the caller runs the migrations inside `store.serialized()`, then `store.join()`.
    `idle_in_transaction_ms`: PostgreSQL ends a session of the node idle inside a
    transaction for that long (0: not set). Raises ValueError for another database,
    sqlalchemy errors when it cannot connect."""
    from .shared_store import SharedStore
    return SharedStore(url, idle_in_transaction_ms)


def fire_due(conn, now_ms: int, ids) -> int:
    """The shared-mode leader's cron round (core.shared_cron.fire_due): fire the stored
    schedules due by `now_ms` with job ids from `ids`; returns how many runs fired."""
    from .shared_cron import fire_due as fire
    return fire(conn, now_ms, ids)


def take_slots(conn, node: str, wants: dict) -> dict:
    """Take concurrency slots for `node` (core.shared_slots.take_slots): `wants` queue ->
    (limit, wanted, used); returns queue -> slots held. Errors: the driver's."""
    from .shared_slots import take_slots as take
    return take(conn, node, wants)


def keep_slots(conn, node: str, exact: dict, floor: dict, known) -> tuple:
    """Write `node`'s concurrency slots (core.shared_slots.keep_slots: `exact` give-backs,
    `floor` refreshes, `known` the queues held on a full refresh); returns (how many queues
    were notified of slots given back, the queues whose row had lapsed). Errors: the
    driver's."""
    from .shared_slots import keep_slots as keep
    return keep(conn, node, exact, floor, known)


def take_tokens(conn, wants: dict) -> dict:
    """Take rate-limit tokens (core.shared_tokens.take_tokens): `wants` queue -> (rate_max,
    window_ms, wanted); returns queue -> (taken, ms until the next token or None). Errors:
    the driver's."""
    from .shared_tokens import take_tokens as take
    return take(conn, wants)


def give_tokens(conn, back: dict) -> None:
    """Give rate-limit tokens back (core.shared_tokens.give_tokens): `back` queue ->
    (rate_max, window_ms, tokens). Errors: the driver's."""
    from .shared_tokens import give_tokens as give
    give(conn, back)


class SharedOps:
    """Shared-mode operations of core.api.Port (which provides `_engine`)."""

    @property
    def shared(self) -> bool:
        """True on a node in shared mode (several nodes on one PostgreSQL: docs/scaling.md):
        jobs nobody here holds are in the database, so a reserve that must not wait answers
        after one claim round (`reserve` with `timeout_ms` 0 returns WAITING)."""
        return self._engine.shared is not None

    def share(self, node: str):
        """Make this engine a node in shared mode named `node` (before serving; core/shared.py).
        Returns the core.shared.SharedNode for the gateway's claims (gateway/shared.py)."""
        from .shared import SharedNode
        e = self._engine
        e.shared = SharedNode(e, node)
        e.cron.firing = False   # the leader fires the stored schedules (core/shared_cron.py)
        return e.shared

    def wait_result_uid(self, uid: str, timeout_ms: int, callback):
        """Shared mode: wait for the result of the job named `uid` that is not on this node
        (workq `result`, bunqueue WaitJob; core/shared_results.py). Returns a handle for
        cancel_result_wait; `callback` later gets the finished JobView, None (no such job),
        TIMED_OUT (after `timeout_ms` ms; <= 0: after one read) or an Exception (the database
        failed: answer the dialect's server error). Raises AttributeError in single-node
        mode (callers check `shared`)."""
        return self._engine.shared.results.wait(uid, timeout_ms, callback)

    def lookup_remote(self, uid: str, callback) -> None:
        """Shared mode: `callback` later gets a JobView of the job named `uid` as its row is
        in the database (a job this node does not hold), None when there is none, or an
        Exception (the database failed). Raises AttributeError in single-node mode."""
        from .shared_reads import job_uid
        e = self._engine
        e.shared.query(job_uid, (uid, e.clock.wall_ms()), callback)

    def remove_remote(self, uid: str, callback, queue: str | None = None) -> None:
        """Shared mode, workq `delete` of a job this node does not hold: delete its row
        whatever its state (only in `queue` when given); `callback` later gets True
        (deleted), False (no such job) or an Exception (the database failed). Raises
        AttributeError in single-node mode."""
        from .shared_changes import delete_uid
        e = self._engine
        e.shared.query(delete_uid, (uid, queue, "workq", e.clock.wall_ms(), self._history()),
                       callback)

    def reach_jobs(self, uids: list, callback, allows=None) -> None:
        """Shared mode, before a command about jobs this node does not hold: the jobs of
        `uids` that no node holds are brought into this engine in their state (given back at
        the next commit), so the command then runs here as on a single server;
        `callback({uid: node number})` later names the nodes holding the others (forward_to;
        only those of queues `allows(queue)` accepts, when given), or gets an Exception (the
        database failed). core/shared_calls.py. Raises AttributeError in single-node mode."""
        self._engine.shared.calls.reach(uids, callback, "uid", allows)

    def wait_for(self, waiter: str, deps: list, holders: dict | None = None) -> None:
        """Shared mode, after job `waiter` (uid) was put waiting for the jobs `deps` (uids,
        each in this engine, in the database or held by another node; a bunqueue PUSH with
        `dependsOn`): each dependency learns that `waiter` waits for it (its ``waiters``),
        so that its completion on any node releases `waiter`; one that completed meanwhile
        releases it at once. `holders`: {uid: (node number, job id)} of the dependencies
        other nodes held when the push located them (the note goes there). Delivered after this node's
        commit, retried until it succeeds (core/shared_flows.py, "wait" notes). Raises
        AttributeError in single-node mode."""
        self._engine.shared.flows.wait_for(waiter, deps, holders)

    def reach_ids(self, ids: list, callback, allows=None) -> None:
        """reach_jobs for jobs named by id (beanstalk `reserve-job`): `callback({id: node
        number})`. Raises AttributeError in single-node mode."""
        self._engine.shared.calls.reach(ids, callback, "id", allows)

    def forward_to(self, node: int, dialect: str, body: bytes, callback,
                   principal=None) -> None:
        """Shared mode: run `body`, a command of `dialect` about jobs node `node` holds
        (reach_jobs), on that node: a lock presented on another node than the one that gave
        it (core/shared_calls.py). `callback(reply)` later, once: the reply bytes that node's
        dialect made, or None (no answer within shared_calls.CALL_MS, or the database failed:
        answer as for a job this node does not have). `principal` (core.access.Principal,
        None: every queue): whose command it is; the holding node checks it. Raises
        AttributeError in single-node mode."""
        self._engine.shared.calls.send(node, dialect, body, principal, callback)

    def serve_forwarded(self, dialect: str, fn) -> None:
        """Shared mode: run the commands of `dialect` other nodes forward here with
        `fn(body: bytes, principal, reply)`; `principal` is a core.access.Principal or None,
        `reply(body: bytes | None, need_commit: bool)` must be called once (need_commit: the
        reply is sent once this node's changes so far are committed). Nothing in
        single-node mode."""
        sh = self._engine.shared
        if sh is not None:
            sh.calls.handlers[dialect] = fn

    def count_up_global(self, name: str, n: int, floor: int, callback) -> None:
        """Shared mode: take `n` values of the counter `name` shared by every node, after
        moving it up to `floor` (core/shared_counters.py): `callback(last)` later, with the
        last value taken (this caller's values are last - n + 1 .. last, never handed out
        to another node), or the Exception the database raised. Raises AttributeError in
        single-node mode (callers check `shared`)."""
        self._engine.shared.counters.take(name, n, floor, callback)

    def counter_global(self, name: str, floor: int, callback) -> None:
        """Shared mode: `callback(value)` later, the value of the counter `name` every node
        shares (count_up_global), at least `floor`, read without writing (after this node's
        takes so far); or the Exception the database raised. Raises AttributeError in
        single-node mode."""
        self._engine.shared.counters.read(name, floor, callback)

    def share_figures(self, name: str, fn) -> None:
        """Shared mode: make `fn() -> {field: int}` this node's figures `name` (a dialect's
        per-process counters, such as bunqueue's Metrics totals), which the node writes to
        the database every second for the other nodes to read (core/shared_figures.py).
        Several providers of one name add up (a field `started`, a wall ms, takes the
        earliest). Nothing in single-node mode. Raises ValueError for a name with ':' or
        longer than 30 characters."""
        sh = self._engine.shared
        if sh is not None:
            sh.figures.provide(name, fn)

    def own_figures(self, name: str) -> dict | None:
        """Shared mode: this node's figures `name` (share_figures), live, its providers' added
        up; None in single-node mode or when nothing provides them."""
        sh = self._engine.shared
        return None if sh is None else sh.figures.own(name)

    def figures_of_other_nodes(self, name: str, callback) -> None:
        """`callback(list)`: the figures `name` (share_figures) of every other live node, one
        dict {field: int, ..., "at": wall ms when that node wrote them} each, at most a second
        old (core/shared_figures.py); a node that stopped or has not written for 10 s is left
        out. At once with [] in single-node mode; on a database error `callback` gets the
        Exception."""
        e = self._engine
        if e.shared is None:
            callback([])
            return
        e.shared.figures.others(name, e.clock.wall_ms(), callback)

    def uids_taken_global(self, uids: list, callback) -> None:
        """`callback(set)`: which of `uids` a new job may not take (uid_taken): on a single
        server at once; in shared mode also those a row of the database has, whichever node
        put it (a client's custom ids are unique across nodes; two nodes creating one new id
        at the same moment are not caught: docs/scaling.md). On a database error `callback`
        gets the Exception."""
        e = self._engine
        local = {u for u in uids if e.uid_taken(u)}
        rest = [u for u in uids if u not in local]
        if e.shared is None or not rest:
            callback(local)
            return
        from .shared_reads import uids_present

        def got(found):
            callback(found if isinstance(found, Exception) else local | found)
        e.shared.query_settled(uids_present, (rest,), got)

    def lookup_remote_many(self, uids: list, callback) -> None:
        """Shared mode: `callback({uid: JobView})` later, for those of the jobs named `uids`
        that have rows in the database (as their holders last committed them: the children
        of a flow parent, wherever they are), or an Exception (the database failed). Raises
        AttributeError in single-node mode."""
        from .shared_reads import jobs_uids
        e = self._engine
        e.shared.query(jobs_uids, (list(uids), e.clock.wall_ms()), callback)

    def dedup_global(self, pairs: list, callback) -> None:
        """`callback(dict)`: {(queue, key): uid} for those of `pairs` ((queue, dedup key): a
        bunqueue uniqueKey) whose key an unfinished job holds, here (Port.dedup) or, in shared
        mode, in a row of the database whichever node put it (migration 0011; two nodes taking
        one new key at the same moment are not caught: docs/scaling.md). On a database error
        `callback` gets the Exception."""
        e = self._engine
        local = {}
        for q, k in pairs:
            j = e.dedup_job(q, k)
            if j is not None:
                local[(q, k)] = e.uid_of(j)
        rest = [p for p in pairs if p not in local]
        if e.shared is None or not rest:
            callback(local)
            return
        from .journal import dedup_text
        from .shared_reads import keys_present
        texts = {(q, dedup_text(k)): (q, k) for q, k in rest}

        def got(found):
            if isinstance(found, Exception):
                callback(found)
                return
            local.update((texts[p], uid) for p, uid in found.items())
            callback(local)
        e.shared.query_settled(keys_present, (list(texts),), got)
