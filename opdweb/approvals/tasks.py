"""Celery tasks of the approvals app: webhook delivery, retried with backoff, and the outbox
sweep that sends what lost its task."""
from celery import shared_task


@shared_task(name="opdweb.deliver_webhook", bind=True, max_retries=None)
def deliver_webhook(self, delivery_id: int):
    from opdweb.approvals.models import WebhookDelivery
    from opdweb.approvals.webhooks import attempt_delivery, retry_delay

    if not attempt_delivery(delivery_id):
        attempts = WebhookDelivery.objects.values_list("attempts", flat=True).get(pk=delivery_id)
        raise self.retry(countdown=retry_delay(attempts))


@shared_task(name="opdweb.send_pending_webhooks")
def send_pending_webhooks():
    from opdweb.approvals.webhooks import do_send_pending_webhooks

    return do_send_pending_webhooks()
