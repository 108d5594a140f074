"""The product's knowledge of a checkpoint's content: the newest :class:`CheckpointDescription`
a worker's ``describe`` job stored for its reference.  Approvals compare digests with it,
exports read its facts, pages show when it was read; nothing here opens a file."""
from __future__ import annotations

from django.dispatch import receiver

from opdweb.jobs.actions import do_submit_job
from opdweb.jobs.checkpoints import KNOWN_DIGESTS
from opdweb.jobs.estimates import MODEL_CONFIGS
from opdweb.jobs.signals import job_succeeded
from opdweb.refusals import Refused
from opdweb.registry.models import CheckpointDescription, RegisteredModel
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.checkpoints.describe import CheckpointDescription as Described
from workers.science.entrypoints import get_kind
from workers.science.kinds import Kind


def latest(uri: str) -> CheckpointDescription | None:
    return CheckpointDescription.objects.filter(uri=uri).first()


def current_digest(uri: str) -> str | None:
    """The content digest of ``uri`` as last read by a worker; None when never read."""
    described = latest(uri)
    return described.digest if described is not None else None


def current_hashes(uri: str) -> frozenset[str] | None:
    """Every hash that names ``uri``'s content as last read by a worker: its digest, and the
    digest with trainer state that hashes stored before December 2026 have; None when never
    read."""
    described = latest(uri)
    if described is None:
        return None
    return frozenset({described.digest, described.digest_with_trainer_state or described.digest})


KNOWN_DIGESTS.append(current_digest)


def stored_config(uri: str) -> dict | None:
    """``uri``'s config.json as a worker last read it (None when never read)."""
    described = latest(uri)
    return described.config_json if described is not None else None


MODEL_CONFIGS.append(stored_config)


def facts_of(uri: str) -> CheckpointFacts:
    """What the exports may rely on of ``uri``; a 409 when no worker has read it yet."""
    described = latest(uri)
    if described is None:
        raise Refused(f"the checkpoint {uri} has not been read by a worker yet; register it (which reads it) "
                      "or read it again from its registry page", status=409)
    return CheckpointFacts(**described.facts)


def import_note(uri: str) -> str:
    described = latest(uri)
    return described.import_note if described is not None else ""


def queue_describe(*, team, user, uri: str):
    """A ``describe`` job of ``uri`` on a worker (the web process never reads weights)."""
    return do_submit_job(team=team, user=user, kind_name=Kind.DESCRIBE, config={"model": uri},
                         name=f"read {uri}"[:200])


@receiver(job_succeeded)
def store_description(sender, job, **kwargs) -> None:
    if job.kind != Kind.DESCRIBE:
        return
    result = get_kind(Kind.DESCRIBE).validated(job.result)
    assert isinstance(result, Described)
    store(result, job)


def store(result: Described, job=None) -> CheckpointDescription:
    """Keep what a worker read of a checkpoint; its registered models take the digest."""
    described = CheckpointDescription.objects.create(
        uri=result.model, digest=result.digest, digest_with_trainer_state=result.digest_with_trainer_state or "",
        tokenizer_digest=result.tokenizer_digest or "",
        facts=result.facts.model_dump(), files=result.files, bytes=result.bytes, problems=result.problems,
        import_note=result.import_note, config_json=result.config_json, job=job)
    RegisteredModel.objects.filter(path=result.model).update(digest=result.digest)
    return described
