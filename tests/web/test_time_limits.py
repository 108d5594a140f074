"""Each kind's time limit is enforced on the solo-pool worker: a job that polls
``should_stop()`` stops at its limit; one that does not is killed with its worker after
the grace period.  Both are recorded as ``failed: time limit``."""
import time

import pytest

from opdweb.jobs.actions import do_submit_job
from opdweb.jobs.models import Job, JobState
from tests.web.conftest import wait_for

LIMITS = {"JOB_TIME_LIMIT_MAX_S": "2", "JOB_TIME_LIMIT_GRACE_S": "2"}


def finished(job_id):
    job = Job.objects.get(pk=job_id)
    return job if job.is_terminal else None


def test_a_job_that_polls_stops_at_its_limit_and_the_worker_lives_on(member, start_worker):
    user, team = member
    worker = start_worker(**LIMITS)
    started = time.monotonic()
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 100_000, "sleep_s": 0.05})
    job = wait_for(lambda: finished(job.pk), 30, "the time limit", process=worker)
    assert job.state == JobState.FAILED
    assert job.error == "time limit: stopped at its limit of 2 s"
    assert 2 <= (job.finished_at - job.started_at).total_seconds() < 4
    assert time.monotonic() - started < 30
    assert worker.alive()
    # The worker takes the next job.
    nxt = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 3})
    assert wait_for(lambda: finished(nxt.pk), 30, "the next job", process=worker).state == JobState.SUCCEEDED


@pytest.mark.faults
def test_a_job_that_never_polls_is_killed_with_its_worker(member, start_worker):
    user, team = member
    worker = start_worker(**LIMITS)
    # One step that sleeps 10 s: should_stop() is not asked again until it is over.
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 2, "sleep_s": 10})
    job = wait_for(lambda: finished(job.pk), 30, "the watchdog")
    assert job.state == JobState.FAILED
    assert job.error.startswith("time limit: did not stop within 2 s of its limit of 2 s")
    assert 4 <= (job.finished_at - job.started_at).total_seconds() < 8
    wait_for(lambda: not worker.alive(), 10, "the worker to be killed")
