from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('budgets', '0002_unit_trainer'),
    ]

    operations = [
        migrations.AddField(
            model_name='mismatchbudget',
            name='source',
            field=models.CharField(blank=True, max_length=20, null=True),
        ),
        migrations.AddField(
            model_name='mismatchbudget',
            name='shown_to_transfer',
            field=models.JSONField(default=list),
        ),
        migrations.AddField(
            model_name='mismatchbudget',
            name='transfer',
            field=models.JSONField(default=list),
        ),
    ]
