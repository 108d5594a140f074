"""An approval's exports: the file each trainer gets, built from the approved config, its
provenance and the checkpoint's facts; each file's sha256 is recorded when the approval is
granted (``export_hashes``), the approval page shows the exact bytes with that hash, and a
download whose bytes are not the approved ones is refused (the product's mapping for that
trainer changed since: ask for a new approval)."""
from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

from opdweb.exports import FORMATS, TRAINERS, ExportFormat, NotExpressible, Provenance
from opdweb.exports import render as render_export
from opdweb.exports.quoting import UnrenderableValue
from opdweb.exports.verification import check as check_export
from opdweb.refusals import Refused
from opdweb.registry.descriptions import facts_of as described_facts
from opdweb.rollouts.evidence import verdict_of
from opdweb.sandbox import OutsideSandbox, confine_model
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig
from workers.science.kernels import GPU_ARCHITECTURES, gpu_refusal
from workers.science.kv_scale_artifact import KvScaleArtifact, NoScales, build_artifact
from workers.science.vllm_args import uses_scale_file

logger = logging.getLogger(__name__)


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


KV_SCALES = "kv-scales"  # the scale file's key in export_hashes


def kv_scale_file(config: dict, admission_job) -> KvScaleArtifact | None:
    """An admission check's calibrated FP8 KV scales as the file an engine loads beside the
    checkpoint, where ``config`` (canonical) ran calibrated scales and the check recorded them."""
    rollout = RolloutConfig.model_validate(config)
    if rollout.kv_cache == "none" or rollout.kv_scales != "calibrated" or admission_job is None:
        return None
    result = admission_job.result or {}
    try:
        return build_artifact(result.get("engine"), result.get("checkpoint_hash"))
    except NoScales:
        return None


def kv_scale_artifact(approval) -> KvScaleArtifact | None:
    """The KV-scale file of an approval's admission check (see :func:`kv_scale_file`)."""
    return kv_scale_file(approval.config.config, approval.admission_job)


def deployment_facts(checkpoint: str, config: dict, admission_job) -> CheckpointFacts:
    """What the exports of ``config`` on ``checkpoint`` (resolved in the model roots) may rely
    on: the checkpoint's facts, and whether the admission check's KV scales ship with them."""
    return replace(described_facts(checkpoint),
                   shipped_kv_scales=kv_scale_file(config, admission_job) is not None)


def breach_note(approval) -> str | None:
    """``breached at step S (run #J)`` once a run trained under ``approval`` went above its budget."""
    if approval.breached_at_step is None:
        return None
    run = f" (run #{approval.breached_by_id})" if approval.breached_by_id else ""
    return f"breached at step {approval.breached_at_step}{run}"


def provenance_of(approval, facts: CheckpointFacts | None = None, *, with_breach: bool = False) -> Provenance:
    """What an export of a decided ``approval`` vouches for (with the hash of the KV-scale
    file where the approved engine runs on it); ``with_breach``: and the breach, if any, as
    the file handed out carries it (the approved bytes, and their hash, are without it)."""
    record, job = approval.config, approval.admission_job
    facts = facts or facts_of(approval)
    artifact = kv_scale_artifact(approval) if facts.shipped_kv_scales else None
    uses_file = artifact is not None and uses_scale_file(RolloutConfig.model_validate(record.config), facts)
    return Provenance(
        config_hash=record.config_hash, config_name=record.name, checkpoint=approval.checkpoint,
        approval_id=approval.pk, approved_by=approval.decided_by.username if approval.decided_by else "?",
        approved_at=approval.decided_at.isoformat(timespec="seconds"), admission_job_id=job.pk,
        verdict=verdict_of(job) or "?", multiple=(job.result or {}).get("multiple"),
        method=approval.budget.method if approval.budget else None,
        kv_scales_sha256=artifact.sha256 if uses_file else None,
        unit_pair=approval.budget.pair if approval.budget and approval.budget.unit_trainer else None,
        breached=breach_note(approval) if with_breach else None,
    )


