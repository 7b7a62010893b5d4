"""The beanstalk dialect (../shared/specs/beanstalk-protocol.txt, reference: beanstalkd 1.12).

`REGISTRATION` is what the gateway's registry lists (protocols/contract.py).
"""
from ..contract import Option, Registration, connection_options, lazy_call, lazy_exports

__all__ = ["Parser", "Session", "ServerInfo", "connect", "REGISTRATION"]


_EXPORTS = {"Parser": ".parser", "Session": ".session", "ServerInfo": ".session",
            "connect": ".session"}


def _state(port, options: dict, context):
    from .session import ServerInfo
    return ServerInfo(port, options["max_job_size"], context.version, options["line_max"])


REGISTRATION = Registration(
    name="beanstalk",
    default_port=11300,
    make_state=_state,
    session_factory=lazy_call(__name__, ".session", "connect"),
    refuse_reply=None,   # beanstalkd has no reply for it: the connection is closed
    options_path=("limits", "beanstalk"),
    options=(
        Option("max_job_size", "int", 65535, 0, 2**32 - 1,
               "largest job body in bytes (beanstalkd -z)"),
        Option("line_max", "int", 224, 16, 65536,
               "longest command line in bytes, CRLF included (beanstalkd LINE_BUF_SIZE)"),
    # beanstalkd has neither timeout: workers hold idle connections for hours
    ) + connection_options(idle_timeout_s=0, half_sent_timeout_s=30),
    summary="beanstalkd 1.12 protocol (greenstalk, pystalk, beanstalkc, fivebeans, jackd)",
)


__getattr__ = lazy_exports(__name__, _EXPORTS)
