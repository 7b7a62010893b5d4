"""Start-up (issue 14): the listening socket comes first, then imports and recovery.

Real `jobgate serve` subprocesses on 127.0.0.1, real PostgreSQL and SQLite databases.
"Start-up is not finished yet" is made a state the test controls, not a race: a second server
on a PostgreSQL database that a first one holds retries the database lock for up to 5 s
(core.storage.Store.lock), already listening; the test then stops the first one.
"""
from __future__ import annotations

import json
import subprocess
import sys

from .server_support import HOST, serve_argv
from .support import ROOT, Raw, free_port


def test_client_connecting_during_startup_is_answered_after_recovery(procs, pg_url):
    url = pg_url
    first_port, second_port = free_port(), free_port()
    first = procs(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:{first_port}"))
    first.wait_tcp(first_port)
    r1 = Raw(first_port, timeout=10)
    assert r1.cmd(b"put 0 0 60 3\r\nold\r\n") == b"INSERTED 1\r\n"
    r1.close()
    # the second server listens at once, then waits for the first one's database lock
    second = procs(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:{second_port}"))
    second.wait_tcp(second_port)
    early = Raw(second_port, timeout=20)
    early.send(b"put 0 0 60 3\r\nnew\r\npeek 1\r\n")   # waits: nothing refused, nothing lost
    rc, _, err = first.stop()
    assert rc == 0, err
    assert early.reply() == b"INSERTED 2\r\n"       # ids continue after the recovered job
    assert early.reply() == b"FOUND 1 3\r\nold\r\n"
    early.close()
    rc, _, err = second.stop()
    assert rc == 0, err


def test_stop_signal_during_startup_exits_cleanly(procs, pg_url):
    """SIGTERM while the server still starts (here: waiting for the database) is kept and
    honoured as soon as it runs: exit status 0, not death by the signal."""
    url = pg_url
    a, b = free_port(), free_port()
    first = procs(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:{a}"))
    first.wait_tcp(a)
    Raw(a, timeout=10).cmd(b"list-tubes\r\n")      # the first one holds the lock now
    second = procs(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:{b}"))
    second.wait_tcp(b)
    second.proc.send_signal(15)
    rc, _, err = first.stop()
    assert rc == 0, err
    assert second.proc.wait(20) == 0    # it stopped by itself, on the signal sent earlier


def _modules_after_start(tmp_path, durability: str) -> set:
    """The modules a server process has loaded once it serves (run in a child process)."""
    code = f"""
import json, sys, threading
from gateway.config import Config, Listener
from gateway.server import Runtime
cfg = Config()
cfg.listeners = [Listener("beanstalk", "127.0.0.1", 0)]
cfg.durability = {durability!r}
cfg.database_url = "sqlite:///{tmp_path}/jobgate.db"
rt = Runtime(cfg)
import anyio
def ready(_):
    print(json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
    sys.stdout.flush()
    rt.stop()
anyio.run(rt.run, ready, False)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         timeout=60, check=True)
    return set(json.loads(out.stdout.decode().splitlines()[0]))


def test_memory_server_loads_no_sql_stack(tmp_path):
    mods = _modules_after_start(tmp_path, "memory")
    assert "sqlalchemy" not in mods and "alembic" not in mods and "pyspark" not in mods


def test_current_schema_is_not_migrated_again(tmp_path):
    """The first start migrates (Alembic); later starts read the version and go on."""
    assert "alembic" in _modules_after_start(tmp_path, "commit")
    mods = _modules_after_start(tmp_path, "commit")
    assert "sqlalchemy" in mods and "alembic" not in mods
