"""The dialect registry: every dialect the server speaks, one line each (DESIGN.md,
"Networking"). A dialect is a package under protocols/ exporting a `REGISTRATION`
(protocols/contract.py); adding one to the server is one line here. Listener names in the config
and `--listen`, default ports, the dialects' config sections and the CLI's help come from here.
"""
from __future__ import annotations

from protocols import beanstalk, bunqueue, http, resp, workq

#: name -> Registration, in the order listeners start and help lists them.
DIALECTS = {r.name: r for r in (
    beanstalk.REGISTRATION,
    workq.REGISTRATION,
    bunqueue.REGISTRATION,
    resp.REGISTRATION,
    http.REGISTRATION,
)}


def names() -> tuple:
    """The registered dialect names, in registry order."""
    return tuple(DIALECTS)


def get(name: str):
    """The Registration of dialect `name` (KeyError when unknown)."""
    return DIALECTS[name]
