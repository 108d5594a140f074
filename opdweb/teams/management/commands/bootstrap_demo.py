"""First start: a demo team and an admin user, whose credentials are printed once and
kept in ``var/credentials.txt`` (mode 600), and the toy pair and the real SmolLM2 registered
in the demo team (on every start, once built; registered ones are left as they are)."""
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from opdweb.teams.models import Membership, Role, Team


class Command(BaseCommand):
    help = "Create the demo team and an admin user on first start; register the demo models in the demo team."

    def handle(self, *args, **options):
        self.create_team_and_admin()
        if Team.objects.filter(slug="demo").exists():
            call_command("register_demo_models", team="demo", stdout=self.stdout)

    def create_team_and_admin(self):
        User = get_user_model()
        creds = settings.DATA_DIR / "credentials.txt"
        if User.objects.filter(is_superuser=True).exists():
            where = f" (see {creds})" if creds.exists() else ""
            self.stdout.write(f"opdweb: admin user exists{where}")
            return
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            team, _ = Team.objects.get_or_create(slug="demo", defaults={"name": "Demo team"})
            admin = User.objects.create_superuser("admin", "admin@example.com", password)
            Membership.objects.create(team=team, user=admin, role=Role.ADMIN)
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        creds.write_text(f"username: admin\npassword: {password}\n")
        creds.chmod(0o600)
        self.stdout.write(self.style.SUCCESS(f"opdweb: created team 'demo' and user admin / {password} "
                                             f"(saved in {creds})"))