def facts_of(approval) -> CheckpointFacts:
    """The approved checkpoint's facts, read inside the model roots only, and whether the
    admission check's KV scales can ship with its exports."""
    try:
        checkpoint = confine_model(approval.checkpoint)
    except OutsideSandbox as exc:
        raise Refused(f"the approved checkpoint cannot be read: {exc}", status=409) from None
    return deployment_facts(checkpoint, approval.config.config, approval.admission_job)


def export_text(approval, fmt: ExportFormat, facts: CheckpointFacts | None = None, *,
                with_breach: bool = False) -> str:
    """The file ``fmt`` of ``approval``; a 409 naming every reason where it is refused."""
    facts = facts or facts_of(approval)
    try:
        return render_export(fmt, approval.config.config, provenance_of(approval, facts, with_breach=with_breach),
                             facts)
    except NotExpressible as exc:
        raise Refused(f"this approval cannot be exported for {exc.target}: " + "; ".join(exc.reasons),
                      status=409, details=[{"field": fmt.slug, "message": r} for r in exc.reasons]) from None
    except UnrenderableValue as exc:  # a checkpoint recorded before such paths were refused
        raise Refused(f"this approval cannot be exported as {fmt.slug}: {exc}", status=409) from None


def check_gpu(approval, fmt: ExportFormat, gpu: str | None) -> None:
    """Refuse a trainer's export for a GPU architecture (``sm_80``) whose kernels are not the
    engine admitted (400 for a name that is not an architecture).  Unnamed, the export stands
    for the GPUs it says it is valid on; the plain YAML is no engine."""
    if not gpu:
        return
    if gpu not in GPU_ARCHITECTURES:
        raise Refused(f"gpu: unknown GPU architecture {gpu!r}; one of {', '.join(GPU_ARCHITECTURES)}", status=400,
                      details=[{"field": "gpu", "message": f"one of {', '.join(GPU_ARCHITECTURES)}"}])
    reason = gpu_refusal(RolloutConfig.model_validate(approval.config.config), gpu) if fmt.slug in TRAINERS else None
    if reason:
        raise Refused(f"this approval cannot be exported for {fmt.target} on {gpu}: {reason}", status=409,
                      details=[{"field": "gpu", "message": reason}])


def checked_export(approval, fmt: ExportFormat, gpu: str | None = None) -> tuple[str, bool]:
    """The file to hand out, and whether its trainer's loader checked it here: refused (409)
    when it fails that check, is not the file that was approved, or is asked for a GPU
    (``gpu``) that runs another engine.  Once a run trained under the approval breached its
    budget, the file handed out is the approved one with the breach in its provenance
    (``breached``, or the comment line), checked as approved without it."""
    check_gpu(approval, fmt, gpu)
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
    if approval.breached_at_step is not None:
        text = export_text(approval, fmt, with_breach=True)
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
                         "approved": (approval.export_hashes or {}).get(fmt.slug), "trainer": fmt.slug in TRAINERS})
    return statuses


def approved_hashes(approval) -> dict[str, str]:
    """Per format the approval exports, the sha256 of its file, and of the KV-scale file an
    export references (recorded at the decision)."""
    hashes = {status["format"].slug: status["sha256"] for status in export_statuses(approval) if status["sha256"]}
    try:
        scales = provenance_of(approval).kv_scales_sha256
    except Refused:
        scales = None
    if scales:
        hashes[KV_SCALES] = scales
    return hashes


def checked_kv_scales(approval) -> KvScaleArtifact:
    """The KV-scale file an export of ``approval`` references: 404 where none does, 409 where
    it is not the file approved."""
    artifact = kv_scale_artifact(approval)
    if artifact is None or provenance_of(approval).kv_scales_sha256 != artifact.sha256:
        raise Refused("no export of this approval ships a KV-scale file: the approved config runs no calibrated "
                      "FP8 KV scales from a file (see the exports' reasons)", status=404)
    approved = (approval.export_hashes or {}).get(KV_SCALES)
    if approval.export_hashes and approved != artifact.sha256:
        raise Refused(f"this KV-scale file is not the one approved in #{approval.pk}; request a new approval",
                      status=409)
    return artifact
