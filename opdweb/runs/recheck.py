"""The re-check a budget crossing suggests: an admission job of the approved config on the
run's latest checkpoint (the one its ``opdweb.latest_checkpoint`` tag names), against the
budget of that checkpoint in the link's budget's lineage."""
from __future__ import annotations

from django.conf import settings

from opdweb.jobs.models import Job
from opdweb.refusals import Refused
from opdweb.runs.mlflow_errors import invalid
from opdweb.runs.mlflow_shapes import artifact_path, artifact_uri
from opdweb.runs.models import MlflowRun, RunLink
from opdweb.runs.watch import lineage
from opdweb.teams import audit
from workers.science.checkpoints.uri import BadURI, clean_key
from workers.science.kinds import Kind

#: A run names the checkpoint it trains now with this tag (its latest saved one); the
#: re-check runs there, else on the approved checkpoint.
LATEST_CHECKPOINT_TAG = "opdweb.latest_checkpoint"


def latest_checkpoint(job: Job, link: RunLink) -> str:
    """The checkpoint the run's ``opdweb.latest_checkpoint`` tag names (a path, an ``s3://``
    URI, or one of the run's own uploaded folders: ``mlflow-artifacts:/...``, which is
    where the artifact store keeps it), else the approved one."""
    tagged = (job.config.get("tags", {}).get(LATEST_CHECKPOINT_TAG) or "").strip()
    run = getattr(job, "mlflow_run", None)
    return (as_checkpoint(run, tagged) if run is not None else tagged) if tagged else link.checkpoint


def as_checkpoint(run: MlflowRun, value: str) -> str:
    """A checkpoint the run names: one of its own uploaded folders (``mlflow-artifacts:/...``
    as its ``artifact_uri`` gives, or a path relative to its artifacts) becomes where the
    artifact store keeps it (``s3://...`` on a cluster: a worker fetches it from there, no
    disk shared); any other value is returned as it is (a path or an ``s3://`` URI, checked
    by the sandbox like every config's)."""
    own = artifact_uri(run)
    if value.startswith("mlflow-artifacts:"):
        if value != own and not value.startswith(own + "/"):
            raise invalid(f"{value!r} is not among this run's files ({own}/...)")
        relative = value[len(own):]
    elif value.startswith("artifacts/"):
        relative = value[len("artifacts"):]
    else:
        return value
    try:
        key = clean_key(relative)
    except BadURI as exc:
        raise invalid(f"{value!r}: {exc}") from None
    root = str(settings.OPDWEB_ARTIFACT_ROOT).rstrip("/")
    return f"{root}/{artifact_path(run)}/{key}" if key else f"{root}/{artifact_path(run)}"


def do_recheck(job: Job, user) -> Job:
    """An admission job on the run's latest checkpoint with the approved config: the
    approval's own admission check's config with the checkpoint replaced, against the
    lineage's current budget of that checkpoint (the link's own on the approved one),
    submitted like any job (checked, audited, queued; refused where no budget of that
    checkpoint exists, as every admission check is)."""
    from opdweb.jobs.actions import do_submit_job

    link = RunLink.objects.filter(job=job).select_related("approval__admission_job", "approval__config").first()
    if link is None:
        raise Refused("this run is not linked to an approved config: there is nothing to re-check", status=409)
    admission = link.approval.admission_job
    base = dict(admission.config) if admission is not None and admission.kind == Kind.ADMISSION else {}
    checkpoint = latest_checkpoint(job, link)
    budget = (link.budget if checkpoint == link.budget.checkpoint else
              lineage(link.budget).filter(checkpoint=checkpoint).order_by("-created_at").first() or link.budget)
    config = {**base, "rollout": link.approval.config.config, "model": checkpoint, "budget": budget.pk}
    if not base:
        config["task"], config["reference_engine"] = budget.task, budget.unit_engine
    made = do_submit_job(team=job.team, user=user, kind_name=Kind.ADMISSION, config=config,
                         name=f"re-check of run #{job.pk} on {checkpoint}"[:200])
    audit.record(job.team, user, audit.RUN_RECHECKED, f"re-check of run #{job.pk}: admission job #{made.pk} on "
                 f"{checkpoint}", subject="job", subject_id=job.pk, admission_job_id=made.pk)
    return made
