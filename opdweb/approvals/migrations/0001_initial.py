"""The approval models, moved here from the configs app (``configs.0004_approvals_move_out``
renamed their tables to ``approvals_*`` and kept every row).  State only: the tables, their
indexes and constraints already exist, under the names pinned below.  The content types
follow the models, so admin history and permissions keep pointing at them."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ["approvalrequest", "teamwebhook", "webhookdelivery"]


def content_types_follow(apps, schema_editor, old="configs", new="approvals"):
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(schema_editor.connection.alias)
    taken = set(content_types.filter(app_label=new, model__in=MOVED).values_list("model", flat=True))
    content_types.filter(app_label=old, model__in=set(MOVED) - taken).update(app_label=new)


def content_types_back(apps, schema_editor):
    content_types_follow(apps, schema_editor, old="approvals", new="configs")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('budgets', '0001_initial'),
        ('configs', '0004_approvals_move_out'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('jobs', '0002_child_jobs'),
        ('teams', '0002_auditentry'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='ApprovalRequest',
                fields=[
                    ('id',
                     models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('checkpoint',
                     models.CharField(help_text='the model path as job configs name it', max_length=1000)),
                    ('requested_at', models.DateTimeField(auto_now_add=True)),
                    ('request_comment', models.TextField(blank=True)),
                    ('state', models.CharField(choices=[('pending', 'Pending'), ('approved', 'Approved'),
                                                        ('rejected', 'Rejected')], default='pending', max_length=10)),
                    ('decided_at', models.DateTimeField(blank=True, null=True)),
                    ('decision_comment', models.TextField(blank=True)),
                    ('checkpoint_hash', models.CharField(blank=True, max_length=64)),
                    ('admission_job', models.ForeignKey(blank=True, null=True,
                                                        on_delete=django.db.models.deletion.PROTECT, related_name='+',
                                                        to='jobs.job')),
                    ('budget', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                                 related_name='+', to='budgets.mismatchbudget')),
                    ('decided_by', models.ForeignKey(blank=True, null=True,
                                                     on_delete=django.db.models.deletion.SET_NULL, related_name='+',
                                                     to=settings.AUTH_USER_MODEL)),
                    ('requested_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL,
                                                       related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('team', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT,
                                               related_name='approval_requests', to='teams.team')),
                    ('config', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT,
                                                 related_name='approval_requests', to='configs.rolloutconfigrecord')),
                ],
                options={
                    'ordering': ['-requested_at'],
                    'indexes': [models.Index(fields=['team', 'state'], name='configs_app_team_id_2f7b83_idx')],
                    'constraints': [models.UniqueConstraint(condition=models.Q(('state', 'pending')),
                                                            fields=('config', 'checkpoint'),
                                                            name='one_pending_request_per_config_and_checkpoint')],
                },
            ),
            migrations.CreateModel(
                name='TeamWebhook',
                fields=[
                    ('id',
                     models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('url', models.URLField(max_length=1000)),
                    ('secret', models.CharField(max_length=200)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('team', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='webhook',
                                                  to='teams.team')),
                ],
            ),
            migrations.CreateModel(
                name='WebhookDelivery',
                fields=[
                    ('id',
                     models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('event', models.CharField(max_length=40)),
                    ('url', models.URLField(max_length=1000)),
                    ('payload', models.JSONField()),
                    ('state', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'),
                                                        ('failed', 'Failed')], default='pending', max_length=10)),
                    ('attempts', models.PositiveIntegerField(default=0)),
                    ('last_status',
                     models.PositiveIntegerField(blank=True, help_text="the receiver's HTTP status", null=True)),
                    ('last_error', models.CharField(blank=True, max_length=500)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('delivered_at', models.DateTimeField(blank=True, null=True)),
                    ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                               related_name='webhook_deliveries', to='teams.team')),
                ],
                options={
                    'verbose_name_plural': 'webhook deliveries',
                    'ordering': ['-created_at', '-id'],
                },
            ),
        ]),
        migrations.RunPython(content_types_follow, content_types_back),
    ]
