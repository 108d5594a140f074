"""Whether an approval still holds.  It was granted on one admission check, against one
mismatch budget, of a checkpoint with one content; it lapses when the budget is
recalibrated (a newer budget supersedes it) or the checkpoint's files change."""
from __future__ import annotations

from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.registry.descriptions import current_hashes


def current_checkpoint_hashes(checkpoint: str) -> frozenset[str] | None:
    """The hashes that name the checkpoint's content (weights and config files) as a worker
    last read it (the web process never reads weights): today's digest and the one with
    trainer state that records of before December 2026 hold; None when no worker read it."""
    return current_hashes(checkpoint)


def lapse_reason(approval: ApprovalRequest) -> str | None:
    """None when the approval is current; else why it is not, in a sentence.  Current iff
    approved, its budget's ``superseded_by`` is null, and the checkpoint's content hash
    equals the one recorded when it was approved."""
    if approval.state != ApprovalState.APPROVED:
        return f"approval #{approval.pk} is {approval.state}, not approved"
    if approval.budget is None or approval.budget.superseded_by_id is not None:
        return f"the mismatch budget it was approved against was recalibrated since (approval #{approval.pk} lapsed)"
    current = current_checkpoint_hashes(approval.checkpoint)
    if current is None:
        return (f"no worker has read the checkpoint {approval.checkpoint} yet (a describe job reads it: "
                f"registering it, its registry page, or `manage.py read_checkpoints`); approval #{approval.pk} "
                "holds again once its content matches")
    if approval.checkpoint_hash not in current:
        return f"the checkpoint {approval.checkpoint} changed since it was approved (approval #{approval.pk} lapsed)"
    return None
