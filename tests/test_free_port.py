"""conformance.servers.free_port, the one port picker of the tests and the conformance runner:
never a port twice while it is recent (a node's four listeners picked before any binds got one
port twice in CI: "address already in use"), never one in the kernel's ephemeral range, and
under parallel test workers only the worker's own slice of the range.
"""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from conformance import servers
from conformance.servers import HOST, free_port

from .support import ROOT


needs_room = pytest.mark.skipif(servers._picking() is None,
                                reason="the kernel's ephemeral range leaves no room to pick from")


@needs_room
def test_picks_without_binding_are_all_distinct_and_outside_the_ephemeral_range():
    low, high = servers._ephemeral_range()
    keep = servers._picking()[5]     # under many test workers: half a small slice
    ports = [free_port() for _ in range(min(2000, keep))]
    assert len(set(ports)) == len(ports)
    assert all(not (low <= p <= high) for p in ports)


@needs_room
def test_a_port_in_use_is_not_picked():
    # 200 ports of this process's slice (only its own: another test worker may be about to
    # bind a port of its slice) are taken by sockets here: no pick is one of them
    bottom, _top, index, count, _slots, _keep = servers._picking()
    held = []
    try:
        for p in range(bottom + index, bottom + index + 200 * count, count):
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


@needs_room
def test_parallel_workers_pick_from_disjoint_slices():
    code = ("from conformance.servers import free_port; "
            "print(sorted({free_port() % 3 for _ in range(300)}))")
    for worker in (0, 1, 2):
        env = {"PYTEST_XDIST_WORKER": f"gw{worker}", "PYTEST_XDIST_WORKER_COUNT": "3",
               "PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, cwd=ROOT).stdout.strip()
        # port = bottom + worker + 3k: one residue per worker, a different one for each
        assert out == str([(servers._picking()[0] + worker) % 3])


@needs_room
def test_many_workers_keep_picking_after_their_slice_went_round():
    """Worker gw0 of 16: its slice has about 1,400 ports; 4,000 picks never run out (the
    recent picks it avoids are at most half its slice)."""
    code = ("from conformance.servers import free_port\n"
            "ps = [free_port() for _ in range(4000)]\n"
            "print(len(ps), len(set(ps[-500:])))")
    env = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "16",
           "PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout.split()
    assert out == ["4000", "500"]
