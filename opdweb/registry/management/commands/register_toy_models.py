"""Register the toy student and teacher that ``make run`` builds (under the data
directory's ``toy/test``) in a team, once: a second run leaves them as they are.  One that
cannot be registered is reported, not fatal: the demo starts without it."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from opdweb.refusals import Refused
from opdweb.registry.models import RegisteredModel
from opdweb.registry.registration import register_model
from opdweb.teams.models import Team

TOY_PAIR = (("toy student", "student"), ("toy teacher", "teacher"))


class Command(BaseCommand):
    help = "Register the toy test student and teacher in a team (the demo team by default)."

    def add_arguments(self, parser):
        parser.add_argument("--team", default="demo")

    def handle(self, *args, team: str, **options):
        team_obj = Team.objects.filter(slug=team).first()
        if team_obj is None:
            raise CommandError(f"no team {team!r}")
        for name, kind in TOY_PAIR:
            path = (settings.DATA_DIR / "toy" / "test" / kind).resolve()
            if RegisteredModel.objects.filter(team=team_obj, path=str(path)).exists():
                continue
            try:
                register_model(team=team_obj, user=None, name=name, path=str(path), kind=kind)
            except Refused as exc:
                self.stderr.write(f"opdweb: the toy {kind} is not registered: {exc}")
            else:
                self.stdout.write(f"opdweb: registered the {name} in team {team}")
