"""The beanstalk dialect (../shared/specs/beanstalk-protocol.txt, reference: beanstalkd 1.12).

`REGISTRATION` is what the gateway's registry lists (protocols/contract.py).
"""
from ..contract import Option, Registration

__all__ = ["Parser", "Session", "ServerInfo", "connect", "REGISTRATION"]


_EXPORTS = {"Parser": ".parser", "Session": ".session", "ServerInfo": ".session",
            "connect": ".session"}


def _state(port, options: dict, context):
    from .session import ServerInfo
    return ServerInfo(port, options["max_job_size"], context.version, options["line_max"])


def _connect(info, transport):
    from .session import connect
    return connect(info, transport)


REGISTRATION = Registration(
    name="beanstalk",
    default_port=11300,
    make_state=_state,
    session_factory=_connect,
    refuse_reply=None,   # beanstalkd has no reply for it: the connection is closed
    options_path=("limits", "beanstalk"),
    options=(
        Option("max_job_size", "int", 65535, 0, 2**32 - 1,
               "largest job body in bytes (beanstalkd -z)"),
        Option("line_max", "int", 224, 16, 65536,
               "longest command line in bytes, CRLF included (beanstalkd LINE_BUF_SIZE)"),
    ),
    summary="beanstalkd 1.12 protocol (greenstalk, pystalk, beanstalkc, fivebeans, jackd)",
)


def __getattr__(name: str):
    """The package's exports, imported on first use: the registry (and so the command line,
    before it binds) loads only REGISTRATION."""
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(mod, __name__), name)
