"""The silence rule: a running linked run whose last point (or start, before any) is older
than its rule's ``silence_seconds`` alerts once (:mod:`.watch` raises it and marks it
recovered at the run's next point).  A periodic task on the control worker runs it."""
from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from opdweb.jobs.models import Job, JobState
from opdweb.runs.models import AlertKind, RunLink
from opdweb.runs.watch import raise_alert, rule_for, state_of
from workers.science.kinds import Kind


def do_check_silent_runs(now=None) -> list[int]:
    """The periodic check (Celery beat on the control worker): a running linked run whose
    last point (or start, before any) is older than its rule's ``silence_seconds`` alerts once."""
    now = now or timezone.now()
    raised = []
    links = RunLink.objects.filter(job__kind=Kind.EXTERNAL, job__state=JobState.RUNNING).select_related("job")
    for link in links[:1000]:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=link.job_id)
            if job.state != JobState.RUNNING:
                continue
            rule = rule_for(job)
            if rule.silence_seconds is None:
                continue
            state = state_of(job)
            last = state.last_point_at or job.started_at or job.created_at
            if state.holding.get(AlertKind.SILENCE) or now - last < timedelta(seconds=rule.silence_seconds):
                continue
            quiet = int((now - last).total_seconds())
            raise_alert(job, link, state, AlertKind.SILENCE, state.last_multiple_step, None, rule.silence_seconds,
                   f"no point for {quiet} s (silence after {rule.silence_seconds} s)")
            state.save(update_fields=["holding"])
            raised.append(job.pk)
    return raised
