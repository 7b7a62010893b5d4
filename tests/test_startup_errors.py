"""Start-up failures an operator can act on (issue 15, item 4): each prints ONE line on stderr
naming the setting, its value and the cause, and exits with its class's status
(gateway/startup.py; the table in docs/operations.md, "Exit statuses and start-up failures").

Real subprocesses (`jobgate serve`, `jobgate-beanstalkd`), real sockets on 127.0.0.1, real
SQLite files and a real PostgreSQL server. Tests run as root, who ignores file permissions:
a read-only path is made real for root by dropping to `nobody` (`jobgate-beanstalkd -u`) or by
a read-only tmpfs mounted in a private mount namespace (`unshare -m`); as another user a
chmod 0555 directory does it.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import tempfile
import time

import greenstalk
import pytest

from gateway import startup

from .server_support import HOST, run_cli, serve_argv
from .support import ROOT, free_port, pg_admin_url
from .test_server_cli import beanstalkd_argv

ROOT_USER = os.geteuid() == 0
NOBODY = pwd.getpwnam("nobody")


def one_line(r) -> str:
    """The single line a failed start printed on stderr (fails when there is more)."""
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1, r.stderr.decode()
    return lines[0]


@pytest.fixture
def open_tmp():
    """A fresh directory under /tmp that `nobody` can traverse (pytest's tmp_path is 0700)."""
    d = tempfile.mkdtemp(prefix="jg-start-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write_config(d: str, text: str) -> str:
    path = os.path.join(d, "jobgate.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


# ------------------------------------------------------------------------- cannot listen

def test_port_in_use_is_one_line_and_status_3(open_tmp):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = write_config(open_tmp, f"listeners:\n  beanstalk: {{host: {HOST}, port: {port}}}\n"
                                     "durability: memory\n")
        cases = [
            (serve_argv("--durability", "memory", "--listen", f"workq={HOST}:0",
                        "--listen", f"beanstalk={HOST}:{port}"),
             f"jobgate: --listen beanstalk {HOST}:{port}: cannot listen: address already in use"),
            (serve_argv("--config", cfg),
             f"jobgate: listeners.beanstalk {HOST}:{port}: cannot listen: "
             "address already in use"),
            (beanstalkd_argv("-l", HOST, "-p", str(port)),
             f"jobgate-beanstalkd: -l {HOST} -p {port}: cannot listen: address already in use"),
        ]
        for argv, line in cases:
            r = run_cli(argv)
            assert (r.returncode, one_line(r)) == (startup.EXIT_LISTEN, line), argv
    assert startup.EXIT_LISTEN == 3


# ------------------------------------------------------------------------- database

def test_unreachable_postgresql_is_one_line_and_status_4(open_tmp):
    port = free_port()    # nothing listens there: the connection is refused
    url = f"postgresql+psycopg://jobgate:s3cret@127.0.0.1:{port}/jobs"
    shown = f"postgresql+psycopg://jobgate:***@127.0.0.1:{port}/jobs"
    r = run_cli(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:0"))
    assert r.returncode == startup.EXIT_DATABASE == 4
    assert one_line(r) == f"jobgate: --database {shown}: cannot connect: connection refused"
    assert b"s3cret" not in r.stderr
    cfg = write_config(open_tmp, f"database:\n  url: {url}\nlog: {{level: warning}}\n")
    r = run_cli(serve_argv("--config", cfg, "--listen", f"beanstalk={HOST}:0"))
    assert r.returncode == 4
    assert one_line(r) == f"jobgate: database.url {shown}: cannot connect: connection refused"


def test_missing_postgresql_database_is_one_line_and_status_4():
    admin = pg_admin_url()
    if not admin:
        pytest.skip("PostgreSQL tests need JOBGATE_TEST_PG_URL; .ci/run sets it")
    import sqlalchemy as sa
    url = sa.make_url(admin).set(database="jobgate_no_such_db").render_as_string(False)
    r = run_cli(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:0"))
    assert r.returncode == 4
    shown = sa.make_url(url).render_as_string(hide_password=True)
    assert one_line(r) == (f"jobgate: --database {shown}: cannot connect: "
                           'database "jobgate_no_such_db" does not exist')


def test_a_file_that_is_not_a_database_is_status_4(open_tmp):
    with open(os.path.join(open_tmp, "jobgate.db"), "wb") as f:
        f.write(b"this is not SQLite\n" * 100)
    r = run_cli(beanstalkd_argv("-l", HOST, "-p", "0", "-b", open_tmp))
    assert r.returncode == 4
    assert one_line(r) == (f"jobgate-beanstalkd: -b {open_tmp}: cannot use the database: "
                           "file is not a database")


def test_unsupported_database_url_is_a_config_error(open_tmp):
    url = "mysql://app:pw@127.0.0.1/jobs"
    cause = ("unsupported database 'mysql'; jobgate stores jobs in SQLite (sqlite:///PATH) or "
             "PostgreSQL (postgresql+psycopg://USER@HOST/DB)")
    r = run_cli(serve_argv("--database", url, "--listen", f"beanstalk={HOST}:0"))
    assert r.returncode == startup.EXIT_CONFIG == 2
    assert one_line(r) == f"jobgate: --database mysql://app:***@127.0.0.1/jobs: {cause}"
    cfg = write_config(open_tmp, f"database:\n  url: {url}\n")
    for cmd in (serve_argv("--config", cfg, "--listen", f"beanstalk={HOST}:0"),
                serve_argv("--config", cfg, "--durability", "memory")):  # refused all the same
        r = run_cli(cmd)
        assert r.returncode == 2
        assert one_line(r) == f"jobgate: database.url mysql://app:***@127.0.0.1/jobs: {cause}"


def test_missing_database_directory_is_an_error_not_created(open_tmp):
    missing = os.path.join(open_tmp, "nope")
    r = run_cli(serve_argv("--database", f"sqlite:///{missing}/jobgate.db",
                           "--listen", f"beanstalk={HOST}:0"))
    assert r.returncode == startup.EXIT_DB_PATH == 7
    assert one_line(r) == (f"jobgate: --database sqlite:///{missing}/jobgate.db: "
                           f"directory {missing} does not exist")
    r = run_cli(beanstalkd_argv("-l", HOST, "-p", "0", "-b", missing))
    assert r.returncode == 7
    assert one_line(r) == f"jobgate-beanstalkd: -b {missing}: directory {missing} does not exist"
    assert not os.path.exists(missing)
    # log level debug: the traceback first, the same line last
    r = run_cli(serve_argv("--database", f"sqlite:///{missing}/jobgate.db", "--log-level",
                           "debug", "--listen", f"beanstalk={HOST}:0"))
    assert r.returncode == 7 and b"Traceback" in r.stderr
    assert r.stderr.decode().splitlines()[-1].endswith(f"directory {missing} does not exist")


def test_read_only_database_directory_beanstalkd(open_tmp):
    """`-b DIR` where the server's user may not write: as root, through -u nobody."""
    os.chmod(open_tmp, 0o555)
    user = ["-u", "nobody"] if ROOT_USER else []
    r = run_cli(beanstalkd_argv("-l", HOST, "-p", "0", *user, "-b", open_tmp))
    assert r.returncode == startup.EXIT_DB_PATH
    assert one_line(r) == (f"jobgate-beanstalkd: -b {open_tmp}: cannot create jobgate.db in "
                           f"{open_tmp}: permission denied")
    assert os.listdir(open_tmp) == []


def test_read_only_database_path_serve(open_tmp):
    """`jobgate serve` on a read-only file system (root: a read-only tmpfs mounted over the
    directory in a private mount namespace), or a chmod 0555 directory (another user)."""
    url = f"sqlite:///{open_tmp}/jobgate.db"
    argv = serve_argv("--database", url, "--listen", f"beanstalk={HOST}:0")
    if ROOT_USER:
        assert shutil.which("unshare"), "util-linux's unshare is needed to mount a ro tmpfs"
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs -o ro,size=64k jobgate-ro "$0" && exec "$@"', open_tmp, *argv]
        cause = "read-only file system"
    else:
        os.chmod(open_tmp, 0o555)
        cause = "permission denied"
    r = run_cli(argv)
    assert r.returncode == startup.EXIT_DB_PATH, r.stderr
    assert one_line(r) == (f"jobgate: --database {url}: cannot create jobgate.db in "
                           f"{open_tmp}: {cause}")


# ------------------------------------------------------------------------- privileges

def test_unknown_user_is_status_6():
    r = run_cli(beanstalkd_argv("-l", HOST, "-p", "0", "-u", "jobgate-no-such-user"))
    assert r.returncode == startup.EXIT_PRIVILEGES == 6
    assert one_line(r) == "jobgate-beanstalkd: -u jobgate-no-such-user: no such user"


def _uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))


def test_beanstalkd_drops_privileges_before_creating_any_file(open_tmp, procs):
    """`-u nobody -b DIR`: every file in DIR is created by nobody, the server runs as nobody
    and serves put / reserve / delete through a socket with no traceback over a few seconds
    (the WAL checkpoint runs every second). A database root created earlier is refused."""
    if not ROOT_USER:
        pytest.skip("dropping privileges with -u needs root (CI runs as root)")
    d = os.path.join(open_tmp, "binlog")
    os.mkdir(d)
    os.chown(d, NOBODY.pw_uid, NOBODY.pw_gid)
    port = free_port()
    p = procs(beanstalkd_argv("-l", HOST, "-p", str(port), "-u", "nobody", "-b", d, "-V"))
    p.wait_tcp(port)
    with greenstalk.Client((HOST, port)) as c:
        assert c.put("as nobody") == 1
        job = c.reserve(timeout=5)
        assert (job.id, job.body) == (1, "as nobody")
        c.delete(job)
        assert c.put("kept") == 2
        assert _uid_of(p.proc.pid) == NOBODY.pw_uid
        time.sleep(2.5)          # a few checkpoints: none may fail
        assert c.stats()["total-jobs"] == 2
    rc, _, err = p.stop()
    assert rc == 0, err
    err = err.decode()
    assert "Traceback" not in err and "failed" not in err, err
    assert "listening" in err    # -V: the server did log
    names = os.listdir(d)
    assert "jobgate.db" in names
    assert {os.stat(os.path.join(d, n)).st_uid for n in names} == {NOBODY.pw_uid}, names
    # a database that root created (an earlier run without -u) is named, not half-used
    root_db = os.path.join(open_tmp, "rootdb")
    os.mkdir(root_db)
    open(os.path.join(root_db, "jobgate.db"), "wb").close()      # root's, mode 0644
    os.chown(root_db, NOBODY.pw_uid, NOBODY.pw_gid)
    r = run_cli(beanstalkd_argv("-l", HOST, "-p", "0", "-u", "nobody", "-b", root_db))
    assert r.returncode == startup.EXIT_DB_PATH
    assert one_line(r) == (f"jobgate-beanstalkd: -b {root_db}: cannot write "
                           f"{root_db}/jobgate.db: permission denied")


# ------------------------------------------------------------------------- the docs' table

def test_operations_md_lists_every_exit_status():
    text = open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8").read()
    head = "## Exit statuses and start-up failures"
    assert head in text
    section = text[text.index(head):]
    documented = {int(m) for m in re.findall(r"^\| `?(\d+)`? \|", section, re.M)}
    code = {v for k, v in vars(startup).items() if k.startswith("EXIT_")}
    assert documented == code
