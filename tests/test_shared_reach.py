"""core/shared_calls.reach, the statement behind every command about a job this node does not
hold (workq complete / fail / delete, bunqueue's forwarded commands, beanstalk reserve-job):
a job that exists is either taken here or named with the node holding it, even while that
node gives it back at the same moment. Real PostgreSQL, the function called on a psycopg
connection as the claim thread calls it, another connection changing the row meanwhile.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import random
import threading
import time

import psycopg

from core.shared_calls import reach

from .shared_support import bean, rows

HOLDER = "elsewhere:1:987654"
ME = "here:1:987655"


def test_a_job_given_back_meanwhile_is_taken_or_named(nodes):
    """Another connection flips the row between held by node HOLDER and held by nobody (a
    node taking it and giving it back, as a bunqueue connection that closes gives its
    active job back), as fast as it can; each `reach` meanwhile takes the job or names
    HOLDER (the flips at random moments: flips in step with reach's retakes can miss all
    of them, which a holder giving a job back once never does). Before, the take (an UPDATE) and the read of the holders (a SELECT) were two
    statements with a snapshot each: a give-back between them left the job neither taken
    nor named, and the command answered as for a job that does not exist (workq `delete` of
    a bunqueue job: +OK, the row kept)."""
    a, = nodes(1)
    jid = bean(a, "flip").put(b"x", delay=3600)        # delayed: no node claims it
    url = nodes.url.replace("postgresql+psycopg", "postgresql")
    stop = threading.Event()
    rnd = random.Random(19)

    def flip() -> None:
        with psycopg.connect(url, autocommit=True) as c:
            while not stop.is_set():
                c.execute("UPDATE jobs SET node = %s WHERE id = %s AND node IS NULL",
                          (HOLDER, jid))
                time.sleep(rnd.random() * 0.0005)   # out of step with reach's retakes
                c.execute("UPDATE jobs SET node = NULL WHERE id = %s AND node = %s",
                          (jid, HOLDER))
                time.sleep(rnd.random() * 0.0005)

    t = threading.Thread(target=flip)
    t.start()
    lost = taken = named = 0
    try:
        with psycopg.connect(url) as conn:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and lost == 0:
                got, held = reach(conn, ME, [jid], "id")
                if got:
                    taken += 1
                    conn.execute("UPDATE jobs SET node = NULL WHERE id = %s", (jid,))
                    conn.commit()
                elif held.get(jid, (None,))[0] == HOLDER:
                    named += 1
                else:
                    lost += 1
    finally:
        stop.set()
        t.join()
    assert lost == 0, (taken, named, lost)
    assert taken and named, (taken, named)   # both sides of the flip were met
    assert rows(nodes.url, "SELECT node FROM jobs WHERE id = %s", (jid,))[0][0] in (None,
                                                                                  HOLDER)
