"""The workq dialect: sans-IO parser and session (workq-protocol.txt, docs/workq.md).

`REGISTRATION` is what the gateway's registry lists (protocols/contract.py).
"""
from ..contract import Registration

__all__ = ["CLOSE", "Parser", "QUIT", "Session", "WAIT", "WorkqInfo", "connect",
           "REGISTRATION"]


_EXPORTS = {"CLOSE": ".parser", "Parser": ".parser", "QUIT": ".session", "WAIT": ".session",
            "Session": ".session", "WorkqInfo": ".session", "connect": ".session"}


def _state(port, options: dict, context):
    from .session import WorkqInfo
    return WorkqInfo(port)


def _connect(info, transport):
    from .session import connect
    return connect(info, transport)


REGISTRATION = Registration(
    name="workq",
    default_port=9922,
    make_state=_state,
    session_factory=_connect,
    refuse_reply=None,   # the reference accepts every connection: none to copy
    summary="workq's +/- text protocol (iamduo/workq)",
)


def __getattr__(name: str):
    """The package's exports, imported on first use: the registry (and so the command line,
    before it binds) loads only REGISTRATION."""
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(mod, __name__), name)
