"""A real Celery worker runs jobs end to end against the real database and Redis."""
import signal

import pytest

from opdweb.jobs.actions import do_cancel_job, do_reap_stale_jobs, do_submit_job
from opdweb.jobs.models import Job, JobState
from opdweb.traces.models import TracePoint, TraceSeries
from tests.web.conftest import CEILING_S, wait_for
from workers.science.selftest import SELFTEST_KEYS, selftest_value


def points_of(job):
    """{key: [(step, value), ...]} in step order, read straight from the table."""
    out = {}
    for series in TraceSeries.objects.filter(job=job):
        out[series.key] = list(TracePoint.objects.filter(series_id=series.pk).order_by("step")
                               .values_list("step", "value"))
    return out


def state_of(job_id):
    return Job.objects.get(pk=job_id).state


def test_it_runs_a_selftest_from_queued_to_succeeded(member, start_worker, client):
    user, team = member
    worker = start_worker()
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 50, "sleep_s": 0.01})
    assert job.state == JobState.QUEUED
    wait_for(lambda: state_of(job.pk) in (JobState.RUNNING, JobState.SUCCEEDED), CEILING_S, "running",
             process=worker)
    wait_for(lambda: state_of(job.pk) == JobState.SUCCEEDED, CEILING_S, "succeeded", process=worker)

    job.refresh_from_db()
    assert job.worker.startswith("w1@test")
    assert job.progress == 1.0
    assert job.started_at <= job.finished_at
    assert job.result == {"steps": 50, "last": {"selftest/linear": 49.0, "selftest/square": 2401.0}}
    stored = points_of(job)
    for key in SELFTEST_KEYS:
        assert stored[key] == [(s, selftest_value(key, s)) for s in range(50)]
    assert job.log_entries.filter(message__contains="succeeded").exists()

    # The health check sees the worker (its details are for staff).
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    client.force_login(user)
    health = client.get("/healthz")
    assert health.status_code == 200, health.json()
    assert "w1@test" in health.json()["workers"]

    # A clean shutdown marks the worker stopped.
    worker.stop()
    from opdweb.health.models import WorkerPresence

    assert WorkerPresence.objects.get(name="w1@test").stopped


def test_it_records_a_failure_with_its_traceback(member, start_worker):
    user, team = member
    worker = start_worker()
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 20, "fail_at_step": 7})
    wait_for(lambda: state_of(job.pk) == JobState.FAILED, 60, "failed", process=worker)
    job.refresh_from_db()
    assert job.error == "RuntimeError: selftest failure requested at step 7"
    assert "run_selftest" in job.traceback
    # Points logged before the failure are kept.
    assert [s for s, _ in points_of(job)["selftest/linear"]] == list(range(7))


def test_it_cancels_a_running_job(member, start_worker):
    user, team = member
    worker = start_worker()
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 100000, "sleep_s": 0.01})
    wait_for(lambda: TracePoint.objects.count() >= 20, CEILING_S, "first points", process=worker)
    do_cancel_job(Job.objects.get(pk=job.pk))
    wait_for(lambda: state_of(job.pk) == JobState.CANCELLED, CEILING_S, "cancelled", process=worker)
    job.refresh_from_db()
    assert job.finished_at is not None
    assert len(points_of(job)["selftest/linear"]) < 100000


@pytest.mark.faults
def test_a_killed_worker_is_reaped_and_the_replay_writes_no_duplicates(member, start_worker, settings, service_env):
    settings.JOB_STALE_SECONDS = float(service_env["JOB_STALE_SECONDS"])
    user, team = member
    first = start_worker("w1")
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 300, "sleep_s": 0.02})
    wait_for(lambda: TracePoint.objects.count() >= 40, 60, "first points", process=first)
    first.kill(signal.SIGKILL)
    written_before = TracePoint.objects.count()
    assert 0 < written_before < 600
    assert state_of(job.pk) == JobState.RUNNING

    # Nothing is reaped while the heartbeat is fresh; after JOB_STALE_SECONDS it is.
    wait_for(lambda: do_reap_stale_jobs(), 30, "the reaper to take the job")
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.attempts == 2
    assert "lost: no heartbeat" in job.message

    second = start_worker("w2")
    wait_for(lambda: state_of(job.pk) == JobState.SUCCEEDED, 60, "the requeued job to finish", process=second)
    stored = points_of(job)
    for key in SELFTEST_KEYS:
        assert stored[key] == [(s, selftest_value(key, s)) for s in range(300)]


@pytest.mark.django_db
def test_the_reaper_fails_a_lost_job_with_no_attempts_left(member):
    from datetime import timedelta

    from django.utils import timezone

    user, team = member
    stale = timezone.now() - timedelta(hours=1)
    job = Job.objects.create(team=team, kind="selftest", config={"steps": 5}, state=JobState.RUNNING,
                             heartbeat_at=stale, worker="gone@host", attempts=3, max_attempts=3)
    fresh = Job.objects.create(team=team, kind="selftest", config={"steps": 5}, state=JobState.RUNNING,
                               heartbeat_at=timezone.now(), worker="alive@host")
    cancelling = Job.objects.create(team=team, kind="selftest", config={"steps": 5}, state=JobState.RUNNING,
                                    heartbeat_at=stale, worker="gone@host", cancel_requested=True)
    assert sorted(do_reap_stale_jobs()) == sorted([(job.pk, JobState.FAILED), (cancelling.pk, JobState.CANCELLED)])
    job.refresh_from_db()
    fresh.refresh_from_db()
    assert job.state == JobState.FAILED and "gone@host lost" in job.error
    assert fresh.state == JobState.RUNNING
