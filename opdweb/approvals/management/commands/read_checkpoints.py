"""Queue a worker's ``describe`` job for every checkpoint the product relies on but no worker
has read: the paths of registered models, of approvals and of mismatch budgets.  Run at
every ``make run`` (the launcher calls it after migrating), so an installation upgraded to
checkpoints-by-reference learns its digests without anyone re-registering; until a
checkpoint is read, its approvals say so and do not export.  A checkpoint read before
December 2026 is read again: its digest then included trainer state (optimizer, scheduler),
and the one a job computes today does not.  A checkpoint already read, or with a describe
job queued or running, is left alone: a second run queues nothing."""
from pathlib import Path

from django.core.management.base import BaseCommand

from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job, JobState
from opdweb.refusals import Refused
from opdweb.registry.descriptions import queue_describe
from opdweb.registry.models import CheckpointDescription, RegisteredModel
from workers.science.checkpoints.uri import is_remote
from workers.science.kinds import Kind


def relied_on() -> dict[str, tuple]:
    """Each checkpoint named by a registered model, an approved request or a budget: the
    (team, user) of the first that names it."""
    named: dict[str, tuple] = {}
    for model in RegisteredModel.objects.select_related("team", "created_by").order_by("pk"):
        named.setdefault(model.path, (model.team, model.created_by))
    approvals = ApprovalRequest.objects.filter(state=ApprovalState.APPROVED).select_related("team", "requested_by")
    for approval in approvals.order_by("pk"):
        named.setdefault(approval.checkpoint, (approval.team, approval.requested_by))
    for budget in MismatchBudget.objects.select_related("team", "created_by").order_by("pk"):
        named.setdefault(budget.checkpoint, (budget.team, budget.created_by))
    return named


def unread(named: dict[str, tuple]) -> dict[str, tuple]:
    read = set(CheckpointDescription.objects.filter(uri__in=list(named)).exclude(digest_with_trainer_state="")
               .values_list("uri", flat=True))  # blank: read before trainer state was left out
    reading = set(Job.objects.filter(kind=Kind.DESCRIBE, state__in=[JobState.QUEUED, JobState.RUNNING])
                  .values_list("config__model", flat=True))
    return {uri: who for uri, who in named.items()
            if uri not in read and uri not in reading and (is_remote(uri) or Path(uri).is_dir())}


class Command(BaseCommand):
    help = "Queue a describe job for each registered, approved or calibrated checkpoint no worker has read."

    def handle(self, *args, **options):
        say = self.stdout.write if options["verbosity"] > 0 else (lambda _: None)
        queued = 0
        for uri, (team, user) in unread(relied_on()).items():
            try:
                job = queue_describe(team=team, user=user, uri=uri)
            except Refused as exc:  # outside today's sandbox, or a hub id: nothing to read
                self.stderr.write(f"not read: {uri}: {exc}")
                continue
            queued += 1
            say(f"reading {uri} (job #{job.pk}, team {team.slug})")
        say(f"{queued} checkpoint(s) queued to be read")
