"""Review 3 of the shared-mode `reach` / take_over work: failing tests for findings.
Real node processes (tests/shared_support.py). Needs JOBGATE_TEST_PG_URL."""
from __future__ import annotations

import time

from core.model import derived_uid

from .shared_support import bean
from .workq_support import WorkqRaw


def test_result_wait_of_a_uidless_job_survives_its_spill(nodes):
    """A workq `result` waiting (on the node holding it) for a beanstalk job, named by its
    derived uid: when the job leaves the node (released, spilled), take_over waits for it
    through the database by that uid, which no row has (beanstalk rows have uid NULL), so
    the wait answers -NOT-FOUND at once. A single server (and main before b88e575: held
    back) answers -TIMEOUT at the wait's deadline."""
    (a,) = nodes(1)
    c = bean(a, "dq")
    jid = c.put(b"x")
    job = c.reserve(timeout=5)
    assert job.id == jid
    uid = derived_uid(jid)
    w = WorkqRaw(a.workq_port, timeout=10)
    w.send(b"result %s 1500\r\n" % uid.encode())   # waits on a: the job is here, reserved
    time.sleep(0.3)   # let the wait register before the release (order, not timing)
    t0 = time.monotonic()
    c.release(job)
    assert w.reply() == b"-TIMEOUT\r\n"
    assert time.monotonic() - t0 > 1.0
