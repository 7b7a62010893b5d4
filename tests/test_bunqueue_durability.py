"""bunqueue durability: what a client was told (`ok: true`) survives kill -9, on SQLite and
PostgreSQL (the `db_url` fixture runs each test on both): pushed jobs with their options,
results, progress, logs, attempts and the DLQ, dependencies and dedup keys (docs/bunqueue.md,
"Durability"). 10,000 pushes through the real client are in test_bunqueue_real_client.py.

Each test runs a real `jobgate serve` subprocess, kills it with SIGKILL right after the last
acknowledged reply, starts a second one on the same database and inspects it over bunqueue.
"""
from __future__ import annotations


from .bunqueue_support import BQ, qname


def test_everything_acknowledged_survives_kill9(db_url, servers):
    s = servers(db_url, bunqueue=True)
    c = BQ(s.bunqueue_port, timeout=10)
    q = qname("dur")
    done = c.push(q, {"k": [1, 2]}, name="email", priority=7, tags=["t"], jobId="custom-1",
                  ttl=3_600_000, timeout=20_000)
    text = c.push(q, "plain text", maxAttempts=2, backoff=0, priority=-1)
    dead = c.push(q, b"\x00\x01", maxAttempts=1)
    delayed = c.push(q, 1, delay=3_600_000)
    keyed = c.push(q, 2, uniqueKey="u1")
    child = c.push(q, 3, dependsOn=[done])
    # done: pulled, progress, log, acked with a result
    assert c.pull(q)["job"]["id"] == done                      # highest priority first
    c.ok("Progress", id=done, progress=40, message="almost")
    c.ok("AddLog", id=done, message="hello", level="warn")
    c.ok("ACK", id=done, result={"r": "ok"})
    # dead: failed for good (DLQ); keyed: completed; text: one failed attempt, waiting again
    assert c.pull(q)["job"]["id"] == dead
    c.ok("FAIL", id=dead, error="fatal")
    assert c.pull(q)["job"]["id"] == keyed
    c.ok("ACK", id=keyed)
    assert c.pull(q)["job"]["id"] == child               # ready once `done` completed
    c.ok("ACK", id=child)
    assert c.pull(q)["job"]["id"] == text
    c.ok("FAIL", id=text, error="first")
    counts_before = c.counts(q)
    s.kill()

    s2 = servers(db_url, bunqueue=True)
    c = BQ(s2.bunqueue_port, timeout=10)
    j = c.call("GetJob", id=done)["job"]
    assert (j["state"], j["name"], j["data"], j["priority"], j["tags"], j["returnvalue"],
            j["progress"], j["progressMessage"], j["customId"], j["ttl"], j["timeout"]) == (
        "completed", "email", {"k": [1, 2]}, 7, ["t"], {"r": "ok"}, 100, "almost", "custom-1",
        3_600_000, 20_000)
    assert c.call("GetResult", id=done)["result"] == {"r": "ok"}
    logs = c.call("GetLogs", id=done)["data"]["logs"]
    assert [(x["message"], x["level"]) for x in logs] == [("hello", "warn")]
    assert c.state(dead) == "failed"
    d = c.call("GetJob", id=dead)["job"]
    assert (d["data"], d["attempts"], d["failedReason"]) == (b"\x00\x01", 1, "fatal")
    assert [e["job"]["id"] for e in c.call("Dlq", queue=q)["entries"]] == [dead]
    t = c.call("GetJob", id=text)["job"]
    assert (t["state"], t["data"], t["attempts"], t["failedReason"]) == (
        "waiting", "plain text", 1, "first")
    assert c.state(delayed) == "delayed"
    assert c.state(child) == "completed"
    assert c.push(q, 9, uniqueKey="u1") != keyed        # keyed completed: its key is free
    assert c.push(q, 9, jobId="custom-1") == "custom-1"  # so is the custom id
    after = c.counts(q)
    assert after["failed"] == counts_before["failed"] == 1
    assert after["completed"] == counts_before["completed"] == 3
    assert after["active"] == 0


def test_unmet_dependency_still_waits_after_restart(db_url, servers):
    s = servers(db_url, bunqueue=True)
    c = BQ(s.bunqueue_port, timeout=10)
    q = qname("dep")
    parent = c.push(q, 1)
    child = c.push(q, 2, dependsOn=[parent])
    assert c.state(child) == "waiting-children"
    s.kill()
    s2 = servers(db_url, bunqueue=True)
    c = BQ(s2.bunqueue_port, timeout=10)
    assert c.state(child) == "waiting-children"
    assert c.pull(q)["job"]["id"] == parent
    c.ok("ACK", id=parent)
    assert c.state(child) == "waiting"
    assert c.pull(q)["job"]["id"] == child
