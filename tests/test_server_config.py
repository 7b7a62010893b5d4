"""The server's config file (every key, overrides by the command line, errors naming the key)
and the connection limit.

Every server here is a real subprocess on 127.0.0.1 (or a unix socket in a fresh temporary
directory), stopped by the fixture that started it.
"""
from __future__ import annotations

import json
import os
import socket

import pytest

from .support import Raw, free_port
from .server_support import HOST, read_eof, run_cli, serve_argv, stats_dict, unix_raw, wait_until


# ============================================================================== config file

def write_config(tmp_path, text: str) -> str:
    p = tmp_path / "jobgate.yaml"
    p.write_text(text)
    return str(p)


def test_config_file_full(procs, tmp_path):
    port = free_port()
    db = tmp_path / "cfg.db"
    cfg = write_config(tmp_path, f"""
listeners:
  beanstalk: {{host: 127.0.0.1, port: {port}}}
database:
  url: sqlite:///{db}
  sqlite_synchronous: full
durability: commit
history:
  enabled: true
  retention_days: 7
limits:
  max_connections: 50
  beanstalk: {{max_job_size: 100, line_max: 64}}
log: {{level: info, format: json}}
""")
    p = procs(serve_argv("--config", cfg))
    p.wait_tcp(port)
    r = Raw(port)
    assert stats_dict(r)["max-job-size"] == "100"
    assert r.cmd(b"put 0 0 60 100\r\n" + b"x" * 100 + b"\r\n") == b"INSERTED 1\r\n"
    assert r.cmd(b"put 0 0 60 101\r\n" + b"x" * 101 + b"\r\n") == b"JOB_TOO_BIG\r\n"
    # line_max 64 includes the CRLF: 62 bytes + CRLF is the longest line
    assert r.cmd(b"use " + b"a" * 58 + b"\r\n") == b"USING " + b"a" * 58 + b"\r\n"
    r.send(b"use " + b"b" * 61 + b"\r\nlist-tube-used\r\n")
    assert r.reply() == b"BAD_FORMAT\r\n"
    assert r.reply() == b"USING " + b"a" * 58 + b"\r\n"
    r.close()
    rc, _, err = p.stop()
    assert rc == 0, err
    assert db.exists()
    lines = [json.loads(x) for x in err.decode().splitlines() if x.strip()]
    msgs = [x["msg"] for x in lines]
    assert "listening" in msgs and "stopped" in msgs
    assert all({"ts", "level", "logger", "msg"} <= set(x) for x in lines)
    listening = next(x for x in lines if x["msg"] == "listening")
    assert listening["address"] == f"127.0.0.1:{port}"
    # the job is in the configured database
    p2 = procs(serve_argv("--config", cfg))
    p2.wait_tcp(port)
    r = Raw(port)
    try:
        assert r.cmd(b"peek 1\r\n") == b"FOUND 1 100\r\n" + b"x" * 100 + b"\r\n"
    finally:
        r.close()


def test_config_log_text_and_level(procs, tmp_path):
    port = free_port()
    cfg = write_config(tmp_path, f"""
listeners: {{beanstalk: {{host: 127.0.0.1, port: {port}}}}}
durability: memory
log: {{level: INFO, format: text}}
""")
    p = procs(serve_argv("--config", cfg))
    p.wait_tcp(port)
    rc, _, err = p.stop()
    assert rc == 0
    text = err.decode()
    assert "listening" in text and f"address=127.0.0.1:{port}" in text
    assert not text.lstrip().startswith("{")


def test_config_command_line_overrides(procs, tmp_path):
    port = free_port()
    cfg = write_config(tmp_path, """
listeners: {beanstalk: {host: 127.0.0.1, port: 1}}
durability: memory
limits: {beanstalk: {max_job_size: 5}}
log: {level: warning}
""")
    p = procs(serve_argv("--config", cfg, "--listen", f"beanstalk=127.0.0.1:{port}"))
    p.wait_tcp(port)
    r = Raw(port)
    try:
        assert stats_dict(r)["max-job-size"] == "5"
    finally:
        r.close()


