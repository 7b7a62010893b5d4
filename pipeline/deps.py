"""The optional dependencies of the pipeline (`pip install 'jobgate[pipeline]'`)."""
from __future__ import annotations

import importlib

HINT = ("the pipeline needs the optional extra: pip install 'jobgate[pipeline]' "
        "(pyspark, pyarrow, matplotlib); Spark also needs Java 17 or later")


class MissingExtra(RuntimeError):
    """A module of the `pipeline` extra is not installed; the message says how to install it."""


def require(*modules: str) -> None:
    """Import each of `modules` (e.g. "pyspark", "pyarrow") or raise MissingExtra naming the
    missing one and the install command."""
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            raise MissingExtra(f"{m} is not installed: {HINT}") from e
