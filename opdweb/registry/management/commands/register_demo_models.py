"""Register the models ``make run`` puts under the data directory in a team, once (a second
run leaves them as they are): the toy student and teacher (``toy/test``), the real
SmolLM2-135M-Instruct imported from the GGUF the product ships (``models/``) and, where a user
installed and imported it (``make gemma``, ``import-gguf --packaged gemma3``), Gemma 3 270M.
One that is missing is skipped, one that cannot be registered is reported: neither is fatal,
the demo starts without it."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from opdweb.refusals import Refused
from opdweb.registry.models import RegisteredModel
from opdweb.registry.registration import register_model
from opdweb.teams.models import Team
from workers.science.packaged import GEMMA3_FOLDER, SMOLLM2_FOLDER

#: (name, path under the data directory, kind)
DEMO_MODELS = (
    ("toy student", "toy/test/student", "student"),
    ("toy teacher", "toy/test/teacher", "teacher"),
    ("SmolLM2-135M-Instruct (real; from GGUF Q4_1, so 4-bit-quantized weights)", f"models/{SMOLLM2_FOLDER}",
     "checkpoint"),
    ("Gemma 3 270M (real, base model, Gemma Terms of Use; from GGUF Q4_K_M, so 4-bit-quantized weights)",
     f"models/{GEMMA3_FOLDER}", "checkpoint"),
)


class Command(BaseCommand):
    help = "Register the toy pair and the real SmolLM2 that make run builds in a team (the demo team by default)."

    def add_arguments(self, parser):
        parser.add_argument("--team", default="demo")

    def handle(self, *args, team: str, **options):
        team_obj = Team.objects.filter(slug=team).first()
        if team_obj is None:
            raise CommandError(f"no team {team!r}")
        for name, relative, kind in DEMO_MODELS:
            path = (settings.DATA_DIR / relative).resolve()
            if not path.is_dir() or RegisteredModel.objects.filter(team=team_obj, path=str(path)).exists():
                continue
            try:
                register_model(team=team_obj, user=None, name=name, path=str(path), kind=kind)
            except Refused as exc:
                self.stderr.write(f"opdweb: {name} is not registered: {exc}")
            else:
                self.stdout.write(f"opdweb: registered {name} in team {team}")
