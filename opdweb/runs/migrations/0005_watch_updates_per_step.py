from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0004_wandb_runs"),
    ]

    operations = [
        migrations.AddField(
            model_name="watchrule",
            name="updates_per_step",
            field=models.PositiveIntegerField(
                default=1, help_text="optimizer updates per logged step (train batch / mini-batch x epochs): budgets "
                                     "over training are calibrated at optimizer steps, so the watch reads the budget "
                                     "at logged step x this"),
        ),
    ]
