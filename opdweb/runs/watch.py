"""Watching a linked run against its budget, as its points arrive.

Four rules (:class:`~.models.WatchRule`, the run's own else the team's default else the
defaults): the multiple above the budget at the run's step for ``consecutive_steps``
logged steps in a row; its growth rate (the least-squares slope of the last
:data:`GROWTH_WINDOW` multiples, in x BF16 per 1,000 steps) above ``growth_per_1k_steps``;
the ESS below ``ess_floor``; a running run silent for ``silence_seconds`` (checked by a
periodic task on the control worker, :mod:`.silence`).  The re-check a crossing suggests is
:mod:`.recheck`; the rules' form, :mod:`.watch_rules`.

A rule raises one :class:`~.models.Alert` when it starts to hold and none while it keeps
holding; once it recovers (a multiple at or under the budget, a slope at or under the
threshold, an ESS at or above the floor, a point after the silence) the alert is marked
recovered and the rule may alert again.  Each alert is an audit entry (``run.alert``) and a
``run.alert`` event to the team's webhook (the approvals' signed, retried outbox), in the
batch's own transaction; the budget rule also marks the approval "breached at step S" (the
first such step; its exports say so from then on).

The budget at a step: the link's budget, or, where the team has current budgets of the same
task, method, metric and unit pair at other steps (a budget's step is the training step of
the checkpoint it was calibrated on, ``MismatchBudget.step``), the one interpolation the
training re-check uses too (:func:`workers.science.verdicts.budget_at`: log-linear
between the two that bracket the run's step, flat beyond the first and the last).  A budget's
step counts optimizer updates; a trainer's logged step may be several (``updates_per_step``
of the rule: train batch over mini-batch, times epochs), so the budget is read at the logged
step times it, and an alert says both.  The budget
rule is :data:`~workers.science.verdicts.OVER_FOR_CONSECUTIVE_STEPS`: a cluster run
logs one multiple per step with no interval, so the watch asks for several steps over.
"""
from __future__ import annotations

import math

from django.db import transaction
from django.utils import timezone

from opdweb.approvals.models import ApprovalRequest
from opdweb.approvals.webhooks import queue_event
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs import live
from opdweb.jobs.models import Job
from opdweb.runs.metric_map import ESS_KEYS
from opdweb.runs.mlflow_requests import MetricIn
from opdweb.runs.models import Alert, AlertKind, RunLink, RunWatchState, WatchRule
from opdweb.teams import audit
from workers.science.verdicts import OVER_FOR_CONSECUTIVE_STEPS, budget_at

#: How many recent multiples the growth rate is fitted on.
GROWTH_WINDOW = 10
#: The run states a page shows for a linked run.
WITHIN, BREACHED, SILENT = "within", "breached", "silent"


def rule_for(job: Job) -> WatchRule:
    """The run's own rule, else its team's default, else the defaults (unsaved)."""
    return (WatchRule.objects.filter(job=job).first() or WatchRule.objects.filter(team=job.team_id,
                                                                                     job__isnull=True).first()
            or WatchRule(team_id=job.team_id))


def budget_points(budget: MismatchBudget) -> list[tuple[int, float]]:
    """``(step, budget)`` of the budgets the link's budget is interpolated with: itself and the
    team's current budgets of the same task, method, metric and unit pair, one per step (at
    the link's budget's step, the link's budget)."""
    others = (lineage(budget).filter(budget__isnull=False).exclude(pk=budget.pk).order_by("step", "-created_at")
              .values_list("step", "budget"))
    by_step: dict[int, float] = {}
    for step, value in others:
        by_step.setdefault(step, value)
    if budget.budget is not None:
        by_step[budget.step] = budget.budget
    return sorted(by_step.items())


def lineage(budget: MismatchBudget):
    """The team's current budgets the link's budget is read with (same task, method, metric, unit pair)."""
    return MismatchBudget.objects.filter(team=budget.team_id, task=budget.task, method=budget.method,
                                         metric=budget.metric, unit_engine=budget.unit_engine,
                                         unit_trainer=budget.unit_trainer, superseded_by__isnull=True)


