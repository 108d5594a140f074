"""Celery tasks of the approvals app: webhook delivery, retried with backoff."""
from celery import shared_task


@shared_task(name="opdweb.deliver_webhook", bind=True, max_retries=None)
def deliver_webhook(self, delivery_id: int):
    from opdweb.approvals.models import WebhookDelivery
    from opdweb.approvals.webhooks import attempt_delivery, retry_delay

    if not attempt_delivery(delivery_id):
        attempts = WebhookDelivery.objects.values_list("attempts", flat=True).get(pk=delivery_id)
        raise self.retry(countdown=retry_delay(attempts))
