"""What people do to approvals.  ``check_*`` validates, ``do_*`` acts; every action writes
its audit entry and queues its webhook in the same transaction."""
from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from opdweb.approvals import webhooks
from opdweb.approvals.currency import current_checkpoint_hashes
from opdweb.approvals.exporting import approved_hashes, deployment_facts
from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.refusals import Refused
from opdweb.rollouts.evidence import budget_of, latest_admission_check, verdict_of
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.rollouts.submission import check_targets
from opdweb.sandbox import OutsideSandbox, confine_model
from opdweb.teams import audit


def _event_payload(approval: ApprovalRequest) -> dict:
    return {
        "approval": approval.pk, "state": approval.state, "checkpoint": approval.checkpoint,
        "config": {"id": approval.config_id, "name": approval.config.name, "hash": approval.config.config_hash},
        "requested_by": getattr(approval.requested_by, "username", None),
        "decided_by": getattr(approval.decided_by, "username", None),
        "comment": approval.decision_comment if approval.decided_at else approval.request_comment,
        "admission_job": approval.admission_job_id,
        "targets": approval.config.config.get("targets", []),  # the trainers whose engine was admitted
    }


def check_checkpoint(value: str) -> str:
    """The checkpoint as job configs name it (resolved inside the model roots)."""
    try:
        return confine_model((value or "").strip())
    except OutsideSandbox as exc:
        raise Refused(f"checkpoint: {exc}", details=[{"field": "checkpoint", "message": str(exc)}]) from None


def do_request_approval(*, record: RolloutConfigRecord, user, checkpoint: str, comment: str = "") -> ApprovalRequest:
    checkpoint = check_checkpoint(checkpoint)
    # The trainers the config names must build it on this checkpoint (its layers, its KV scales,
    # or the scale file of the admission check an approval would rest on).
    facts = deployment_facts(checkpoint, record.config, latest_admission_check(record, checkpoint))
    check_targets(record.config, facts, status=409)
    try:
        with transaction.atomic():
            approval = ApprovalRequest.objects.create(team=record.team, config=record, checkpoint=checkpoint,
                                                      requested_by=user, request_comment=comment[:5000])
            audit.record(record.team, user, audit.APPROVAL_REQUESTED,
                         f"requested approval of {record.name} for {checkpoint}", subject="approval",
                         subject_id=approval.pk, config=record.pk)
            webhooks.queue_event(record.team, "approval.requested", _event_payload(approval))
    except IntegrityError:  # one pending request per config and checkpoint
        pending = ApprovalRequest.objects.filter(config=record, checkpoint=checkpoint,
                                                 state=ApprovalState.PENDING).first()
        raise Refused(f"approval of this config for {checkpoint} is already requested "
                      f"(#{pending.pk if pending else '?'})", status=409) from None
    return approval


def check_evidence(approval: ApprovalRequest):
    """The admission job and budget an approval would rest on, or a 409 saying why this
    config cannot be approved for this checkpoint now."""
    job = latest_admission_check(approval.config, approval.checkpoint)
    if job is None:
        raise Refused("no admission check of this config on this checkpoint has succeeded; run one first", status=409)
    verdict = verdict_of(job)
    if verdict != "pass":
        raise Refused(f"the latest admission check (job #{job.pk}) gives {verdict or 'no verdict'}; "
                      "approval needs a pass", status=409)
    budget = budget_of(job)
    if budget is None:
        raise Refused(f"admission check #{job.pk} names no mismatch budget of this team", status=409)
    if budget.superseded_by_id is not None:
        raise Refused(f"the budget admission check #{job.pk} used has been recalibrated; "
                      "run the admission check again", status=409)
    recorded = job.result.get("checkpoint_hash") or ""
    if recorded not in (current_checkpoint_hashes(approval.checkpoint) or ()):
        raise Refused(f"the checkpoint changed since admission check #{job.pk}; run it again", status=409)
    return job, budget, recorded


def do_decide(*, approval_id: int, user, approve: bool, comment: str = "") -> ApprovalRequest:
    """Approve (on a passing admission check) or reject a pending request, once."""
    with transaction.atomic():
        approval = ApprovalRequest.objects.select_for_update().select_related("config", "team").get(pk=approval_id)
        if approval.state != ApprovalState.PENDING:
            raise Refused(f"approval request #{approval.pk} was already decided ({approval.state})", status=409)
        if approval.requested_by_id == user.pk:
            raise Refused("you cannot decide your own approval request; ask another approver", status=403)
        if approve:
            approval.admission_job, approval.budget, approval.checkpoint_hash = check_evidence(approval)
        approval.state = ApprovalState.APPROVED if approve else ApprovalState.REJECTED
        approval.decided_by, approval.decided_at = user, timezone.now()
        approval.decision_comment = comment[:5000]
        if approve:  # the files each trainer gets, as approved: a later download must be these bytes
            approval.export_hashes = approved_hashes(approval)
        approval.save()
        audit.record(approval.team, user, audit.APPROVAL_APPROVED if approve else audit.APPROVAL_REJECTED,
                     f"{approval.state} {approval.config.name} for {approval.checkpoint}",
                     subject="approval", subject_id=approval.pk, config=approval.config_id,
                     comment=approval.decision_comment, admission_job=approval.admission_job_id)
        webhooks.queue_event(approval.team, f"approval.{approval.state}", _event_payload(approval))
    return approval
