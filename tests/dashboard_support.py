"""Shared helpers of the dashboard tests (tests/test_dashboard_*.py): a headless Chromium
(Debian's `chromium` package, driven by Playwright; its own browser download is not used), an
in-process server with the beanstalk and http listeners, and fast pipelined beanstalk puts.
"""
from __future__ import annotations

import os
import shutil
import socket

import pytest

from gateway.config import Listener

from .inproc import InProcServer

#: Debian's chromium (.ci/run installs it)
CHROMIUM = os.environ.get("JOBGATE_CHROMIUM", "/usr/bin/chromium")


def launch_browser():
    """(playwright context manager, Browser): headless Chromium at CHROMIUM. Skips when
    Playwright or the browser is missing (CI fails a skip: tests/ci_plugin.py)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no browser at {CHROMIUM} (apt-get install chromium)")
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                 args=["--no-sandbox"])
    return pw, browser


def server(tmp_path, tokens=()) -> InProcServer:
    """A server on a SQLite file with an open beanstalk listener and the http listener
    (bunqueue `tokens` protect it when given)."""
    return InProcServer(f"sqlite:///{tmp_path / 'jobgate.db'}",
                        bunqueue={"auth_tokens": list(tokens)},
                        listeners=[Listener("beanstalk", "127.0.0.1", 0, open=True),
                                   Listener("http", "127.0.0.1", 0)])


def put_many(port: int, tube: str, n: int, batch: int = 5000) -> list:
    """Put `n` jobs (bodies b"job <i>") into `tube` over one pipelined beanstalk connection,
    `batch` commands per write; returns their ids in order."""
    ids: list = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        f = s.makefile("rb")
        s.sendall(f"use {tube}\r\n".encode())
        assert f.readline().startswith(b"USING")
        for lo in range(0, n, batch):
            k = min(batch, n - lo)
            s.sendall(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (len(b), b)
                               for b in (b"job %d" % i for i in range(lo, lo + k))))
            for _ in range(k):
                line = f.readline()
                assert line.startswith(b"INSERTED "), line
                ids.append(int(line.split()[1]))
    return ids
