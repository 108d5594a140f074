"""The approval models moved from the configs app to the approvals app: a database made
before the move keeps every row, constraint and content type through ``migrate``."""
import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

# teams held back too: its later columns (budget_criterion) have no database default, and the
# historical models of this point write no value for them
BEFORE = [("approvals", None), ("configs", "0003_one_pending_request"),
          ("teams", "0003_username_unique_case_insensitively")]
AFTER = [("configs", "0004_approvals_move_out"), ("approvals", "0001_initial")]


def migrated_to(targets):
    """The historical apps after migrating the database to ``targets``."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def migrate_to_latest():
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def old_rows(apps) -> dict:
    """One row of each moved model, written under the configs app as a ``make run`` user had them."""
    user = apps.get_model("auth", "User").objects.create(username="ann")
    team = apps.get_model("teams", "Team").objects.create(name="Vision", slug="vision")
    record = apps.get_model("configs", "RolloutConfigRecord").objects.create(
        team=team, name="fp8", config={"weights": "fp8_e4m3"}, config_hash="ab" * 32, created_by=user)
    approval = apps.get_model("configs", "ApprovalRequest").objects.create(
        team=team, config=record, checkpoint="/models/student", requested_by=user, request_comment="please")
    apps.get_model("configs", "TeamWebhook").objects.create(team=team, url="https://hooks.example/x", secret="s" * 16)
    apps.get_model("configs", "WebhookDelivery").objects.create(
        team=team, event="approval.requested", url="https://hooks.example/x", payload={"approval": approval.pk})
    content_type, _ = ContentType.objects.get_or_create(app_label="configs", model="approvalrequest")
    return {"record": record.pk, "approval": approval.pk, "content_type": content_type.pk}


@pytest.mark.django_db(transaction=True)
def test_it_keeps_every_approval_webhook_and_delivery_row_through_the_move():
    try:
        before = old_rows(migrated_to(BEFORE))
        apps = migrated_to(AFTER)
        approval = apps.get_model("approvals", "ApprovalRequest").objects.get(pk=before["approval"])
        assert (approval.config_id, approval.checkpoint, approval.request_comment, approval.state) == (
            before["record"], "/models/student", "please", "pending")
        assert approval.requested_by.username == "ann" and approval.team.slug == "vision"
        hook = apps.get_model("approvals", "TeamWebhook").objects.get()
        assert hook.url == "https://hooks.example/x"
        delivery = apps.get_model("approvals", "WebhookDelivery").objects.get()
        assert delivery.payload == {"approval": approval.pk} and delivery.state == "pending"
        content_type = ContentType.objects.get(pk=before["content_type"])
        assert (content_type.app_label, content_type.model) == ("approvals", "approvalrequest")
        with connection.cursor() as cursor:
            tables = set(connection.introspection.table_names(cursor))
        assert {"approvals_approvalrequest", "approvals_teamwebhook", "approvals_webhookdelivery"} <= tables
        assert not {"configs_approvalrequest", "configs_teamwebhook", "configs_webhookdelivery"} & tables
        # The one-pending-request constraint came along with the table.
        with pytest.raises(IntegrityError), transaction.atomic():
            apps.get_model("approvals", "ApprovalRequest").objects.create(
                team_id=approval.team_id, config_id=approval.config_id, checkpoint="/models/student")
    finally:
        migrate_to_latest()