@pytest.mark.parametrize("text, key", [
    ("limits:\n  beanstalk:\n    line_max: 5\n", "limits.beanstalk.line_max"),
    ("limits:\n  beanstalk:\n    line_max: lots\n", "limits.beanstalk.line_max"),
    ("limits:\n  beanstalk:\n    line_maxx: 300\n", "limits.beanstalk.line_maxx"),
    ("limits:\n  beanstalk:\n    max_job_size: -1\n", "limits.beanstalk.max_job_size"),
    ("limits:\n  max_connections: 0\n", "limits.max_connections"),
    ("limits:\n  max_connections: true\n", "limits.max_connections"),
    ("durability: fast\n", "durability"),
    ("databse:\n  url: sqlite:///x.db\n", "databse"),
    ("database:\n  url: ''\n", "database.url"),
    ("database:\n  sqlite_synchronous: extra\n", "database.sqlite_synchronous"),
    ("database:\n  idle_in_transaction_ms: 50\n", "database.idle_in_transaction_ms"),
    ("database:\n  idle_in_transaction_ms: true\n", "database.idle_in_transaction_ms"),
    ("listeners:\n  beanstalk: {host: 127.0.0.1, port: 70000}\n", "listeners.beanstalk.port"),
    ("listeners:\n  beanstalk: {hots: 127.0.0.1}\n", "listeners.beanstalk.hots"),
    ("listeners:\n  workqq: {port: 1}\n", "listeners.workqq"),
    ("log:\n  level: loud\n", "log.level"),
    ("log:\n  format: xml\n", "log.format"),
    ("history:\n  enabled: maybe\n", "history.enabled"),
    ("history:\n  retention_days: -3\n", "history.retention_days"),
])
def test_config_errors_name_the_key(tmp_path, text, key):
    cfg = write_config(tmp_path, text)
    r = run_cli(serve_argv("--config", cfg))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert key.encode() in r.stderr, r.stderr
    assert b"Traceback" not in r.stderr


@pytest.mark.parametrize("text", ["listeners: [1, 2\n", "- just\n- a list\n"])
def test_config_not_yaml_mapping(tmp_path, text):
    r = run_cli(serve_argv("--config", write_config(tmp_path, text)))
    assert r.returncode == 2, r.stderr
    assert b"Traceback" not in r.stderr and r.stderr


def test_config_unix_listener(procs, tmp_path, short_tmp):
    path = os.path.join(short_tmp, "cfg.sock")
    cfg = write_config(tmp_path, f"""
listeners:
  beanstalk: {{unix: {path}}}
durability: memory
log: {{level: warning}}
""")
    p = procs(serve_argv("--config", cfg))
    p.wait_unix(path)
    r = unix_raw(path)
    try:
        assert r.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        r.close()
    rc, _, err = p.stop()
    assert rc == 0, err


def test_config_listener_unix_and_port_conflict(tmp_path):
    cfg = write_config(tmp_path, "listeners:\n  beanstalk: {unix: /tmp/x.sock, port: 5}\n")
    r = run_cli(serve_argv("--config", cfg))
    assert r.returncode == 2 and b"listeners.beanstalk" in r.stderr


@pytest.mark.parametrize("url", ["nosuchdriver://x", "not a url"])
def test_bad_database_url_is_a_config_error(tmp_path, url):
    cfg = write_config(tmp_path, f"database:\n  url: '{url}'\nlog: {{level: warning}}\n")
    r = run_cli(serve_argv("--config", cfg, "--listen", f"beanstalk={HOST}:{free_port()}"))
    assert r.returncode == 2, r.stderr[-500:]
    assert b"database.url" in r.stderr
    assert b"Traceback" not in r.stderr


def test_config_missing_file(tmp_path):
    r = run_cli(serve_argv("--config", str(tmp_path / "nope.yaml")))
    assert r.returncode == 2
    assert b"nope.yaml" in r.stderr


def test_bad_listen_flag():
    r = run_cli(serve_argv("--listen", "beanstalk=nowhere", "--durability", "memory"))
    assert r.returncode == 2 and b"--listen" in r.stderr


# ============================================================================ max connections

def test_max_connections_from_config(procs, tmp_path):
    port = free_port()
    cfg = write_config(tmp_path, f"""
listeners: {{beanstalk: {{host: 127.0.0.1, port: {port}}}}}
durability: memory
limits: {{max_connections: 3}}
log: {{level: warning}}
""")
    p = procs(serve_argv("--config", cfg))
    p.wait_tcp(port)
    # wait_tcp's probe connection may still be counted for a moment
    probe = Raw(port)
    wait_until(lambda: stats_dict(probe)["current-connections"] == "1", what="probe alone")
    conns = [probe, Raw(port), Raw(port)]
    try:
        for c in conns:
            assert c.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        extra = socket.create_connection((HOST, port), timeout=5)
        try:
            extra.sendall(b"list-tube-used\r\n")
        except OSError:
            pass
        assert read_eof(extra) == b""  # closed at accept, never served
        extra.close()
        assert stats_dict(conns[0])["current-connections"] == "3"
        conns.pop().close()
        wait_until(lambda: stats_dict(conns[0])["current-connections"] == "2", what="slot free")
        again = Raw(port)
        conns.append(again)
        assert again.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        for c in conns:
            c.close()


def test_writer_thread_setting(tmp_path):
    """database.writer_thread: auto (default), on / off (YAML's bare on/off read as booleans
    too); anything else is an error naming the key."""
    from gateway.config import ConfigError, load
    assert load(None).writer_thread == "auto"
    for text, want in (("on", "on"), ("off", "off"), ("auto", "auto"), ('"on"', "on")):
        assert load(write_config(tmp_path, f"database: {{writer_thread: {text}}}\n")
                    ).writer_thread == want
    with pytest.raises(ConfigError, match="database.writer_thread"):
        load(write_config(tmp_path, "database: {writer_thread: sometimes}\n"))
