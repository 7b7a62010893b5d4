"""Webhook commands (bunqueue-tcp-protocol.txt "Webhook Commands"; reference 2.9.5
dist/infrastructure/server/handlers/monitoring/webhooks.js): AddWebhook, RemoveWebhook,
ListWebhooks and the reference's SetWebhookEnabled.

Registrations are canonical (core/webhooks.py through the port): any dialect's job events are
delivered (gateway/webhooks.py). Replies as the reference builds them: AddWebhook
{ok, data: {webhookId, url, events, queue, createdAt}}; RemoveWebhook {ok, data: {removed}};
ListWebhooks {ok, data: {webhooks: [{id, url, events, queue, createdAt, lastTriggered,
successCount, failureCount, enabled}], stats: {total, enabled}}}; SetWebhookEnabled
{ok, id: undefined}. Errors: the URL checks' texts (core.webhooks.url_error), `Invalid webhook
event(s): ...`, `Webhook not found`. Times are wall ms sent as float64 (codec rule).
The commands that change registrations answer after the commit that stores them.
"""
from __future__ import annotations

from .jobview import new_id
from .registry import command, err, ok_empty


def _ms(v):
    return None if v is None else float(v)


#: The reference's reply to AddWebhook without `events` once the URL passed (Bun's TypeError
#: text for `command.events.filter(...)` on undefined, returned as the error).
NO_EVENTS = "undefined is not an object (evaluating 'command.events.filter')"
#: ... and with `events` that is not an array (Bun's text for a missing method).
NOT_ARRAY = ("command.events.filter is not a function. (In 'command.events.filter((event) => "
             "!WEBHOOK_EVENTS.includes(event))', 'command.events.filter' is undefined)")


@command("AddWebhook", mutating=True)
def add_webhook(sess, cmd: dict):
    port = sess.port
    try:
        h = port.add_webhook(new_id(port.clock.wall_ms()), cmd.get("url"), cmd.get("events"),
                             cmd.get("queue"), cmd.get("secret"))
    except TypeError:
        if cmd.get("events").__class__ is not list:
            return err(NO_EVENTS if cmd.get("events") is None else NOT_ARRAY)
        raise
    if h.__class__ is str:
        return err(h)
    return {"ok": True, "data": {"webhookId": h.id, "url": h.url, "events": list(h.events),
                                 "queue": h.queue, "createdAt": float(h.created_ms)}}


@command("RemoveWebhook", mutating=True)
def remove_webhook(sess, cmd: dict):
    if not sess.port.remove_webhook(cmd.get("webhookId")):
        return err("Webhook not found")
    return {"ok": True, "data": {"removed": True}}


@command("ListWebhooks")
def list_webhooks(sess, cmd: dict):
    port = sess.port
    hooks = [{"id": h.id, "url": h.url, "events": list(h.events), "queue": h.queue,
              "createdAt": float(h.created_ms), "lastTriggered": _ms(h.last_ms),
              "successCount": h.success, "failureCount": h.failure, "enabled": h.enabled}
             for h in port.webhooks()]
    stats = port.webhook_stats()
    if len(hooks) != stats["total"]:   # a restricted principal sees its own only
        stats = {"total": len(hooks), "enabled": sum(1 for h in hooks if h["enabled"])}
    return {"ok": True, "data": {"webhooks": hooks, "stats": stats}}


@command("SetWebhookEnabled", mutating=True)
def set_webhook_enabled(sess, cmd: dict):
    if not sess.port.set_webhook_enabled(cmd.get("id"), cmd.get("enabled")):
        return err("Webhook not found")
    return ok_empty()
