"""The settings a shared-mode node's PostgreSQL sessions start with (core/storage.py
make_engine; docs/operations.md "Several nodes"): `idle_in_transaction_session_timeout` from
database.idle_in_transaction_ms, merged with the operator's own libpq options (the URL's, else
PGOPTIONS), theirs winning for a setting both name. Real PostgreSQL sessions.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

from urllib.parse import quote

import pytest

from core.storage import make_engine

OURS = "-c idle_in_transaction_session_timeout=1234"


def _show(url: str, *names: str) -> list:
    eng = make_engine(url, "jobgate test", OURS)
    try:
        with eng.connect() as c:
            return [c.exec_driver_sql(f"SHOW {n}").scalar() for n in names]
    finally:
        eng.dispose()


def test_the_timeout_is_set_and_pgoptions_kept(pg_url, monkeypatch):
    """PGOPTIONS alone: both its setting and ours hold (before, passing `options` made libpq
    ignore PGOPTIONS: an operator's search_path was lost)."""
    monkeypatch.setenv("PGOPTIONS", "-c search_path=myschema")
    assert _show(pg_url, "idle_in_transaction_session_timeout", "search_path") == [
        "1234ms", "myschema"]


@pytest.mark.parametrize("own, expect", [
    ("-c statement_timeout=5000", ["1234ms", "5s"]),
    ("-c idle_in_transaction_session_timeout=777", ["777ms", "0"]),
])
def test_the_url_s_options_are_kept_and_win(pg_url, monkeypatch, own, expect):
    """The URL's own `options` are kept beside ours (before, they replaced ours: no timeout),
    and its own idle_in_transaction_session_timeout wins over ours; PGOPTIONS, which the URL
    overrides, is not read."""
    monkeypatch.setenv("PGOPTIONS", "-c search_path=myschema")
    url = f"{pg_url}?options={quote(own)}"
    assert _show(url, "idle_in_transaction_session_timeout", "statement_timeout") == expect
    assert _show(url, "search_path") != ["myschema"]
