"""The workq dialect: sans-IO parser and session (workq-protocol.txt, docs/workq.md).

`REGISTRATION` is what the gateway's registry lists (protocols/contract.py).
"""
from ..contract import Registration, connection_options, lazy_call, lazy_exports

__all__ = ["CLOSE", "Parser", "QUIT", "Session", "WAIT", "WorkqInfo", "connect",
           "REGISTRATION"]


_EXPORTS = {"CLOSE": ".parser", "Parser": ".parser", "QUIT": ".session", "WAIT": ".session",
            "Session": ".session", "WorkqInfo": ".session", "connect": ".session"}


def _state(port, options: dict, context):
    from .session import WorkqInfo
    return WorkqInfo(port)


REGISTRATION = Registration(
    name="workq",
    default_port=9922,
    make_state=_state,
    session_factory=lazy_call(__name__, ".session", "connect"),
    refuse_reply=None,   # the reference accepts every connection: none to copy
    options_path=("limits", "workq"),
    # the reference has no timeout: workers hold idle connections
    options=connection_options(idle_timeout_s=0, half_sent_timeout_s=30),
    summary="workq's +/- text protocol (iamduo/workq)",
)


__getattr__ = lazy_exports(__name__, _EXPORTS)
