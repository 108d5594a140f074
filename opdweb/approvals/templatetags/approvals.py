"""``{% approvals_of record as approvals %}``: a config's approvals for its page, which the
rollouts app shows without importing this one."""
from __future__ import annotations

from django import template

from opdweb.approvals.currency import lapse_reason
from opdweb.approvals.models import ApprovalRequest, ApprovalState

register = template.Library()


@register.simple_tag
def approvals_of(record) -> list[ApprovalRequest]:
    """The config's approvals, each with ``lapse``: why an approved one no longer holds, or None."""
    approvals = list(record.approval_requests.select_related("requested_by", "decided_by", "budget"))
    for approval in approvals:
        approval.lapse = lapse_reason(approval) if approval.state == ApprovalState.APPROVED else None
    return approvals

