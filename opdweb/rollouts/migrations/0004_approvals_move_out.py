"""ApprovalRequest, TeamWebhook and WebhookDelivery move to the approvals app.

Only Django's record of the models leaves this app (state: DeleteModel); the tables and
their rows stay, renamed to the new app's prefix (database: AlterModelTable).
``approvals.0001_initial`` takes the models up again, state only, on the same tables.
"""
from django.db import migrations

MOVED = ["ApprovalRequest", "TeamWebhook", "WebhookDelivery"]


class Migration(migrations.Migration):

    dependencies = [
        ('configs', '0003_one_pending_request'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.AlterModelTable(name=name, table=f"approvals_{name.lower()}")
                                 for name in MOVED],
            state_operations=[migrations.DeleteModel(name=name) for name in MOVED],
        ),
    ]
