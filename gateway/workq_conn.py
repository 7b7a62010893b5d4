"""One workq connection: the shared text-dialect loop (gateway.textconn) with a workq parser
and session. A lease, result or run whose client goes away is withdrawn (a run's job deleted);
leases the connection took stay until their TTR, as in workq.
"""
from __future__ import annotations

from protocols.workq import QUIT, WAIT, Parser, Session

from .textconn import serve_session


async def serve(stream, runtime) -> None:
    """Run one workq connection on `stream` (an anyio ByteStream) until it closes."""
    if runtime.connections >= runtime.config.max_connections:
        await stream.aclose()
        return
    runtime.connections += 1
    try:
        await serve_session(stream, Session(runtime.workq_info), Parser(), runtime.durable,
                            WAIT, QUIT)
    finally:
        runtime.connections -= 1