def slope_per_1k(recent: list[list[float]]) -> float | None:
    """Least-squares slope of ``[step, multiple]`` pairs, per 1,000 steps."""
    if len(recent) < 2:
        return None
    n = len(recent)
    mean_s = sum(s for s, _ in recent) / n
    mean_m = sum(m for _, m in recent) / n
    var = sum((s - mean_s) ** 2 for s, _ in recent)
    if var == 0:
        return None
    return 1000 * sum((s - mean_s) * (m - mean_m) for s, m in recent) / var


def state_of(job: Job) -> RunWatchState:
    state, _ = RunWatchState.objects.get_or_create(job=job)
    return state


def do_observe(job: Job, link: RunLink | None, metrics: list[MetricIn]) -> list[Alert]:
    """Evaluate the rules on a batch's points (inside the batch's transaction, the job's row
    held); points at steps the watch has seen already (a resent batch) change nothing."""
    if link is None or not metrics:
        return []
    state = state_of(job)
    rule = rule_for(job)
    raised: list[Alert] = []
    if state.holding.get(AlertKind.SILENCE):
        _recover(state, AlertKind.SILENCE)
    state.last_point_at = timezone.now()
    multiples = [m for m in (_multiples(link, metrics)) if state.last_multiple_step is None
                 or m.step > state.last_multiple_step]
    points = budget_points(link.budget) if multiples else []
    for m in sorted(multiples, key=lambda m: m.step):
        raised += _observe_multiple(job, link, rule, state, points, m)
    ess = sorted((m for m in metrics if m.key in ESS_KEYS
                  and (state.last_ess_step is None or m.step > state.last_ess_step)), key=lambda m: m.step)
    for m in ess:
        state.last_ess_step = m.step
        if rule.ess_floor is None or math.isnan(m.value):
            continue
        if m.value < rule.ess_floor:
            if not state.holding.get(AlertKind.ESS):
                raised.append(raise_alert(job, link, state, AlertKind.ESS, m.step, m.value, rule.ess_floor,
                                     f"ESS {m.value:.4g} below the floor {rule.ess_floor:g} at step {m.step}"))
        elif state.holding.get(AlertKind.ESS):
            _recover(state, AlertKind.ESS)
    state.save()
    return raised


def _multiples(link: RunLink, metrics: list[MetricIn]) -> list[MetricIn]:
    from opdweb.runs.linking import derived_points

    return derived_points(link, [m for m in metrics if m.key == link.k3_key]) if link.k3_key else []


def _observe_multiple(job, link, rule, state, points, m: MetricIn) -> list[Alert]:
    raised: list[Alert] = []
    state.last_multiple_step = m.step
    if math.isnan(m.value):  # says nothing either way: neither a step above nor a recovery
        return raised
    state.last_multiple = m.value
    budget = budget_at(points, m.step * rule.updates_per_step)
    if budget is not None and m.value > budget:
        if state.above_count == 0:
            state.above_since_step = m.step
        state.above_count += 1
        if state.above_count >= max(rule.consecutive_steps, 1) and not state.holding.get(AlertKind.BUDGET):
            step = state.above_since_step
            raised.append(raise_alert(job, link, state, AlertKind.BUDGET, step, m.value, budget,
                                 f"the multiple {m.value:.4g}x BF16 is above the budget {budget:.4g}x BF16 "
                                 f"({link.budget.pair}) since "
                                 f"step {step}{_in_updates(step, rule)} ({state.above_count} steps in a row; rule "
                                 f"{OVER_FOR_CONSECUTIVE_STEPS})"))
            _mark_breached(link, job, step)
    elif budget is not None:
        state.above_count, state.above_since_step = 0, None
        if state.holding.get(AlertKind.BUDGET):
            _recover(state, AlertKind.BUDGET)
    if math.isfinite(m.value):  # a JSON list, and a slope through infinity says nothing
        state.recent = [*state.recent, [m.step, m.value]][-GROWTH_WINDOW:]
    threshold = rule.growth_per_1k_steps
    slope = slope_per_1k(state.recent) if threshold is not None else None
    if slope is not None and threshold is not None:
        if slope > threshold and not state.holding.get(AlertKind.GROWTH):
            raised.append(raise_alert(job, link, state, AlertKind.GROWTH, m.step, slope, threshold,
                                 f"the multiple grows {slope:.4g}x BF16 per 1,000 steps (threshold {threshold:g}) "
                                 f"at step {m.step}"))
        elif slope <= threshold and state.holding.get(AlertKind.GROWTH):
            _recover(state, AlertKind.GROWTH)
    return raised


