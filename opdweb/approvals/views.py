"""Approval pages: a request for a config, the list, an approval with its evidence and
the decision, and the approved config exported for a trainer."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from opdweb.approvals.access import visible_approval
from opdweb.approvals.actions import do_decide, do_request_approval
from opdweb.approvals.currency import lapse_reason
from opdweb.approvals.exporting import (
    checked_export,
    checked_kv_scales,
    export_statuses,
    kv_scale_artifact,
    provenance_of,
    sha256_of,
)
from opdweb.approvals.fallback import fallback_of
from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.exports import FORMATS
from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.rollouts.access import visible_config
from opdweb.rollouts.evidence import budget_of, curve_with_check, latest_admission_check
from opdweb.teams import audit
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from workers.science.kernels import GPU_ARCHITECTURES


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
    exports = export_statuses(approval) if approval.state == ApprovalState.APPROVED else []
    can_decide = (approval.state == ApprovalState.PENDING and approval.viewer_role >= Role.APPROVER
                  and approval.requested_by_id != request.user.pk)
    return render(request, "approvals/detail.html", {
        "approval": approval, "evidence": evidence, "result": evidence.result if evidence else None,
        "budget": budget, "curve": curve_with_check(budget, multiple),
        "can_decide": can_decide,
        "lapse": lapse_reason(approval) if approval.state == ApprovalState.APPROVED else None,
        "exports": exports, "fallback": fallback_of(approval, exports) if exports else None,
        "gpus": GPU_ARCHITECTURES,
        "kv_scales": shipped_kv_scales(approval) if approval.state == ApprovalState.APPROVED else None,
    })


def shipped_kv_scales(approval) -> dict | None:
    """The KV-scale file the approval's exports reference, for the page (None: none does)."""
    try:
        sha256 = provenance_of(approval).kv_scales_sha256
    except Refused:
        return None
    artifact = kv_scale_artifact(approval) if sha256 else None
    return {"artifact": artifact, "approved": (approval.export_hashes or {}).get("kv-scales")} if artifact else None


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


@login_required
@require_POST
@answers_refusals
def approval_export(request, approval_id: int, fmt: str):
    """The approved config for a trainer; refused (409) unless the approval is current, or
    where the GPU architecture asked for (``gpu``, e.g. ``sm_80``) runs another engine.  A
    POST (with the CSRF token): a download is audited, and no other site can make one."""
    approval = visible_approval(request.user, approval_id)
    export = FORMATS.get(fmt)
    if export is None:
        raise Refused(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}", status=404)
    reason = lapse_reason(approval)
    if reason is not None:
        raise Refused(f"only a currently approved config can be exported: {reason}", status=409)
    record = approval.config
    gpu = request.POST.get("gpu", "").strip() or None
    text, checked = checked_export(approval, export, gpu)
    on = f" for {gpu}" if gpu else ""
    audit.record(approval.team, request.user, audit.CONFIG_EXPORTED, f"exported {record.name} as {export.slug}{on}",
                 subject="approval", subject_id=approval.pk, config=record.pk, format=export.slug,
                 **({"gpu": gpu} if gpu else {}))
    response = HttpResponse(text, content_type=f"{export.content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{record.short_hash}-{export.slug}.{export.extension}"'
    response["X-Opdweb-Target"] = export.target
    response["X-Opdweb-Checked"] = export.verified_against if checked else "not checked at export time"
    response["X-Opdweb-Sha256"] = sha256_of(text)
    if gpu:
        response["X-Opdweb-GPU"] = gpu
    return response


@login_required
@require_POST
@answers_refusals
def approval_kv_scales(request, approval_id: int):
    """The KV-scale file an approval's vLLM export references (safetensors, content-hashed);
    a POST, audited, like the exports."""
    approval = visible_approval(request.user, approval_id)
    reason = lapse_reason(approval)
    if reason is not None:
        raise Refused(f"only a currently approved config can be exported: {reason}", status=409)
    artifact = checked_kv_scales(approval)
    record = approval.config
    audit.record(approval.team, request.user, audit.CONFIG_EXPORTED, f"exported {record.name}'s KV scales",
                 subject="approval", subject_id=approval.pk, config=record.pk, format="kv-scales")
    response = HttpResponse(artifact.data, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{artifact.file_name}"'
    response["X-Opdweb-Sha256"] = artifact.sha256
    return response
