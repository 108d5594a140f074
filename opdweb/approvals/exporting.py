"""An approval's exports: the file each trainer gets, built from the approved config, its
provenance and the checkpoint's facts; each file's sha256 is recorded when the approval is
granted (``export_hashes``), the approval page shows the exact bytes with that hash, and a
download whose bytes are not the approved ones is refused (the product's mapping for that
trainer changed since: ask for a new approval)."""
from __future__ import annotations

import hashlib
import logging

from opdweb.exports import FORMATS, TRAINERS, ExportFormat, NotExpressible, Provenance
from opdweb.exports import render as render_export
from opdweb.exports.quoting import UnrenderableValue
from opdweb.exports.verification import check as check_export
from opdweb.refusals import Refused
from opdweb.rollouts.evidence import verdict_of
from opdweb.sandbox import OutsideSandbox, confine_model
from workers.science.checkpoint_facts import CheckpointFacts, read_checkpoint_facts

logger = logging.getLogger(__name__)


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def provenance_of(approval) -> Provenance:
    """What an export of a decided ``approval`` vouches for."""
    record, job = approval.config, approval.admission_job
    return Provenance(
        config_hash=record.config_hash, config_name=record.name, checkpoint=approval.checkpoint,
        approval_id=approval.pk, approved_by=approval.decided_by.username if approval.decided_by else "?",
        approved_at=approval.decided_at.isoformat(timespec="seconds"), admission_job_id=job.pk,
        verdict=verdict_of(job) or "?", multiple=(job.result or {}).get("multiple"),
        method=approval.budget.method if approval.budget else None,
    )


def facts_of(approval) -> CheckpointFacts:
    """The approved checkpoint's facts, read inside the model roots only."""
    try:
        return read_checkpoint_facts(confine_model(approval.checkpoint))
    except OutsideSandbox as exc:
        raise Refused(f"the approved checkpoint cannot be read: {exc}", status=409) from None


def export_text(approval, fmt: ExportFormat, facts: CheckpointFacts | None = None) -> str:
    """The file ``fmt`` of ``approval``; a 409 naming every reason where it is refused."""
    try:
        return render_export(fmt, approval.config.config, provenance_of(approval), facts or facts_of(approval))
    except NotExpressible as exc:
        raise Refused(f"this approval cannot be exported for {exc.target}: " + "; ".join(exc.reasons),
                      status=409, details=[{"field": fmt.slug, "message": r} for r in exc.reasons]) from None
    except UnrenderableValue as exc:  # a checkpoint recorded before such paths were refused
        raise Refused(f"this approval cannot be exported as {fmt.slug}: {exc}", status=409) from None


def checked_export(approval, fmt: ExportFormat) -> tuple[str, bool]:
    """The file to hand out, and whether its trainer's loader checked it here: refused (409)
    when it fails that check or is not the file that was approved."""
    text = export_text(approval, fmt)
    problems = check_export(fmt.slug, text)
    if problems:  # the product wrote a file its trainer refuses: say so rather than hand it out
        logger.error("export %s of approval %s fails its check: %s", fmt.slug, approval.pk, problems)
        raise Refused(f"this export fails its check against {fmt.verified_against}: " + "; ".join(problems),
                      status=409)
    approved = approval.export_hashes or {}
    if approved and approved.get(fmt.slug) != sha256_of(text):
        raise Refused(f"this {fmt.slug} export is not the file approved in #{approval.pk} (the product's "
                      f"mapping for {fmt.target} changed since); request a new approval", status=409)
    return text, problems is not None


def export_statuses(approval) -> list[dict]:
    """Per format: the exact file and its sha256, or every reason it is refused."""
    try:
        facts = facts_of(approval)
    except Refused as exc:
        return [{"format": fmt, "refused": [str(exc)], "text": None, "sha256": None} for fmt in FORMATS.values()]
    statuses = []
    for fmt in FORMATS.values():
        try:
            text = export_text(approval, fmt, facts)
        except Refused as exc:
            statuses.append({"format": fmt, "refused": [d["message"] for d in exc.details] or [str(exc)],
                             "text": None, "sha256": None, "trainer": fmt.slug in TRAINERS})
            continue
        statuses.append({"format": fmt, "refused": None, "text": text, "sha256": sha256_of(text),
                         "approved": (approval.export_hashes or {}).get(fmt.slug)})
    return statuses


def approved_hashes(approval) -> dict[str, str]:
    """Per format the approval exports, the sha256 of its file (recorded at the decision)."""
    return {status["format"].slug: status["sha256"] for status in export_statuses(approval) if status["sha256"]}
