"""The upkeep statements of shared mode (issue 19, docs/scaling.md), a base of
core.shared_store.SharedStore (which provides `node`): the leader's promotions of due delayed
jobs, evictions of expired ones and rescues of dead nodes' expired reservations, and each
node's sweep of its own stranded claims. Each runs on the caller's DB-API connection (the
node's claim thread), commits, and NOTIFYs the queues that got ready jobs. Times: wall ms.
Errors: the driver's (psycopg.Error).
"""
from __future__ import annotations

from .shared_reads import DONE_CHANNEL, HISTORY_ROWS, READY_CHANNEL, UID_SQL

#: advisory lock class (first int4 key) of a node's liveness lock; the second key is the node's
#: number. "jgnd" in ASCII.
NODE_LOCK_CLASS = int.from_bytes(b"jgnd", "big") & 0x7FFFFFFF
#: rescue rounds (one a second) in a row that a node's liveness lock must be found free before
#: the rows it held without a reservation are given back (release_gone): a listener that is
#: reconnecting (RECONNECT_S) is not taken for gone
GONE_ROUNDS = 5


class LeaderDuties:
    """promote / evict / rescue / release_gone / sweep of SharedStore (see the module
    docstring)."""

    def promote(self, conn, now_ms: int, limit: int = 1000) -> int:
        """Delayed jobs due by `now_ms` become ready (at most `limit`), their queues
        notified. Returns how many."""
        cur = conn.cursor()
        cur.execute(
            "WITH d AS (SELECT id FROM jobs WHERE state = 'delayed' AND ready_at_ms <= %s "
            "ORDER BY ready_at_ms LIMIT %s FOR UPDATE SKIP LOCKED), "
            "u AS (UPDATE jobs j SET state = 'ready', ready_at_ms = NULL FROM d "
            "WHERE j.id = d.id RETURNING j.queue) "
            f"SELECT COALESCE(sum(n), 0)::bigint, count(pg_notify('{READY_CHANNEL}', q)) "
            "FROM (SELECT queue AS q, count(*) AS n FROM u GROUP BY queue) s", (now_ms, limit))
        n = cur.fetchone()[0]
        cur.close()
        conn.commit()
        return n

    def sweep(self, conn, now_ms: int, held: list) -> int:
        """Return to ready this node's reserved rows past their deadline that it does not
        have in memory (`held`: the ids it has): a claim whose commit went through but whose
        answer was lost. Returns how many."""
        cur = conn.cursor()
        cur.execute(
            "WITH u AS (UPDATE jobs SET state = 'ready', node = NULL, lease_token = NULL, "
            "lease_owner = NULL, lease_until_ms = NULL WHERE state = 'reserved' AND node = %s "
            "AND lease_until_ms < %s AND NOT (id = ANY(%s)) RETURNING queue) "
            f"SELECT COALESCE(sum(c), 0)::bigint, count(pg_notify('{READY_CHANNEL}', q)) "
            "FROM (SELECT queue AS q, count(*) AS c FROM u GROUP BY queue) s",
            (self.node, now_ms, held))
        n = cur.fetchone()[0]
        cur.close()
        conn.commit()
        return n

    def evict(self, conn, now_ms: int, limit: int = 1000) -> int:
        """Delete the jobs whose TTL or result retention ended by `now_ms` (expires_at_ms)
        and that nobody holds (a held job's own node evicts it after its lease), at most
        `limit`, with a history row each (dialect `jobgate`, event `ttl-evict`, as a single
        server writes them) and NOTIFY jobgate_done with their uids. Returns how many."""
        cur = conn.cursor()
        cur.execute(
            "WITH u AS (DELETE FROM jobs WHERE id IN (SELECT id FROM jobs "
            "WHERE expires_at_ms <= %s AND state <> 'reserved' LIMIT %s "
            "FOR UPDATE SKIP LOCKED) RETURNING id, queue, reserves, uid, priority, payload), "
            f"e AS ({HISTORY_ROWS}) "
            f"SELECT count(*), count(pg_notify('{DONE_CHANNEL}', {UID_SQL})) FROM u",
            (now_ms, limit, "jobgate", "ttl-evict", now_ms))
        n = cur.fetchone()[0]
        cur.close()
        conn.commit()
        return n

    def rescue(self, conn, now_ms: int) -> int:
        """Return to ready the reservations past their deadline (`now_ms`) held by nodes that
        are gone (their liveness lock is free), each exactly once (a conditional UPDATE).
        Returns how many jobs."""
        cur = conn.cursor()
        # reserved rows a single-node server stored (no node: their holder is gone)
        cur.execute(
            "WITH u AS (UPDATE jobs SET state = 'ready', lease_token = NULL, lease_owner = NULL, "
            "lease_until_ms = NULL WHERE state = 'reserved' AND node IS NULL AND "
            "(lease_until_ms IS NULL OR lease_until_ms < %s) RETURNING queue) "
            f"SELECT COALESCE(sum(c), 0)::bigint, count(pg_notify('{READY_CHANNEL}', q)) "
            "FROM (SELECT queue AS q, count(*) AS c FROM u GROUP BY queue) s", (now_ms,))
        n = cur.fetchone()[0]
        conn.commit()
        cur.execute("SELECT DISTINCT node FROM jobs WHERE state = 'reserved' AND node <> %s "
                    "AND lease_until_ms < %s", (self.node, now_ms))
        nodes = [r[0] for r in cur.fetchall()]
        conn.commit()
        for node in nodes:
            key = _node_number(node)
            if key is not None:
                cur.execute("SELECT pg_try_advisory_lock(%s, %s)", (NODE_LOCK_CLASS, key))
                if not cur.fetchone()[0]:
                    conn.commit()
                    continue       # alive: its own TTR timers return its jobs
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", (NODE_LOCK_CLASS, key))
            cur.execute(
                "WITH u AS (UPDATE jobs SET state = 'ready', node = NULL, "
                "timeouts = timeouts + 1, lease_token = NULL, lease_owner = NULL, "
                "lease_until_ms = NULL WHERE state = 'reserved' AND node = %s "
                "AND lease_until_ms < %s RETURNING queue) "
                f"SELECT COALESCE(sum(c), 0)::bigint, count(pg_notify('{READY_CHANNEL}', q)) "
                "FROM (SELECT queue AS q, count(*) AS c FROM u GROUP BY queue) s",
                (node, now_ms))
            n += cur.fetchone()[0]
            conn.commit()
        cur.close()
        return n + self.release_gone(conn)

    def release_gone(self, conn) -> int:
        """Give back the rows that a gone node held without a reservation (jobs taken for a
        command or kept for a result waiter, core/shared_calls.py `reach`, core/shared.py):
        `node` cleared, their queues notified, so that they are claimable again. A node is
        gone when its commit mark row (`commit_seq:<number>`, deleted when a node stops
        cleanly) stays while its liveness lock was free at GONE_ROUNDS rescue rounds in a
        row; each gone node is released once per leader (a scan of the table: rare), and its
        figures are deleted (core/shared_figures.py). Returns how many rows."""
        seen = self.gone_rounds
        done = self.released
        cur = conn.cursor()
        cur.execute("SELECT key FROM jobgate_meta WHERE key LIKE %s", ("commit_seq:%",))
        numbers = [int(k.split(":", 1)[1]) for (k,) in cur.fetchall()
                   if k.split(":", 1)[1].isdigit()]
        conn.commit()
        n = 0
        for num in numbers:
            if num == self.number:
                continue
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", (NODE_LOCK_CLASS, num))
            if cur.fetchone()[0]:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", (NODE_LOCK_CLASS, num))
                seen[num] = seen.get(num, 0) + 1
            else:   # alive (again): taken for gone once more only after GONE_ROUNDS free
                seen.pop(num, None)
                done.discard(num)
            conn.commit()
            if num in done or seen.get(num, 0) < GONE_ROUNDS:
                continue
            cur.execute(
                "WITH u AS (UPDATE jobs SET node = NULL WHERE node LIKE %s "
                "AND state <> 'reserved' RETURNING queue, state) "
                f"SELECT count(*), count(pg_notify('{READY_CHANNEL}', queue)) "
                "FILTER (WHERE state = 'ready') FROM u", (f"%:{num}",))
            n += cur.fetchone()[0]
            # its figures (core/shared_figures.py): readers leave them out already (stale)
            cur.execute("DELETE FROM jobgate_meta WHERE key LIKE %s", (f"fig:{num}:%",))
            conn.commit()
            done.add(num)
            seen.pop(num, None)
        cur.close()
        return n


def _node_number(node: str):
    """The liveness key of a node name `<host>:<pid>:<number>`, or None."""
    try:
        return int(node.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None
