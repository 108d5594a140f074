"""A cluster run linked to what it trains under, and its mismatch on the budget's scale.

A run names its approved config with tags, set when it starts or later (MLflow's
``set_tag``, verl / TRL / NeMo-RL run tags, the native client's ``Run(approval=...)``):

- ``opdweb.approval``: the approval's number (``12`` or ``#12``, as exports print it), or
- ``opdweb.config_hash``: the approved config's hash (the ``config_hash`` every export
  carries; its first 12 or more hex digits will do), and
- ``opdweb.checkpoint``: the checkpoint path as approved (needed with a config hash approved
  for several checkpoints; checked against the approval otherwise).

They resolve inside the token's team only, to an approval in state ``approved``, its
budget, and the unit: the BF16 engine's k3 on that checkpoint as the budget's calibration
measured it (else as the approval's admission check did).  A name that resolves to nothing
(unknown, another team's, not approved, another checkpoint) is refused with the reason and
nothing written: a run that thinks it is watched and is not is worse than a run that
fails to start.  A run trains under one approval: naming another later is refused.

Once linked, each point of an exact k3 (:data:`~.metric_map.EXACT_K3_KEYS`; the first such
key the run logs) is also written as :data:`~.metric_map.MULTIPLE_KEY`, its multiple of
the unit, through the same sink at the same step; points logged before the link are
converted when it is made.
"""
from __future__ import annotations

import re

from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.jobs.models import Job
from opdweb.runs import mlflow_errors as errors
from opdweb.runs.metric_map import EXACT_K3_KEYS, MULTIPLE_KEY
from opdweb.runs.mlflow_requests import MetricIn
from opdweb.runs.models import RunLink
from opdweb.runs.points import KeyPoints, metrics_of, series_of, write_new_points
from opdweb.teams import audit
from opdweb.traces.models import TracePoint
from workers.science.kinds import Kind
from workers.science.results import multiple_of

APPROVAL_TAG = "opdweb.approval"
CONFIG_HASH_TAG = "opdweb.config_hash"
CHECKPOINT_TAG = "opdweb.checkpoint"
LINK_TAGS = (APPROVAL_TAG, CONFIG_HASH_TAG, CHECKPOINT_TAG)
MIN_HASH_PREFIX = 12
_APPROVAL_NUMBER = re.compile(r"#?([0-9]{1,18})")
_HEX = re.compile(r"[0-9a-f]+")


def names_a_link(tags: dict[str, str]) -> bool:
    return any(tags.get(key) for key in LINK_TAGS)


def resolve(team, tags: dict[str, str]) -> ApprovalRequest:
    """The approved approval of ``team`` the link tags name; refused (400, the reason) otherwise."""
    number, config_hash = tags.get(APPROVAL_TAG, "").strip(), tags.get(CONFIG_HASH_TAG, "").strip().lower()
    checkpoint = tags.get(CHECKPOINT_TAG, "").strip()
    approvals = ApprovalRequest.objects.filter(team=team).select_related("config", "budget", "admission_job")
    if number:
        match = _APPROVAL_NUMBER.fullmatch(number)
        if match is None:
            raise _refused(f"{APPROVAL_TAG} {number!r} is not an approval's number (as exports print it: 12 or #12)")
        approval = approvals.filter(pk=int(match.group(1))).first()
        if approval is None:
            raise _refused(f"{APPROVAL_TAG}: there is no approval #{match.group(1)} in team {team.slug}")
        if config_hash and not approval.config.config_hash.startswith(config_hash):
            raise _refused(f"{CONFIG_HASH_TAG} {config_hash!r} is not the config of approval #{approval.pk} "
                           f"({approval.config.config_hash[:12]})")
    elif config_hash:
        if len(config_hash) < MIN_HASH_PREFIX or not _HEX.fullmatch(config_hash):
            raise _refused(f"{CONFIG_HASH_TAG} {config_hash[:80]!r} is not a config hash (at least "
                           f"{MIN_HASH_PREFIX} hex digits of the config_hash an export carries)")
        candidates = [a for a in approvals.filter(config__config_hash__startswith=config_hash,
                                                  state=ApprovalState.APPROVED)
                      if not checkpoint or a.checkpoint == checkpoint]
        if not candidates:
            where = f" for checkpoint {checkpoint}" if checkpoint else ""
            raise _refused(f"{CONFIG_HASH_TAG}: no config with hash {config_hash[:64]} is approved{where} in team "
                           f"{team.slug}")
        if len({a.config_id for a in candidates}) > 1:
            raise _refused(f"{CONFIG_HASH_TAG} {config_hash} names more than one config in team {team.slug}: "
                           "give the whole hash")
        if len({a.checkpoint for a in candidates}) > 1:
            raise _refused(f"config {config_hash[:12]} is approved for several checkpoints in team {team.slug} ("
                           + ", ".join(sorted({a.checkpoint for a in candidates})) + f"): name one with "
                           f"{CHECKPOINT_TAG}")
        approval = max(candidates, key=lambda a: (a.decided_at is not None, a.decided_at, a.pk))
    else:
        raise _refused(f"{CHECKPOINT_TAG} names the checkpoint of an approved config: name the config too "
                       f"({APPROVAL_TAG} or {CONFIG_HASH_TAG})")
    if approval.state != ApprovalState.APPROVED:
        raise _refused(f"approval #{approval.pk} is {approval.state}, not approved: a run trains under an approved "
                       "config")
    if checkpoint and checkpoint != approval.checkpoint:
        raise _refused(f"{CHECKPOINT_TAG} {checkpoint[:200]} is not the checkpoint approval #{approval.pk} cleared "
                       f"({approval.checkpoint})")
    if approval.budget is None:
        raise _refused(f"approval #{approval.pk} records no budget to watch the run against")
    return approval


