"""The team's webhook: each approval event is posted as JSON, signed with HMAC-SHA256 of
the exact body under the team's secret, by a Celery task that retries with backoff.

The receiver checks ``X-Opdweb-Signature: sha256=<hex>`` against
``hmac.new(secret, body, sha256).hexdigest()``; ``X-Opdweb-Event`` and
``X-Opdweb-Delivery`` name the event and the delivery (the same on every retry, so a
receiver can drop duplicates).
"""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from opdweb.approvals.models import DeliveryState, TeamWebhook, WebhookDelivery, webhook_fingerprint
from opdweb.approvals.webhook_destinations import ForbiddenDestination, check_destination, post
from opdweb.jobs.broker import BROKER_ERRORS

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def body_of(delivery: WebhookDelivery) -> bytes:
    return json.dumps(delivery.payload, sort_keys=True, separators=(",", ":")).encode()


def queue_event(team, event: str, payload: dict) -> WebhookDelivery | None:
    """Log a delivery of ``event`` to the team's webhook (if it has one) and send it once the
    caller's transaction commits."""
    hook = TeamWebhook.objects.filter(team=team).first()
    if hook is None:
        return None
    delivery = WebhookDelivery.objects.create(team=team, event=event, url=hook.url,
                                              webhook_fingerprint=webhook_fingerprint(hook.url, hook.secret),
                                              payload={"event": event, "team": team.slug, **payload})
    transaction.on_commit(lambda: _send_task(delivery.pk))
    return delivery


def _send_task(delivery_id: int) -> None:
    """A broker that is down loses no event: the delivery stays pending in the log."""
    from opdweb.celery_app import app

    try:
        app.send_task("opdweb.deliver_webhook", args=[delivery_id], queue="cpu")
    except BROKER_ERRORS:
        log.warning("broker unreachable; webhook delivery %s left pending", delivery_id, exc_info=True)


def attempt_delivery(delivery_id: int) -> bool:
    """Post the delivery once and record how it went; True when it needs no more attempts
    (delivered, dropped, given up, or gone).  The row is locked while it is posted, so the
    task and the outbox sweep never send the same delivery at once (the one that finds it
    locked leaves it, and False means "not done yet")."""
    with transaction.atomic():
        delivery = (WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
                    .select_related("team").filter(pk=delivery_id).first())
        if delivery is None:
            return not WebhookDelivery.objects.filter(pk=delivery_id).exists()
        if delivery.state != DeliveryState.PENDING:
            return True
        return _post(delivery)


def do_send_pending_webhooks(now=None) -> list[int]:
    """The outbox sweep (Celery beat, every 15 s): deliveries still pending with no attempt
    ``WEBHOOK_RETRY_SECONDS`` after they were queued lost their task (the broker was down
    when the event happened, or lost the message); post them from here."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.WEBHOOK_RETRY_SECONDS)
    stranded = list(WebhookDelivery.objects.filter(state=DeliveryState.PENDING, attempts=0, created_at__lt=cutoff)
                    .order_by("created_at").values_list("pk", flat=True)[:100])
    for delivery_id in stranded:
        log.info("webhook delivery %s never had its task; sending it from the outbox sweep", delivery_id)
        attempt_delivery(delivery_id)
    return stranded


def _post(delivery: WebhookDelivery) -> bool:
    """One attempt at a locked, pending delivery; True when it needs no more."""
    hook = TeamWebhook.objects.filter(team=delivery.team).first()
    if hook is None or webhook_fingerprint(hook.url, hook.secret) != delivery.webhook_fingerprint:
        # Sent now it would go signed with another secret (or none): a forgery anyone could make.
        delivery.state = DeliveryState.DROPPED
        delivery.last_error = ("not sent: the webhook was removed since this event was queued" if hook is None else
                               "not sent: the webhook's URL or secret changed since this event was queued")
        delivery.save(update_fields=["state", "last_error"])
        return True
    try:  # again at delivery: the name may resolve elsewhere now
        destination = check_destination(delivery.url)
    except ForbiddenDestination as exc:
        delivery.state = DeliveryState.DROPPED
        delivery.last_error = f"not sent: the webhook URL {exc}"[:500]
        delivery.save(update_fields=["state", "last_error"])
        return True
    body = body_of(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "opdweb-webhook/1",
        "X-Opdweb-Event": delivery.event,
        "X-Opdweb-Delivery": str(delivery.pk),
        "X-Opdweb-Signature": signature(hook.secret, body),
    }
    status, error = None, ""
    try:
        status = post(destination, body, headers, TIMEOUT_S)
        if not 200 <= status < 300:
            error = f"the receiver answered {status}" + (" (redirects are not followed)" if 300 <= status < 400
                                                          else "")
    except (OSError, http.client.HTTPException) as exc:
        error = f"could not reach the receiver: {exc}"
    delivered = status is not None and 200 <= status < 300
    delivery.attempts += 1
    delivery.last_status = status
    delivery.last_error = error[:500]
    if delivered:
        delivery.state, delivery.delivered_at = DeliveryState.DELIVERED, timezone.now()
    elif delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        delivery.state = DeliveryState.FAILED
    delivery.save(update_fields=["attempts", "last_status", "last_error", "state", "delivered_at"])
    return delivery.state != DeliveryState.PENDING


def retry_delay(attempts: int) -> float:
    """Seconds before the next attempt: doubling from ``WEBHOOK_RETRY_SECONDS``."""
    return settings.WEBHOOK_RETRY_SECONDS * 2 ** max(attempts - 1, 0)