def _in_updates(step: int, rule: WatchRule) -> str:
    """`` (= N optimizer steps at K updates per step)`` where a logged step is several updates."""
    k = rule.updates_per_step
    return "" if k == 1 else f" (= {step * k:,} optimizer steps at {k} updates per step)"


def raise_alert(job: Job, link: RunLink | None, state: RunWatchState, kind: str, step: int | None, value: float | None,
           threshold: float | None, message: str) -> Alert:
    alert = Alert.objects.create(job=job, kind=kind, step=step, value=value, threshold=threshold,
                                 message=message[:500])
    state.holding = {**state.holding, kind: alert.pk}
    approval_id = link.approval_id if link else None
    audit.record(job.team, None, audit.RUN_ALERT, f"run #{job.pk} ({job.name}): {message}", subject="job",
                 subject_id=job.pk, alert=kind, step=step, approval_id=approval_id)
    queue_event(job.team, "run.alert", {
        "alert": alert.pk, "rule": kind, "job": job.pk, "run": job.name, "step": step, "value": _json_number(value),
        "threshold": threshold, "message": alert.message, "approval": approval_id,
        "unit_pair": link.budget.pair if link else None,  # what the value and threshold are multiples of
        "url": f"/jobs/{job.pk}/"})
    shown = {"id": alert.pk, "kind": kind, "kind_label": AlertKind(kind).label, "step": step,
             "message": alert.message, "created_at": alert.created_at.isoformat()}
    transaction.on_commit(lambda: live.publish_alert(job.pk, shown))
    return alert


def _json_number(value: float | None) -> float | str | None:
    """A value as JSON holds it: infinities as MLflow's strings ("Infinity")."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _recover(state: RunWatchState, kind: str) -> None:
    Alert.objects.filter(pk=state.holding.get(kind), recovered_at__isnull=True).update(recovered_at=timezone.now())
    state.holding = {k: v for k, v in state.holding.items() if k != kind}


def _mark_breached(link: RunLink, job: Job, step: int | None) -> None:
    """The approval's first breach stays: later ones are alerts of their runs."""
    ApprovalRequest.objects.filter(pk=link.approval_id, breached_at_step__isnull=True).update(
        breached_at_step=step, breached_by=job, breached_at=timezone.now())


def runs_under(approval: ApprovalRequest) -> list[dict]:
    """The runs trained under ``approval``, newest first, each with its state: ``silent``
    while its silence alert holds, ``breached`` once it went above the budget (with the
    step), ``within`` otherwise; and its last multiple, with the unit pair it is of (its budget's)."""
    links = (RunLink.objects.filter(approval=approval).select_related("job", "job__watch_state", "budget")
             .order_by("-job__created_at")[:200])
    first_breach = {job_id: step for job_id, step in Alert.objects.filter(
        job__run_link__approval=approval, kind=AlertKind.BUDGET).order_by("-created_at").values_list("job_id", "step")}
    rows = []
    for link in links:
        state = getattr(link.job, "watch_state", None)
        holding = state.holding if state else {}
        status = (SILENT if holding.get(AlertKind.SILENCE) else
                  BREACHED if link.job_id in first_breach else WITHIN)
        rows.append({"job": link.job, "state": status, "breached_at_step": first_breach.get(link.job_id),
                     "last_multiple": state.last_multiple if state else None,
                     "last_step": state.last_multiple_step if state else None, "pair": link.budget.pair})
    return rows


def do_acknowledge(job: Job, alert_id: int, user) -> None:
    Alert.objects.filter(job=job, pk=alert_id, acknowledged_at__isnull=True).update(
        acknowledged_at=timezone.now(), acknowledged_by=user)


def first_breach_step(job: Job) -> int | None:
    """The step the run first went above its budget (its first budget alert), if it did."""
    return Alert.objects.filter(job=job, kind=AlertKind.BUDGET).order_by("created_at", "id").values_list(
        "step", flat=True).first()
