from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('teams', '0003_username_unique_case_insensitively'),
    ]

    operations = [
        migrations.AddField(
            model_name='team',
            name='budget_criterion',
            field=models.CharField(
                choices=[('strict', "strict: the upper end of the drop's 95 % interval at most the tolerance"),
                         ('mean', "the paper's: the mean drop at most the tolerance")],
                default='strict', max_length=10),
        ),
    ]
