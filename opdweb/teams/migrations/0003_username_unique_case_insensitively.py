"""User names are unique whatever their case (``race1`` and ``RACE1`` are one name), held
by the database so concurrent invitations cannot both make an account.  Django's user
model is not ours to give a Meta constraint, so the index is made here, by SQL."""
from django.conf import settings
from django.db import migrations

INDEX = "auth_user_username_lower_uniq"


class Migration(migrations.Migration):

    dependencies = [
        ('teams', '0002_auditentry'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunSQL(
            f"CREATE UNIQUE INDEX {INDEX} ON auth_user (lower(username))",
            reverse_sql=f"DROP INDEX IF EXISTS {INDEX}",
        ),
    ]
