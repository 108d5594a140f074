"""Approval pages: a request for a config, the list, an approval with its evidence and
the decision, and the approved config exported for a trainer."""
from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from opdweb.approvals.access import visible_approval
from opdweb.approvals.actions import do_decide, do_request_approval
from opdweb.approvals.currency import lapse_reason
from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.exports import FORMATS, NotExpressible, Provenance
from opdweb.exports import render as render_export
from opdweb.exports.quoting import UnrenderableValue
from opdweb.exports.verification import check as check_export
from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.rollouts.access import visible_config
from opdweb.rollouts.evidence import budget_of, curve_with_check, latest_admission_check, verdict_of
from opdweb.sandbox import OutsideSandbox, confine_model
from opdweb.teams import audit
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from workers.science.checkpoint_facts import CheckpointFacts, read_checkpoint_facts

logger = logging.getLogger(__name__)


@login_required
@require_POST
@answers_refusals
def approval_request(request, config_id: int):
    record = visible_config(request.user, config_id, Role.MEMBER)
    approval = do_request_approval(record=record, user=request.user, checkpoint=request.POST.get("checkpoint", ""),
                                   comment=request.POST.get("comment", ""))
    messages.info(request, f"approval requested (#{approval.pk}); an approver of team {record.team.slug} decides")
    return redirect("approvals:detail", approval_id=approval.pk)


@login_required
def approval_list(request):
    approvals = (ApprovalRequest.objects.filter(team__in=teams_of(request.user))
                 .select_related("team", "config", "requested_by", "decided_by"))
    state = request.GET.get("state")
    if state in ApprovalState.values:
        approvals = approvals.filter(state=state)
    return render(request, "approvals/list.html",
                  {"approvals": approvals[:500], "states": ApprovalState.values, "state": state})


@login_required
def approval_detail(request, approval_id: int):
    approval = visible_approval(request.user, approval_id)
    evidence = approval.admission_job if approval.state == ApprovalState.APPROVED else \
        latest_admission_check(approval.config, approval.checkpoint)
    budget = approval.budget if approval.state == ApprovalState.APPROVED else budget_of(evidence)
    multiple = (evidence.result or {}).get("multiple") if evidence else None
    can_decide = (approval.state == ApprovalState.PENDING and approval.viewer_role >= Role.APPROVER
                  and approval.requested_by_id != request.user.pk)
    return render(request, "approvals/detail.html", {
        "approval": approval, "evidence": evidence, "result": evidence.result if evidence else None,
        "budget": budget, "curve": curve_with_check(budget, multiple),
        "can_decide": can_decide,
        "lapse": lapse_reason(approval) if approval.state == ApprovalState.APPROVED else None,
        "exports": export_statuses(approval) if approval.state == ApprovalState.APPROVED else [],
    })


@login_required
@require_POST
@answers_refusals
def approval_decide(request, approval_id: int):
    approval = visible_approval(request.user, approval_id, Role.APPROVER)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        raise Refused("decision must be approve or reject")
    approval = do_decide(approval_id=approval.pk, user=request.user, approve=decision == "approve",
                         comment=request.POST.get("comment", ""))
    messages.info(request, f"approval request #{approval.pk} {approval.state}")
    return redirect("approvals:detail", approval_id=approval.pk)


def export_provenance(approval) -> Provenance:
    """What an export of ``approval`` vouches for."""
    record, job = approval.config, approval.admission_job
    return Provenance(
        config_hash=record.config_hash, config_name=record.name, checkpoint=approval.checkpoint,
        approval_id=approval.pk, approved_by=approval.decided_by.username if approval.decided_by else "?",
        approved_at=approval.decided_at.isoformat(timespec="seconds"), admission_job_id=job.pk,
        verdict=verdict_of(job) or "?", multiple=(job.result or {}).get("multiple"),
        method=approval.budget.method if approval.budget else None,
    )


def checkpoint_facts(approval) -> CheckpointFacts:
    """The approved checkpoint's facts, read inside the model roots only."""
    try:
        return read_checkpoint_facts(confine_model(approval.checkpoint))
    except OutsideSandbox as exc:
        raise Refused(f"the approved checkpoint cannot be read: {exc}", status=409) from None


def export_statuses(approval) -> list[dict]:
    """Per format: exported, or refused with every difference; what the file is checked against."""
    provenance = export_provenance(approval)
    try:
        facts = checkpoint_facts(approval)
    except Refused as exc:
        return [{"format": fmt, "refused": [str(exc)]} for fmt in FORMATS.values()]
    statuses = []
    for fmt in FORMATS.values():
        try:
            render_export(fmt, approval.config.config, provenance, facts)
            refused = None
        except NotExpressible as exc:
            refused = exc.reasons
        except UnrenderableValue as exc:
            refused = [str(exc)]
        statuses.append({"format": fmt, "refused": refused})
    return statuses


@login_required
@require_POST
@answers_refusals
def approval_export(request, approval_id: int, fmt: str):
    """The approved config for a trainer; refused (409) unless the approval is current.  A
    POST (with the CSRF token): a download is audited, and no other site can make one."""
    approval = visible_approval(request.user, approval_id)
    export = FORMATS.get(fmt)
    if export is None:
        raise Refused(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}", status=404)
    reason = lapse_reason(approval)
    if reason is not None:
        raise Refused(f"only a currently approved config can be exported: {reason}", status=409)
    record = approval.config
    try:
        text = render_export(export, record.config, export_provenance(approval), checkpoint_facts(approval))
    except NotExpressible as exc:
        raise Refused(f"this approval cannot be exported for {exc.target}: " + "; ".join(exc.reasons),
                      status=409) from None
    except UnrenderableValue as exc:  # a checkpoint recorded before such paths were refused
        raise Refused(f"this approval cannot be exported as {export.slug}: {exc}", status=409) from None
    problems = check_export(export.slug, text)
    if problems:  # the product wrote a file its trainer refuses: say so rather than hand it out
        logger.error("export %s of approval %s fails its check: %s", export.slug, approval.pk, problems)
        raise Refused(f"this export fails its check against {export.verified_against}: " + "; ".join(problems),
                      status=409)
    audit.record(approval.team, request.user, audit.CONFIG_EXPORTED, f"exported {record.name} as {export.slug}",
                 subject="approval", subject_id=approval.pk, config=record.pk, format=export.slug)
    response = HttpResponse(text, content_type=f"{export.content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{record.short_hash}-{export.slug}.{export.extension}"'
    response["X-Opdweb-Target"] = export.target
    response["X-Opdweb-Checked"] = export.verified_against if problems is not None else "not checked at export time"
    return response
