"""jobgate's own version, for `jobgate --version` and `jobgate-beanstalkd -v`.

Standard library only (the version flags answer without importing the server).
"""
from __future__ import annotations

import os

DIST = "jobgate"
UNKNOWN = "0+unknown"


def source_tree_version(root: str | None = None) -> str | None:
    """The `[project] version` of the pyproject.toml beside this package when it belongs to
    jobgate (a checkout run with PYTHONPATH, or an editable install), else None. `root`: the
    directory holding gateway/ (default: this file's). A pyproject.toml that cannot be read
    or parsed counts as absent."""
    import tomllib
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as f:
            project = tomllib.load(f).get("project", {})
    except (OSError, ValueError):
        return None
    v = project.get("version")
    if project.get("name") == DIST and isinstance(v, str) and v:
        return v
    return None


def version() -> str:
    """jobgate's version string, e.g. "0.1.0". From the source tree's pyproject.toml when this
    code runs from one (the file is the truth there: the metadata of an editable install, or
    of another installed jobgate, may be older than the checkout), else from the installed
    distribution's metadata (importlib.metadata), else "0+unknown". Never raises."""
    v = source_tree_version()
    if v:
        return v
    from importlib import metadata
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return UNKNOWN
