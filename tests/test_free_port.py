"""conformance.servers.free_port, the one port picker of the tests and the conformance runner:
never a port twice while it is recent (a node's four listeners picked before any binds got one
port twice in CI: "address already in use"), never one in the kernel's ephemeral range, and
under parallel test workers only the worker's own slice of the range.
"""
from __future__ import annotations

import socket
import subprocess
import sys

from conformance import servers
from conformance.servers import HOST, free_port

from .support import ROOT


def test_picks_without_binding_are_all_distinct_and_outside_the_ephemeral_range():
    low, high = servers._ephemeral_range()
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
    assert all(not (low <= p <= high) for p in ports)


def test_a_port_in_use_is_not_picked():
    # every port of the slice but a few is taken by a listener here: picks land on the rest
    held = []
    try:
        for p in range(10000, 10200):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((HOST, p))
            except OSError:
                s.close()
                continue
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        for _ in range(300):
            assert free_port() not in taken
    finally:
        for s in held:
            s.close()


def test_parallel_workers_pick_from_disjoint_slices():
    code = ("from conformance.servers import free_port; "
            "print(sorted({free_port() % 3 for _ in range(300)}))")
    for worker in (0, 1, 2):
        env = {"PYTEST_XDIST_WORKER": f"gw{worker}", "PYTEST_XDIST_WORKER_COUNT": "3",
               "PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, cwd=ROOT).stdout.strip()
        # port = 10000 + worker + 3k: one residue per worker, a different one for each
        assert out == str([(10000 + worker) % 3])
