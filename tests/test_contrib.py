"""contrib/: the systemd units and the configuration they read stay in step with the code
(the commands in ExecStart parse, the exit statuses that must not restart are the ones the
CLIs use, the configuration loads), `systemd-analyze verify` accepts them where it is
installed, and a unit written for beanstalkd (Debian's beanstalkd.service, when beanstalkd
is installed) runs jobgate-beanstalkd in its ExecStart: READY=1 on $NOTIFY_SOCKET, then
served. The notification protocol itself: tests/test_notify.py; socket activation:
tests/test_socket_activation.py.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from gateway import beanstalkd_cli, startup
from gateway.config import load

from .support import ROOT, Raw, free_port, stop_process

CONTRIB = os.path.join(ROOT, "contrib")
DEBIAN_UNIT = "/lib/systemd/system/beanstalkd.service"
DEBIAN_DEFAULTS = "/etc/default/beanstalkd"


def read_unit(path: str) -> dict:
    """{section: {key: [values, in order]}} of a systemd unit file (comments, blank lines
    and line continuations as systemd.syntax(7))."""
    out: dict = {}
    section = None
    text = open(path, encoding="utf-8").read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = out.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return out


def one(unit: dict, section: str, key: str) -> str:
    values = unit[section][key]
    assert len(values) == 1, (key, values)
    return values[0]


@pytest.mark.parametrize("name", ["jobgate.service", "jobgate-beanstalkd.service"])
def test_units_notify_and_are_hardened(name):
    u = read_unit(os.path.join(CONTRIB, name))
    svc = u["Service"]
    assert one(u, "Service", "Type") == "notify"
    assert one(u, "Service", "NotifyAccess") == "main"
    assert one(u, "Service", "DynamicUser") == "yes"
    assert one(u, "Service", "StateDirectory") == "jobgate"
    assert int(one(u, "Service", "LimitNOFILE")) >= 65536
    for key in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
                "RestrictAddressFamilies", "SystemCallFilter", "CapabilityBoundingSet"):
        assert key in svc, key
    assert one(u, "Install", "WantedBy") == "multi-user.target"
    # exit statuses a restart cannot cure, as the CLIs use them (gateway/startup.py)
    never = {int(x) for x in one(u, "Service", "RestartPreventExitStatus").split()}
    assert never >= {startup.EXIT_USAGE, startup.EXIT_PRIVILEGES, startup.EXIT_DB_PATH}
    assert never.isdisjoint({startup.EXIT_OK, startup.EXIT_LISTEN, startup.EXIT_DATABASE})


def test_jobgate_unit_runs_serve_with_the_contrib_config():
    u = read_unit(os.path.join(CONTRIB, "jobgate.service"))
    argv = shlex.split(one(u, "Service", "ExecStart"))
    assert os.path.basename(argv[0]) == "jobgate"
    assert argv[1:] == ["serve", "--config", "/etc/jobgate/jobgate.yml"]
    assert one(u, "Service", "ConfigurationDirectory") == "jobgate"     # /etc/jobgate
    cfg = load(os.path.join(CONTRIB, "jobgate.yml"))
    # the database lives in the unit's StateDirectory, every dialect listens on loopback
    assert cfg.database_url == "sqlite:////var/lib/jobgate/jobgate.db"
    assert one(u, "Service", "WorkingDirectory") == "/var/lib/jobgate"
    assert {lst.dialect for lst in cfg.listeners} == {"beanstalk", "workq", "bunqueue",
                                                      "glidemq"}
    assert {lst.host for lst in cfg.listeners} == {"127.0.0.1"}


def test_beanstalkd_unit_flags_parse_as_beanstalkd_flags():
    u = read_unit(os.path.join(CONTRIB, "jobgate-beanstalkd.service"))
    argv = shlex.split(one(u, "Service", "ExecStart"))
    assert os.path.basename(argv[0]) == "jobgate-beanstalkd"
    cfg, user = beanstalkd_cli.parse(argv[1:])
    assert user is None
    assert cfg.durability == "commit"
    assert cfg.database_url == "sqlite:////var/lib/jobgate/jobgate.db"
    assert [(lst.host, lst.port) for lst in cfg.listeners] == [("127.0.0.1", 11300)]
    # the two units are alternatives: one database, and beanstalkd's port
    assert set(one(u, "Unit", "Conflicts").split()) == {"beanstalkd.service",
                                                        "jobgate.service"}


def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    tool = shutil.which("systemd-analyze")
    units = ["jobgate.service", "jobgate-beanstalkd.service"]
    for name in units:     # verify wants the executables to exist: point them at this Python
        text = open(os.path.join(CONTRIB, name), encoding="utf-8").read()
        text = re.sub(r"^ExecStart=\S+", f"ExecStart={sys.executable}", text, flags=re.M)
        (tmp_path / name).write_text(text)
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd; .ci/run installs it)")
    r = subprocess.run([tool, "verify", *units], cwd=tmp_path, capture_output=True,
                       timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr.decode()


def _defaults(path: str) -> dict:
    """KEY=VALUE lines of an EnvironmentFile (quotes removed, comments skipped)."""
    env = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            env[k.strip()] = v.strip().strip('"').strip("'")
    return env


def _expand(command: str, env: dict) -> list[str]:
    """systemd.service(5) ExecStart expansion: ${VAR} is one word, a bare $VAR splits on
    whitespace into words; unset variables are empty."""
    words = []
    for word in shlex.split(command):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            words += env.get(word[1:], "").split()
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                                lambda m: env.get(m.group(1), ""), word))
    return words


def test_debians_beanstalkd_unit_runs_jobgate_beanstalkd(tmp_path):
    if not os.path.exists(DEBIAN_UNIT):
        pytest.skip(f"{DEBIAN_UNIT} is missing: Debian's beanstalkd package is not installed "
                    "(make deps / .ci/run install it)")
    u = read_unit(DEBIAN_UNIT)
    env = _defaults(DEBIAN_DEFAULTS) if os.path.exists(DEBIAN_DEFAULTS) else {}
    port = free_port()      # the packaged defaults, on a free port, with -b as the file offers
    env.update(BEANSTALKD_LISTEN_ADDR="127.0.0.1", BEANSTALKD_LISTEN_PORT=str(port),
               BEANSTALKD_EXTRA=f"-b {tmp_path}")
    argv = _expand(one(u, "Service", "ExecStart"), env)
    assert os.path.basename(argv[0]) == "beanstalkd", argv
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify = os.path.join(tmp_path, "notify")
    manager.bind(notify)
    manager.settimeout(20)
    proc = subprocess.Popen([sys.executable, "-m", "gateway.beanstalkd_cli", *argv[1:]],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT,
                                               NOTIFY_SOCKET=notify),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while b"READY=1" not in manager.recv(4096).split(b"\n"):
            pass
        r = Raw(port)
        assert r.cmd(b"put 0 0 60 6\r\ndebian\r\n") == b"INSERTED 1\r\n"
        r.close()
    finally:
        out, err = stop_process(proc, 20, signal.SIGTERM)
        manager.close()
    assert proc.returncode == 0, err
    assert os.path.exists(os.path.join(tmp_path, "jobgate.db"))
