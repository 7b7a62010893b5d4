"""Extra golden steps (tests/data/bunqueue-golden-extra.json, issue 16) recorded before the
feature they check exists in jobgate: ``EXTRA_PENDING`` maps such a step's name to
``lands with branch i16-<area>`` (or ``no branch yet: <what>``), and the runner
(conformance/bunqueue_runner.Runner, ``pending=``) reports a mismatch there as ``known``, not
``FAIL``, unless it checks a reference server; tests/test_conformance_bunqueue_extra.py marks
them strict xfails.

Empty since issue 16 landed (every extra step passes on jobgate, or answers the reply
conformance/bunqueue_known_differences.py gives for a deliberate difference), and
tests/test_conformance_bunqueue_extra.py keeps it empty on main: a step recorded ahead of its
feature may sit here only on a work branch.
"""
from __future__ import annotations

__all__ = ["EXTRA_PENDING", "check_pending"]

_UNOWNED = "no branch yet: "

EXTRA_PENDING: dict[str, str] = {}


def check_pending(step_names: list[str]) -> list[str]:
    """Problems with ``EXTRA_PENDING`` against the extra golden step names (empty = fine)."""
    names = set(step_names)
    out = [f"no extra golden step named {n!r}" for n in EXTRA_PENDING if n not in names]
    out += [f"{n!r}: reason must start with 'lands with branch i16-' or {_UNOWNED!r}"
            for n, r in EXTRA_PENDING.items()
            if not r.startswith(("lands with branch i16-", _UNOWNED))]
    return out
