"""The port's webhook operations (a base of core.api.Port; issue 16): registrations
(core/webhooks.py Registry) and the subscriber-only progress event that webhooks deliver.
Delivery itself is I/O and lives in gateway/webhooks.py, which reads the feed through
Port.subscribe and reports outcomes back with `webhook_delivered`.

Units: wall ms (`created_ms`, `last_ms`). Expects `self._engine` and `self._webhooks` (a
core.webhooks.Registry made by Port.__init__).
"""
from __future__ import annotations

from .webhooks import AllowList, WebhookView


class WebhookOps:
    """Webhook registrations and the progress event (see the module docstring)."""

    def add_webhook(self, id: str, url, events, queue=None, secret=None):
        """Register webhook `id` (a fresh UUIDv7 string) for `events` (a list of
        core.webhooks.WEBHOOK_EVENTS names) of `queue` (None: every queue), signed with
        `secret` (None: unsigned). Returns a WebhookView, or the reference's error text (str)
        for a refused URL (SSRF rules and the allow-list: core.webhooks.url_error) or an
        unknown event name. Raises TypeError for `events` that is not a list or a `queue` /
        `secret` that is not a string. Stored with the next commit."""
        h = self._webhooks.add(id, url, events, queue, secret)
        return h if h.__class__ is str else h.view()

    def remove_webhook(self, id) -> bool:
        """Unregister webhook `id` (stored); False when there is none."""
        return self._webhooks.remove(id)

    def set_webhook_enabled(self, id, enabled: bool) -> bool:
        """Enable or disable webhook `id` (stored); False when there is none."""
        return self._webhooks.set_enabled(id, bool(enabled))

    def webhook(self, id) -> WebhookView | None:
        """A snapshot of webhook `id`, or None."""
        h = self._webhooks.hooks.get(id) if id.__class__ is str else None
        return None if h is None else h.view()

    def webhooks(self) -> list:
        """Snapshots (WebhookView) of every registration, in registration order."""
        return [h.view() for h in self._webhooks.hooks.values()]

    def webhook_stats(self) -> dict:
        """{"total": registrations, "enabled": enabled ones}."""
        return self._webhooks.stats()

    def webhooks_version(self) -> int:
        """A number that changes whenever a registration is added, removed or changed (not on
        counter updates): delivery re-reads `webhooks()` when it moves."""
        return self._webhooks.version

    def on_webhooks_changed(self, fn) -> None:
        """`fn()` (or None) is called after every registration change (delivery starts and
        stops its feed subscription with it)."""
        self._webhooks.on_change = fn

    def set_webhook_allow(self, entries) -> None:
        """The SSRF allow-list (config `webhooks.allow`: networks such as `127.0.0.1/32` and
        host names) for registrations from now on. Raises ValueError for a bad entry."""
        self._webhooks.allow = AllowList(entries)

    def restore_webhooks(self, store) -> int:
        """Load the stored registrations from `store` (StorePort) into the empty registry at
        start; returns how many."""
        return self._webhooks.restore(store.load_records("webhooks"))

    def webhook_delivered(self, id: str, successes: int, failures: int = 0) -> None:
        """Count delivery outcomes of webhook `id`, each after its retries (a success sets
        last_ms = now). Called on the event loop's thread (gateway/webhooks.py hands the
        worker's counts over, one call per webhook and batch)."""
        self._webhooks.delivered(id, successes, failures)

    def progress_event(self, id: int, progress, dialect: str) -> bool:
        """Publish a `progress` event of job `id` with value `progress` to subscribers (no
        state change, no history row: core.events.Feed.note). False when it is gone."""
        e = self._engine
        job = e.jobs.get(id)
        if job is None:
            return False
        e.feed.note(job, "progress", progress, dialect)
        return True
