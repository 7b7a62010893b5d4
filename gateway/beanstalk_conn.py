"""One beanstalk connection: the shared text-dialect loop (gateway.textconn) with a beanstalk
parser and session. A waiting reserve whose client half-closes answers TIMED_OUT (beanstalk
spec, "reserve"); a connection that ends inside a put's body counts that put as beanstalkd does.
"""
from __future__ import annotations

from protocols.beanstalk import Parser, Session
from protocols.beanstalk.session import QUIT, WAIT

from .textconn import serve_session


async def serve(stream, runtime) -> None:
    """Run one beanstalk connection on `stream` (an anyio ByteStream) until it closes."""
    info = runtime.beanstalk_info
    cfg = runtime.config
    if runtime.connections >= cfg.max_connections:
        await stream.aclose()
        return
    sess = Session(info)
    parser = Parser(cfg.beanstalk_max_job_size, cfg.beanstalk_line_max)

    def on_end():
        if parser.in_body():
            sess.unfinished_put()

    runtime.connections += 1
    try:
        await serve_session(stream, sess, parser, runtime.durable, WAIT, QUIT, on_end)
    finally:
        runtime.connections -= 1
