"""A delivery remembers which webhook (URL and secret) it was queued for, so a retry after
the webhook changed or went is dropped, not signed with another key."""
import hashlib

from django.db import migrations, models


def fingerprint_pending_deliveries(apps, schema_editor):
    """Deliveries still pending were queued for the team's webhook as it is now, where its
    URL is the one they carry (the only webhook they can have been meant for)."""
    TeamWebhook = apps.get_model("approvals", "TeamWebhook")
    WebhookDelivery = apps.get_model("approvals", "WebhookDelivery")
    for hook in TeamWebhook.objects.all():
        digest = hashlib.sha256(f"{hook.url}\0{hook.secret}".encode()).hexdigest()
        WebhookDelivery.objects.filter(team_id=hook.team_id, url=hook.url, state="pending").update(
            webhook_fingerprint=digest)


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="webhook_fingerprint",
            field=models.CharField(blank=True, help_text="sha256 of the URL and secret it was queued for",
                                   max_length=64),
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="state",
            field=models.CharField(choices=[("pending", "Pending"), ("delivered", "Delivered"), ("failed", "Failed"),
                                            ("dropped", "Dropped")], default="pending", max_length=10),
        ),
        migrations.RunPython(fingerprint_pending_deliveries, migrations.RunPython.noop),
    ]