def unit_of(approval: ApprovalRequest) -> tuple[float | None, str]:
    """The BF16 unit's k3 on the approved checkpoint, and where it was read: the budget's
    calibration, else the admission check the approval was granted on."""
    budget = approval.budget
    if budget is not None and budget.metric == "k3" and budget.reference_value is not None:
        return budget.reference_value, f"budget #{budget.pk}'s calibration ({budget.pair})"
    result = approval.admission_job.result if approval.admission_job else None
    if result and result.get("metric") == "k3" and result.get("reference_value") is not None:
        return float(result["reference_value"]), f"admission check #{approval.admission_job_id} ({approval.checkpoint})"
    return None, "no BF16 unit k3 is recorded for this checkpoint: no multiple can be drawn"


def do_link(job: Job, tags: dict[str, str]) -> RunLink | None:
    """Link ``job`` by its ``tags`` (inside the caller's transaction, the job's row held) and
    convert the k3 points it logged before; or keep its link; None where the tags name none.
    Refused where they name nothing of the team's, or another approval than the run's."""
    current = RunLink.objects.filter(job=job).first()
    if not names_a_link(tags):
        return current
    approval = resolve(job.team, tags)
    if current is not None:
        if current.approval_id != approval.pk:
            raise _refused(f"run is linked to approval #{current.approval_id}; a run trains under one approval "
                           f"(start a new run for approval #{approval.pk})")
        return current
    unit, source = unit_of(approval)
    link = RunLink.objects.create(job=job, approval=approval, budget=approval.budget, checkpoint=approval.checkpoint,
                                  unit_k3=unit, unit_source=source)
    earlier = derived_points(link, stored_k3_points(link))
    if earlier:
        write_new_points(job.pk, series_of(earlier))
    audit.record(job.team, job.created_by, audit.RUN_LINKED,
                 f"run #{job.pk} ({job.name}) linked to approval #{approval.pk} (config "
                 f"{approval.config.config_hash[:12]} on {approval.checkpoint}), budget #{approval.budget_id}",
                 subject="job", subject_id=job.pk, approval_id=approval.pk, budget_id=approval.budget_id)
    return link


def derived_series(link: RunLink | None, fresh: list[KeyPoints]) -> list[KeyPoints]:
    """:func:`derived_points` of a batch held per key."""
    return series_of(derived_points(link, metrics_of(fresh, EXACT_K3_KEYS))) if link is not None else []


def derived_points(link: RunLink | None, fresh: list[MetricIn]) -> list[MetricIn]:
    """The multiple of each fresh point of the run's exact k3 key (taking the first such
    key the run logs as that key, saved on the link)."""
    if link is None or link.unit_k3 is None:
        return []
    if not link.k3_key:
        logged = {m.key for m in fresh}
        key = next((k for k in EXACT_K3_KEYS if k in logged), None)
        if key is None:
            return []
        link.k3_key = key
        link.save(update_fields=["k3_key"])
    out = []
    for m in fresh:
        if m.key == link.k3_key:
            multiple = multiple_of(m.value, link.unit_k3)
            if multiple is not None:
                out.append(MetricIn(MULTIPLE_KEY, multiple, m.timestamp, m.step))
    return out


def stored_k3_points(link: RunLink) -> list[MetricIn]:
    """The run's exact k3 points stored before it was linked (of the first exact key it logged)."""
    rows = (TracePoint.objects.filter(series__job_id=link.job_id, series__key__in=EXACT_K3_KEYS)
            .values_list("series__key", "step", "value", "wall_time"))
    by_key: dict[str, list[MetricIn]] = {}
    for key, step, value, wall_time in rows:
        by_key.setdefault(key, []).append(MetricIn(key, value, int(wall_time * 1000), step))
    key = next((k for k in EXACT_K3_KEYS if k in by_key), None)
    return sorted(by_key[key], key=lambda m: m.step) if key else []


def _refused(message: str) -> errors.MlflowRefused:
    return errors.invalid(f"{message}; nothing was written")


def page_context(job: Job, series_keys: list[str]) -> dict:
    """What a run's page adds: its link (approval, budget, unit), the chart guides (the
    budget as a horizontal line on the multiple's chart; "own scale" on metrics that are
    not k3) and the table of the trainer metrics it logs, mapped onto the product's."""
    from opdweb.runs.metric_map import trainer_metric

    if job.kind != Kind.EXTERNAL:
        return {}
    link = RunLink.objects.filter(job=job).select_related("approval__config", "budget").first()
    mapped = [m for m in (trainer_metric(key) for key in series_keys) if m is not None]
    guides: dict[str, dict] = {}
    for m in mapped:
        if not (m.exact and m.metric == "k3"):
            guides[m.key] = {"note": f"{m.trainer} {m.metric}: own scale, not comparable with the budget"}
        else:
            guides[m.key] = {"note": f"{m.trainer}: exact k3 (its multiple is {MULTIPLE_KEY})"}
    if link is not None and link.budget.budget is not None:
        guides[MULTIPLE_KEY] = {"y": link.budget.budget, "label": f"budget {link.budget.budget:g}x BF16 "
                                f"(budget #{link.budget_id}, {link.budget.method})",
                                "note": f"{link.k3_key or 'k3'} / the BF16 unit's k3 {link.unit_k3:.4g}"
                                if link.unit_k3 is not None else "no BF16 unit"}
    return {"run_link": link, "run_metrics": mapped, "chart_guides": guides}
