"""Record the HTTP API golden file against the REAL bunqueue 2.9.5 server.

    python -m conformance.bunqueue_http_record [--out tests/data/bunqueue-http-golden.json]

Starts the reference server (tests/bunqueue_real.BunqueueServer: Bun and bunqueue from
tests/bunqueue_client/node_modules, a fresh SQLite file, auth token
conformance.bunqueue_http.TOKEN), plays conformance.bunqueue_http.STEPS on its HTTP port with
httpx and writes {"server", "notes", "steps": [normalised records], "ws": [normalised
messages of conformance.bunqueue_http.play_ws]}. Exit status 0, or 1 when
the server could not be started.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from .bunqueue_http import TOKEN, play, play_ws

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "bunqueue-http-golden.json"
SERVER = "bunqueue 2.9.5 on bun (HTTP API, --auth-tokens set)"


def main(argv=None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    from tests.bunqueue_real import BunqueueServer
    import tempfile
    d = tempfile.mkdtemp(prefix="bq-http-")
    try:
        srv = BunqueueServer(data_path=str(Path(d) / "bunqueue.db"), token=TOKEN)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        with httpx.Client(timeout=10) as c:
            steps = play(c, f"http://127.0.0.1:{srv.http_port}")
        ws = play_ws(f"http://127.0.0.1:{srv.http_port}")
    finally:
        srv.kill()
    doc = {"server": SERVER,
           "notes": "normalised: ids <id>, times <ms>, memory/collections <n>, version; ws: /ws/queues/mine messages",
           "steps": steps, "ws": ws}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(steps)} steps -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
